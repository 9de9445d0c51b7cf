"""Explainers × scorers comparison table of one SAE's feature set, as Markdown or CSV.

One row per (explainer, scorer, negative source): the mean of the scorer's headline metric over the features scored
OK, its 95% t CI, and how many scores were recorded as failures (no activations, unscorable explanation). A second
table shows, per explainer and scorer, how much close negatives (SIMILAR_NEGATIVE) lower the score compared with
RANDOM ones, over the features scored under both (tree paper: random negatives hide false positives).

    rows = collect_rows(store, sae_id);  print(render_markdown(rows, negative_deltas(store, sae_id)))
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from evaluation.scoring import t_confidence_interval
from workbench.store import Store

# Headline metric of each scorer and its direction (every number says which way is better).
HEADLINE = {
    "simulation": "pearson",
    "detection": "balanced_accuracy",
    "fuzzing": "balanced_accuracy",
    "embedding": "auroc",
    "cosy": "auc",
}


@dataclass(frozen=True)
class ReportRow:
    """One explainer × scorer × negative-source cell."""

    explainer: str
    """Explainer name."""
    scorer: str
    """Scorer name."""
    negative_source: str
    """Negative source ('' for cosy)."""
    metric: str
    """Headline metric (higher is better for all of them)."""
    mean: float
    """Mean over features scored OK (NaN-valued scores excluded)."""
    ci_low: float
    """95% t CI lower bound."""
    ci_high: float
    """95% t CI upper bound."""
    n_features: int
    """Scores averaged."""
    n_failed: int
    """Scores recorded with a non-ok status."""
    false_positive_tokens: float
    """Mean false-positive tokens per feature (simulation only; NaN otherwise; lower is better)."""


@dataclass(frozen=True)
class NegativeDelta:
    """How much close negatives lower a score vs random negatives, paired over features."""

    explainer: str
    """Explainer name."""
    scorer: str
    """Scorer name."""
    metric: str
    """Headline metric."""
    random: float
    """Mean under RANDOM."""
    similar_negative: float
    """Mean under SIMILAR_NEGATIVE."""
    delta: float
    """similar_negative − random (negative = close negatives lower the score)."""
    n_features: int
    """Features scored OK under both."""


def _values(store: Store, sae_id: str, features: set[int] | None):
    """{(explainer, scorer, source): {"ok": {feature: value}, "fp": [...], "failed": n}} from the store."""
    out: dict[tuple[str, str, str], dict] = defaultdict(lambda: {"ok": {}, "fp": [], "failed": 0})
    explanations = {e.id: e for e in store.explanations(sae_id=sae_id)}
    for s in store.scores(sae_id=sae_id):
        e = explanations.get(s.explanation_id)
        if e is None or (features is not None and e.feature not in features) or s.scorer not in HEADLINE:
            continue
        cell = out[(e.explainer, s.scorer, s.negative_source)]
        if s.metrics.get("status", "ok") != "ok":
            cell["failed"] += 1
            continue
        v = s.metrics.get(HEADLINE[s.scorer])
        if v is not None and not math.isnan(float(v)):
            cell["ok"][e.feature] = float(v)  # the latest score of a feature wins
        if "false_positive_tokens" in s.metrics:
            cell["fp"].append(float(s.metrics["false_positive_tokens"]))
    return out


def collect_rows(store: Store, sae_id: str, features: list[int] | None = None) -> list[ReportRow]:
    """Every explainer × scorer × negative source cell of an SAE (optionally restricted to some features)."""
    cells = _values(store, sae_id, set(features) if features is not None else None)
    rows = []
    for (explainer, scorer, source), cell in sorted(cells.items()):
        ci = t_confidence_interval(list(cell["ok"].values()))
        fp = float(np.mean(cell["fp"])) if cell["fp"] else math.nan
        rows.append(
            ReportRow(
                explainer,
                scorer,
                source,
                HEADLINE[scorer],
                ci.mean,
                ci.low,
                ci.high,
                ci.n,
                cell["failed"],
                fp,
            )
        )
    return rows


def negative_deltas(store: Store, sae_id: str, features: list[int] | None = None) -> list[NegativeDelta]:
    """SIMILAR_NEGATIVE − RANDOM per explainer and scorer, over features scored under both."""
    cells = _values(store, sae_id, set(features) if features is not None else None)
    out = []
    for explainer, scorer in sorted({(k[0], k[1]) for k in cells}):
        rand = cells.get((explainer, scorer, "RANDOM"), {"ok": {}})["ok"]
        close = cells.get((explainer, scorer, "SIMILAR_NEGATIVE"), {"ok": {}})["ok"]
        common = sorted(set(rand) & set(close))
        if not common:
            continue
        r = float(np.mean([rand[f] for f in common]))
        c = float(np.mean([close[f] for f in common]))
        out.append(NegativeDelta(explainer, scorer, HEADLINE[scorer], r, c, c - r, len(common)))
    return out


def _fmt(x: float, digits: int = 3) -> str:
    """A number for a table ('–' for NaN)."""
    return "–" if x is None or math.isnan(x) else f"{x:.{digits}f}"


def render_markdown(rows: list[ReportRow], deltas: list[NegativeDelta], title: str = "") -> str:
    """Both tables as Markdown."""
    lines = [f"# {title}", ""] if title else []
    lines += [
        "Higher is better for every metric except false-positive tokens. CI = 95% Student-t interval over features.",
        "",
        "| explainer | scorer | negatives | metric | mean | 95% CI | features | failed | FP tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]"
        lines.append(
            f"| {r.explainer} | {r.scorer} | {r.negative_source or '–'} | {r.metric} | {_fmt(r.mean)} | {ci} | "
            f"{r.n_features} | {r.n_failed} | {_fmt(r.false_positive_tokens, 1)} |"
        )
    lines += [
        "",
        "Close vs random negatives (paired over features; negative Δ = close negatives lower the score):",
        "",
        "| explainer | scorer | metric | RANDOM | SIMILAR_NEGATIVE | Δ | features |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in deltas:
        lines.append(
            f"| {d.explainer} | {d.scorer} | {d.metric} | {_fmt(d.random)} | {_fmt(d.similar_negative)} | "
            f"{_fmt(d.delta)} | {d.n_features} |"
        )
    if not deltas:
        lines.append("| – | – | – | – | – | – | 0 |")
    return "\n".join(lines) + "\n"


def render_csv(rows: list[ReportRow], deltas: list[NegativeDelta]) -> str:
    """One CSV: the cells, then the deltas as rows whose negative_source is 'SIMILAR_NEGATIVE-RANDOM'."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        [
            "explainer",
            "scorer",
            "negative_source",
            "metric",
            "mean",
            "ci_low",
            "ci_high",
            "n_features",
            "n_failed",
            "false_positive_tokens",
        ]
    )
    for r in rows:
        w.writerow(
            [
                r.explainer,
                r.scorer,
                r.negative_source,
                r.metric,
                r.mean,
                r.ci_low,
                r.ci_high,
                r.n_features,
                r.n_failed,
                r.false_positive_tokens,
            ]
        )
    for d in deltas:
        w.writerow(
            [
                d.explainer,
                d.scorer,
                "SIMILAR_NEGATIVE-RANDOM",
                d.metric,
                d.delta,
                "",
                "",
                d.n_features,
                "",
                "",
            ]
        )
    return buf.getvalue()
