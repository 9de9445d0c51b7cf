"""Pure metric functions shared by every scorer: correlation, classification, ranking and effect-size metrics.

Nothing here touches the store, a model or an LLM; every function takes arrays and returns numbers, so each
formula has a hand-computed unit test (tests/evaluation/scorers/test_scoring_formulas.py).

    >>> pooled_pearson([np.array([0.0, 1.0]), np.array([0.0, 0.0])], [np.array([0.0, 2.0]), np.array([0.0, 0.0])])
    1.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

# Moved to the core so absorption (a peer of the scorers) shares it; re-exported for the scorers' callers.
from sae_workbench.stats import MeanCI as MeanCI
from sae_workbench.stats import t_confidence_interval as t_confidence_interval

# Tree-explainer spec (Ma et al., NeurIPS 2025): the score is NaN when the true activations have variance < 1e-10.
TRUE_VARIANCE_EPS = 1e-10
# PRISM's MAD divides by the control activations' sample standard deviation: torch's Tensor.std() is unbiased
# (lkopf/prism src/evaluation.py:359,364).
MAD_CONTROL_DDOF = 1


def pearson(predicted: np.ndarray, true: np.ndarray) -> float:
    """Pearson correlation of two equal-length vectors.

    NaN when the true values have variance < 1e-10 (nothing to explain; tree-explainer spec). 0.0 when the
    predictions are constant: an explanation that predicts the same value everywhere (e.g. one that never fires)
    carries no information, and scoring it 0 keeps it comparable instead of dropping it as NaN.
    """
    p = np.asarray(predicted, dtype=np.float64).ravel()
    t = np.asarray(true, dtype=np.float64).ravel()
    if p.shape != t.shape:
        raise ValueError(f"predicted has {p.size} values but true has {t.size}")
    if t.size == 0 or t.var() < TRUE_VARIANCE_EPS:
        return math.nan
    if p.var() < TRUE_VARIANCE_EPS:
        return 0.0
    pc, tc = p - p.mean(), t - t.mean()
    return float(np.dot(pc, tc) / math.sqrt(float(np.dot(pc, pc)) * float(np.dot(tc, tc))))


def pooled_pearson(predicted: Sequence[np.ndarray], true: Sequence[np.ndarray]) -> float:
    """Pearson correlation over all tokens of all records concatenated (the tree paper's score, not a per-record mean)."""
    if len(predicted) != len(true):
        raise ValueError(f"{len(predicted)} predicted records but {len(true)} true records")
    if not predicted:
        return math.nan
    return pearson(
        np.concatenate([np.ravel(p) for p in predicted]), np.concatenate([np.ravel(t) for t in true])
    )


def per_record_pearson(predicted: Sequence[np.ndarray], true: Sequence[np.ndarray]) -> float:
    """Mean over records of each record's own Pearson correlation, skipping NaN records (NaN if all are NaN).

    Shown next to the pooled score because it ignores between-record differences: an explanation that fires on
    every negative record can still look perfect per record.
    """
    if len(predicted) != len(true):
        raise ValueError(f"{len(predicted)} predicted records but {len(true)} true records")
    values = [pearson(p, t) for p, t in zip(predicted, true, strict=True)]
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


@dataclass(frozen=True)
class ClassificationMetrics:
    """Binary classification results (label 1 = the window/highlight activates the feature)."""

    n: int
    """Number of items classified."""
    tp: int
    """True positives."""
    fp: int
    """False positives."""
    tn: int
    """True negatives."""
    fn: int
    """False negatives."""
    accuracy: float
    """(tp + tn) / n; higher is better."""
    precision: float
    """tp / (tp + fp); NaN when nothing was predicted positive."""
    recall: float
    """tp / (tp + fn) (true-positive rate); NaN when there are no positives."""
    f1: float
    """2·tp / (2·tp + fp + fn); 0 when tp = 0 and there are positives or false positives, NaN when all four are 0."""
    balanced_accuracy: float
    """Mean of recall and specificity (tn / (tn + fp)); the rate of a missing class is left out."""

    def to_dict(self) -> dict[str, float | int]:
        """Plain dict for the store's metrics JSON."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _ratio(num: int, den: int) -> float:
    """num / den, NaN when den is 0."""
    return num / den if den else math.nan


def classification_metrics(predicted: np.ndarray, labels: np.ndarray) -> ClassificationMetrics:
    """Accuracy, precision, recall, F1 and balanced accuracy of boolean predictions against boolean labels."""
    p = np.asarray(predicted, dtype=bool).ravel()
    y = np.asarray(labels, dtype=bool).ravel()
    if p.shape != y.shape:
        raise ValueError(f"{p.size} predictions but {y.size} labels")
    tp = int(np.sum(p & y))
    fp = int(np.sum(p & ~y))
    tn = int(np.sum(~p & ~y))
    fn = int(np.sum(~p & y))
    rates = [r for r in (_ratio(tp, tp + fn), _ratio(tn, tn + fp)) if not math.isnan(r)]
    return ClassificationMetrics(
        n=int(p.size),
        tp=tp,
        fp=fp,
        tn=tn,
        fn=fn,
        accuracy=_ratio(tp + tn, int(p.size)),
        precision=_ratio(tp, tp + fp),
        recall=_ratio(tp, tp + fn),
        f1=_ratio(2 * tp, 2 * tp + fp + fn),
        balanced_accuracy=float(np.mean(rates)) if rates else math.nan,
    )


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve; ties count one half (the Mann–Whitney U / (n1·n0) form). NaN with one class only."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=bool).ravel()
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores but {y.size} labels")
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return math.nan
    ranks = stats.rankdata(s)  # average ranks: tied scores share the mean of their ranks
    u1 = float(ranks[y].sum()) - n1 * (n1 + 1) / 2
    return u1 / (n1 * n0)


def mad(generated: np.ndarray, control: np.ndarray) -> float:
    """CoSy's mean activation difference (mean(A1) − mean(A0)) / std(A0), 0 when std(A0) = 0 (PRISM spec).

    std is the sample standard deviation (ddof = 1, `MAD_CONTROL_DDOF`), as torch's `Tensor.std()` in the PRISM
    reference code (lkopf/prism src/evaluation.py:359,364); a single control value has no spread and gives 0.
    """
    a1 = np.asarray(generated, dtype=np.float64).ravel()
    a0 = np.asarray(control, dtype=np.float64).ravel()
    if a1.size == 0 or a0.size == 0:
        raise ValueError("MAD needs at least one generated and one control value")
    sd = float(a0.std(ddof=MAD_CONTROL_DDOF)) if a0.size > MAD_CONTROL_DDOF else 0.0
    if sd == 0.0:
        return 0.0
    return float((a1.mean() - a0.mean()) / sd)


def mann_whitney_p(generated: np.ndarray, control: np.ndarray) -> float:
    """One-sided Mann–Whitney U p-value that generated values are larger than control values (1.0 if all tie)."""
    a1 = np.asarray(generated, dtype=np.float64).ravel()
    a0 = np.asarray(control, dtype=np.float64).ravel()
    if a1.size == 0 or a0.size == 0:
        raise ValueError("Mann–Whitney needs at least one generated and one control value")
    if np.all(np.concatenate([a1, a0]) == a1[0]):
        return 1.0
    return float(stats.mannwhitneyu(a1, a0, alternative="greater").pvalue)


def mean_std(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1) of the finite values; NaN where undefined."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else math.nan
