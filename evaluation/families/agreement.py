"""Whether geometrically matched features also agree in what they do, and how many features two SAEs share.

    table = agreement_from_sums(store.agreement_sums(match_key, 0, 512, TOP_WINDOWS))
    curve = shared_fraction_curve(sim_A, dead_A)       # fraction of live A features whose match clears each threshold
    curve.at(0.7)

Functional agreement of a matched pair (spec "Functional agreement"), from the activations the store holds when both
SAEs were indexed over the same windows: the Pearson correlation of the two features' per-token activations over the
windows where either fires (every counted token of those windows, zeros included), and the Jaccard overlap of their
top-`TOP_WINDOWS` windows by max activation. A pair that clears the similarity threshold but whose activations do not
correlate is *flagged* (`flag_disagreement`), not hidden.

Shared fraction (Paulo & Belrose, arXiv 2501.16615): the fraction of features whose one-to-one match clears a
similarity threshold, as a curve over `THRESHOLDS`. Dead features (never active over the indexed tokens) are counted
apart, never as unshared: they leave the denominator, as do live features whose partner is dead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

THRESHOLDS: tuple[float, ...] = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))
"""0.50, 0.55, …, 0.95: the shared-fraction curve's thresholds (spec: 0.5 to 0.95)."""
QUOTED_THRESHOLD = 0.7
"""The threshold most often quoted for "shared" (spec; reported next to the whole curve)."""
TOP_WINDOWS = 20
"""Top windows per feature compared by Jaccard (the dashboard's top-example count)."""
MIN_AGREEING_CORR = 0.3
"""A pair above the similarity threshold with activation correlation below this is flagged as geometric-only (our
choice: well above the ~0 correlation of unrelated sparse features, well below matched seeds' typical values)."""


@dataclass(frozen=True)
class SharedCurve:
    """The shared fraction of one pair of SAEs over thresholds."""

    thresholds: tuple[float, ...]
    fractions: tuple[float, ...]
    """Fraction of counted A features whose match clears each threshold."""
    n_counted: int
    """Live A features with a live (or unmatched) partner: the denominator."""
    n_dead: int
    """A features that never fired (counted apart)."""
    n_partner_dead: int
    """Live A features whose partner never fired (counted apart)."""

    def at(self, threshold: float) -> float:
        """The fraction at one of the curve's thresholds."""
        for t, f in zip(self.thresholds, self.fractions, strict=True):
            if abs(t - threshold) < 1e-9:
                return f
        raise KeyError(f"threshold {threshold} is not on the curve {self.thresholds}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "thresholds": list(self.thresholds),
            "fractions": list(self.fractions),
            "n_counted": self.n_counted,
            "n_dead": self.n_dead,
            "n_partner_dead": self.n_partner_dead,
        }


def shared_fraction_curve(
    partner_A: np.ndarray,
    sim_A: np.ndarray,
    dead_A: np.ndarray | None = None,
    dead_B: np.ndarray | None = None,
    thresholds: tuple[float, ...] = THRESHOLDS,
) -> SharedCurve:
    """The shared-fraction curve from each A feature's partner (−1: unmatched, counted as unshared) and similarity.

    dead_A / dead_B are boolean masks over each SAE's features (None: every feature counts as live).
    """
    partner = np.asarray(partner_A, dtype=np.int64)
    sim = np.where(partner >= 0, np.asarray(sim_A, dtype=np.float64), -np.inf)
    dead_a = np.zeros(len(partner), dtype=bool) if dead_A is None else np.asarray(dead_A, dtype=bool)
    partner_dead = np.zeros(len(partner), dtype=bool)
    if dead_B is not None:
        matched = partner >= 0
        partner_dead[matched] = np.asarray(dead_B, dtype=bool)[partner[matched]]
    partner_dead &= ~dead_a
    counted = ~dead_a & ~partner_dead
    n = int(counted.sum())
    fractions = tuple(float((sim[counted] >= t).sum() / n) if n else 0.0 for t in thresholds)
    return SharedCurve(tuple(thresholds), fractions, n, int(dead_a.sum()), int(partner_dead.sum()))


@dataclass(frozen=True)
class Agreement:
    """Functional agreement of matched pairs (arrays aligned with feature_a)."""

    feature_a: np.ndarray
    feature_b: np.ndarray
    act_corr: np.ndarray
    """Pearson correlation (NaN where undefined: a feature constant over the windows, or neither fires)."""
    top_jaccard: np.ndarray
    """Jaccard overlap of top windows (NaN where neither fires)."""
    n_windows: np.ndarray
    """Windows where either fires."""


def agreement_from_sums(sums: Any) -> Agreement:
    """Correlation and Jaccard from `Store.agreement_sums`'s columns (an Arrow table or a dict of arrays)."""

    def col(name: str) -> np.ndarray:
        """One column as float64 (int64 for ids)."""
        c = sums[name]
        values = c.to_numpy() if hasattr(c, "to_numpy") else np.asarray(c)
        return np.asarray(values)

    n = col("n_tokens").astype(np.float64)
    sx, sxx, sy, syy, sxy = (col(k).astype(np.float64) for k in ("sx", "sxx", "sy", "syy", "sxy"))
    with np.errstate(divide="ignore", invalid="ignore"):
        mx, my = sx / n, sy / n
        cov = sxy / n - mx * my
        var_x, var_y = sxx / n - mx * mx, syy / n - my * my
        ok = (n > 0) & (var_x > 1e-12) & (var_y > 1e-12)
        corr = np.where(ok, cov / np.sqrt(np.where(ok, var_x * var_y, 1.0)), np.nan)
        top_a, top_b, both = (col(k).astype(np.float64) for k in ("top_a", "top_b", "top_both"))
        union = top_a + top_b - both
        jac = np.where(union > 0, both / np.where(union > 0, union, 1.0), np.nan)
    return Agreement(
        col("feature_a").astype(np.int64),
        col("feature_b").astype(np.int64),
        np.clip(corr, -1.0, 1.0),
        jac,
        col("n_windows").astype(np.int64),
    )


def flag_disagreement(
    sim: np.ndarray,
    act_corr: np.ndarray,
    threshold: float,
    n_windows: np.ndarray | None = None,
    min_corr: float = MIN_AGREEING_CORR,
) -> np.ndarray:
    """Pairs that clear the similarity threshold but whose activations correlate below `min_corr`. An undefined
    correlation (one side never fires where the other does) counts as disagreement where `n_windows` says some
    window saw either fire; pairs where neither ever fires are dead, counted apart, never flagged."""
    corr = np.asarray(act_corr, dtype=np.float64)
    defined = ~np.isnan(corr)
    low = defined & (np.where(defined, corr, 0.0) < min_corr)
    if n_windows is not None:
        low |= ~defined & (np.asarray(n_windows) > 0)
    return (np.asarray(sim) >= threshold) & low
