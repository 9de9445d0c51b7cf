"""CoSy description scores summarised by PRISM's Table 1 rules (Kopf et al., NeurIPS 2025, arXiv 2506.15538).

Input: one `DescriptionScore` per (feature, description), each with its CoSy AUC and MAD. The paper's Table 1 is
printed by the reference notebook (lkopf/prism `notebooks/results.ipynb`, cells 1 and 4) with two rules:

- "mean" (PRISM (mean), and every single-description baseline): the mean over ALL description rows, not over
  features. AUC is shown as mean (95% Student-t CI over the rows, standard error with ddof 1); MAD as
  mean ± the rows' standard deviation with ddof 1 (pandas' `Series.std`).
- "max" (PRISM (max)): per feature the max AUC and, separately, the max MAD over its descriptions; then AUC as
  mean (95% t CI over features) and MAD as mean ± the features' standard deviation with ddof 0 (numpy's
  `ndarray.std`, which the notebook calls on the per-feature maxima).

So "(a-b)" is always a t confidence interval of the mean, never a quantile range, and "±" a standard deviation.
The polysemanticity pair (.418 vs .359 for GPT-2 XL) is the mean over features of each feature's mean pairwise
cosine and of its random-description baseline.

    rows = [DescriptionScore(feature=7, auc=0.91, mad=2.4), DescriptionScore(feature=7, auc=0.55, mad=0.1), ...]
    s = summarise_cosy(rows, "max")
    s.auc_text(), s.mad_text()  # ("0.85 (0.78-0.91)", "2.98±3.16")
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.scorers.metrics import t_confidence_interval

Rule = Literal["mean", "max"]
RULES: tuple[Rule, ...] = ("mean", "max")

# Table 1's AUC interval: 95% Student-t (notebook `get_confidence_interval(data, confidence=0.95)`).
CONFIDENCE = 0.95
# MAD's "±": pandas Series.std (ddof 1) over description rows for "mean"; numpy ndarray.std (ddof 0) over the
# per-feature maxima for "max" (notebook `process_dataframe_for_metric`).
MAD_STD_DDOF: dict[Rule, int] = {"mean": 1, "max": 0}


class CosySummaryError(WorkbenchError):
    """Bad input to the CoSy summary (an unknown rule)."""


@dataclass(frozen=True)
class DescriptionScore:
    """CoSy scores of one description of one feature."""

    feature: Hashable
    """The feature it describes (an SAE feature index, or (layer, unit) for the paper's neurons)."""
    auc: float
    """CoSy AUC (control 0, generated 1); NaN when unscored."""
    mad: float
    """CoSy MAD, (mean A1 − mean A0) / std A0; NaN when unscored."""


@dataclass(frozen=True)
class CosySummary:
    """One Table 1 cell: AUC mean with its t CI, MAD mean ± SD, under one aggregation rule."""

    rule: Rule
    """"mean" (over description rows) or "max" (per-feature max, then over features)."""
    auc_mean: float
    """Mean AUC over the rule's units (rows or features); NaN when none."""
    auc_ci_low: float
    """Lower bound of the 95% t CI of that mean (NaN with fewer than 2 values)."""
    auc_ci_high: float
    """Upper bound."""
    mad_mean: float
    """Mean MAD over the rule's units."""
    mad_std: float
    """Standard deviation of those MADs (ddof 1 for "mean", 0 for "max"; see MAD_STD_DDOF)."""
    n: int
    """AUC values averaged: description rows ("mean") or features ("max")."""
    n_features: int
    """Distinct features among the rows."""
    n_descriptions: int
    """Description rows given (scored or not)."""

    def auc_text(self, digits: int = 2) -> str:
        """The AUC as Table 1 prints it, e.g. '0.85 (0.78-0.91)'."""
        return f"{_num(self.auc_mean, digits)} ({_num(self.auc_ci_low, digits)}-{_num(self.auc_ci_high, digits)})"

    def mad_text(self, digits: int = 2) -> str:
        """The MAD as Table 1 prints it, e.g. '2.98±3.16'."""
        return f"{_num(self.mad_mean, digits)}±{_num(self.mad_std, digits)}"


def _num(x: float, digits: int) -> str:
    """A number at `digits` decimals ('–' for NaN)."""
    return "–" if math.isnan(x) else f"{x:.{digits}f}"


def _finite(values: Iterable[float]) -> np.ndarray:
    """The finite values as a float64 array."""
    v = np.asarray(list(values), dtype=np.float64)
    return v[np.isfinite(v)]


def per_feature_max(rows: Sequence[DescriptionScore]) -> tuple[np.ndarray, np.ndarray]:
    """(max AUC per feature, max MAD per feature), each over the features with a finite value, in first-seen order.

    The two maxima are taken separately, as the notebook's `process_groups` does: a feature's best AUC and best
    MAD may come from different descriptions.
    """
    aucs: dict[Hashable, list[float]] = {}
    mads: dict[Hashable, list[float]] = {}
    for r in rows:
        aucs.setdefault(r.feature, []).append(r.auc)
        mads.setdefault(r.feature, []).append(r.mad)
    best_auc = [float(v.max()) for v in (_finite(a) for a in aucs.values()) if v.size]
    best_mad = [float(v.max()) for v in (_finite(m) for m in mads.values()) if v.size]
    return np.asarray(best_auc, dtype=np.float64), np.asarray(best_mad, dtype=np.float64)


def _std(values: np.ndarray, ddof: int) -> float:
    """Standard deviation with `ddof`; NaN when there are not more than ddof values."""
    return float(values.std(ddof=ddof)) if values.size > ddof else math.nan


def summarise_cosy(rows: Sequence[DescriptionScore], rule: Rule) -> CosySummary:
    """Table 1's AUC (95% t CI) and MAD (± SD) of description scores under the "mean" or "max" rule."""
    if rule not in RULES:
        raise CosySummaryError(f"rule must be one of {RULES}, not {rule!r}")
    if rule == "mean":
        auc, mad = _finite(r.auc for r in rows), _finite(r.mad for r in rows)
    else:
        auc, mad = per_feature_max(rows)
    ci = t_confidence_interval(auc, CONFIDENCE)
    mad_mean = float(mad.mean()) if mad.size else math.nan
    return CosySummary(
        rule=rule,
        auc_mean=ci.mean,
        auc_ci_low=ci.low,
        auc_ci_high=ci.high,
        mad_mean=mad_mean,
        mad_std=_std(mad, MAD_STD_DDOF[rule]),
        n=ci.n,
        n_features=len({r.feature for r in rows}),
        n_descriptions=len(rows),
    )


@dataclass(frozen=True)
class PolysemanticitySummary:
    """PRISM's polysemanticity pair: descriptions' mean pairwise cosine vs random descriptions', over features."""

    similarity: float
    """Mean over features of the mean pairwise cosine of their descriptions (lower = more polysemantic)."""
    random_baseline: float
    """Mean over features of the same for random descriptions of other features (NaN when none was computed)."""
    n_features: int
    """Features with a finite similarity."""


def summarise_polysemanticity(pairs: Sequence[tuple[float, float]]) -> PolysemanticitySummary:
    """Mean of each column of (similarity, random baseline) pairs over features, skipping non-finite values."""
    sims = _finite(p[0] for p in pairs)
    bases = _finite(p[1] for p in pairs)
    return PolysemanticitySummary(
        float(sims.mean()) if sims.size else math.nan,
        float(bases.mean()) if bases.size else math.nan,
        int(sims.size),
    )
