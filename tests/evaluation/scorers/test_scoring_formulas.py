"""Hand-computed tiny cases for every metric formula in evaluation.scorers.metrics."""

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from sae_workbench.evaluation.scorers.metrics import (
    auroc,
    classification_metrics,
    mad,
    mann_whitney_p,
    mean_std,
    pearson,
    per_record_pearson,
    pooled_pearson,
    t_confidence_interval,
)


def test_pooled_and_per_record_correlation_differ_on_a_crafted_case() -> None:
    # Each record alone is perfectly correlated, but record B's predictions are offset by 5:
    # pooled pred [0,1,5,6] vs true [0,1,0,1]: centred dot = 1, |pred|² = 26, |true|² = 1 → r = 1/√26.
    pred = [np.array([0.0, 1.0]), np.array([5.0, 6.0])]
    true = [np.array([0.0, 1.0]), np.array([0.0, 1.0])]
    assert per_record_pearson(pred, true) == pytest.approx(1.0)
    assert pooled_pearson(pred, true) == pytest.approx(1 / math.sqrt(26))


def test_pearson_nan_when_true_constant_and_zero_when_prediction_constant() -> None:
    assert math.isnan(pearson(np.array([0.0, 1.0, 2.0]), np.zeros(3)))
    assert pearson(np.zeros(3), np.array([0.0, 1.0, 2.0])) == 0.0
    assert pearson(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)


def test_per_record_pearson_skips_constant_records() -> None:
    # Record 2 has constant truth → NaN, skipped; record 1 is perfectly anti-correlated.
    pred = [np.array([1.0, 0.0]), np.array([1.0, 2.0])]
    true = [np.array([0.0, 1.0]), np.array([0.0, 0.0])]
    assert per_record_pearson(pred, true) == pytest.approx(-1.0)


def test_auroc_with_ties_counts_half() -> None:
    # Positive/negative pairs: (0.5 vs 0.1)=1, (0.5 vs 0.5)=½, (0.9 vs 0.1)=1, (0.9 vs 0.5)=1 → 3.5 / 4.
    scores = np.array([0.1, 0.5, 0.5, 0.9])
    labels = np.array([0, 0, 1, 1])
    assert auroc(scores, labels) == pytest.approx(0.875)
    assert auroc(scores, labels) == pytest.approx(roc_auc_score(labels, scores))
    assert auroc(np.ones(4), labels) == pytest.approx(0.5)
    assert math.isnan(auroc(scores, np.ones(4)))


def test_mad_zero_std_and_hand_case() -> None:
    assert mad(np.array([2.0, 4.0]), np.array([1.0, 1.0, 1.0])) == 0.0
    # control [0,2]: mean 1, sample std (ddof 1, torch's Tensor.std() in lkopf/prism) √2; generated mean 4
    # → (4 − 1) / √2 = 2.1213 (the population std 1 would give 3).
    assert mad(np.array([3.0, 5.0]), np.array([0.0, 2.0])) == pytest.approx(3 / math.sqrt(2))
    assert mad(np.array([3.0]), np.array([5.0])) == 0.0  # one control value: no spread


def test_classification_metrics_hand_case() -> None:
    m = classification_metrics(np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, 1, 1]))
    assert (m.tp, m.fp, m.tn, m.fn) == (2, 1, 1, 1)
    assert m.accuracy == pytest.approx(0.6)
    assert m.f1 == pytest.approx(2 / 3)
    assert m.precision == pytest.approx(2 / 3)
    # recall 2/3, specificity 1/2 → balanced accuracy 7/12.
    assert m.balanced_accuracy == pytest.approx(7 / 12)


def test_classification_metrics_degenerate_cases() -> None:
    # Always saying "no" on a balanced set: accuracy ½, F1 0, balanced accuracy ½.
    m = classification_metrics(np.zeros(4), np.array([1, 1, 0, 0]))
    assert m.f1 == 0.0 and m.accuracy == 0.5 and m.balanced_accuracy == 0.5
    assert math.isnan(m.precision)
    # Only negatives, all correct: balanced accuracy is specificity alone, F1 undefined.
    m = classification_metrics(np.zeros(3), np.zeros(3))
    assert m.balanced_accuracy == 1.0 and math.isnan(m.f1)


def test_mann_whitney_exact_small_case() -> None:
    # U = 4 of 4 pairs; exact one-sided p = 1 / C(4, 2) = 1/6.
    assert mann_whitney_p(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == pytest.approx(1 / 6)
    assert mann_whitney_p(np.zeros(3), np.zeros(5)) == 1.0


def test_t_confidence_interval_hand_case() -> None:
    # [1,2,3]: mean 2, s = 1, t_{0.975, 2} = 4.302652729911275 → half width 4.3027 / √3.
    ci = t_confidence_interval([1.0, 2.0, 3.0, float("nan")])
    half = 4.302652729911275 / math.sqrt(3)
    assert ci.n == 3 and ci.mean == pytest.approx(2.0)
    assert (ci.low, ci.high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    single = t_confidence_interval([5.0])
    assert single.mean == 5.0 and math.isnan(single.low)


def test_mean_std() -> None:
    m, s = mean_std([1.0, 3.0])
    assert m == 2.0 and s == pytest.approx(math.sqrt(2))
