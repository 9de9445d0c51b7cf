"""Hand-computed cases for SAEBench's absorption definitions (evaluation/absorption/eval.py)."""

import pytest
import torch

from sae_workbench.evaluation.absorption.eval import (
    AbsorptionThresholds,
    LetterAbsorption,
    ProbeTooWeakError,
    absorbing_features,
    absorption_fraction,
    aggregate_letters,
    is_full_absorption,
    letter_summary,
    score_words,
)


@pytest.mark.parametrize(
    ("a", "m", "big_a", "expected"),
    [
        (1.0, 1.0, 0.9, 0.0),  # M ≥ a: the main features explain the probe
        (1.0, 1.2, 0.9, 0.0),  # M > a
        (1.0, 0.2, 0.3, 0.0),  # A/a = 0.3 < 0.4: absorbers too weak
        (1.0, 0.0, 0.5, 1.0),  # M ≤ 0 with strong absorbers: full fraction
        (1.0, -0.1, 0.5, 1.0),  # M < 0
        (1.0, 0.5, 0.8, 0.5),  # x = min(0.8, 0.5) = 0.5 → 0.5 / (0.5 + 0.5)
        (2.0, 0.5, 1.0, 1.0 / 1.5),  # x = min(1.0, 1.5) = 1.0 → 1 / 1.5
        (1.0, 0.1, 0.4, 0.8),  # A/a exactly 0.4 passes; x = 0.4 → 0.4 / 0.5
        (0.0, -0.5, 0.5, 0.0),  # a = 0: no probe signal (SAEBench would divide by zero)
        (-1.0, -2.0, 0.5, 0.0),  # a < 0
    ],
)
def test_absorption_fraction_branches(a: float, m: float, big_a: float, expected: float) -> None:
    assert absorption_fraction(a, m, big_a) == pytest.approx(expected)


def test_full_absorption_branches() -> None:
    t = AbsorptionThresholds()
    assert is_full_absorption(1.0, [0.0], 0.5, 0.5, t)
    assert not is_full_absorption(1.0, [0.01], 0.5, 0.5, t)  # a main feature fires
    assert not is_full_absorption(1.0, [0.0], 0.5, 0.02, t)  # top feature not aligned (cos < 0.025)
    assert not is_full_absorption(-1.0, [0.0], 0.5, 0.5, t)  # probe not activated
    assert not is_full_absorption(1.0, [0.0], 0.39, 0.5, t)  # top projection < 0.4·a
    assert is_full_absorption(1.0, [0.0], 0.4, 0.025, t)  # both thresholds are inclusive
    assert is_full_absorption(1.0, [], 0.5, 0.5, t)  # no main features: vacuously silent


def test_score_words_hand_case() -> None:
    cos_F = torch.tensor([0.9, 0.5, 0.05, 0.2, -0.3])
    acts_NF = torch.tensor([[0.0, 1.0, 2.0, 0.5, 1.0], [0.5, 1.0, 0.0, 0.0, 0.0]])
    words = score_words(acts_NF, torch.tensor([1.0, 1.0]), cos_F, [0], ["sun", "sea"], "s")
    first, second = words
    # proj = [0, .5, .1, .1, -.3]; absorbers: f1 (.5) and f3 (.1); f2 has cos .05 < .1 → A = .6, M = 0 → 1.
    assert first.absorption_fraction == pytest.approx(1.0)
    assert first.is_full_absorption
    assert first.absorbing_feature_ids == [1]
    assert first.top_feature_ids[:3] == [1, 2, 3] or first.top_feature_ids[:3] == [1, 3, 2]
    # proj = [.45, .5, 0, 0, 0]: M = .45, A = .5 → x = min(.5, .55) = .5 → .5 / .95
    assert second.absorption_fraction == pytest.approx(0.5 / 0.95)
    assert not second.is_full_absorption
    assert second.absorbing_feature_ids == [1]
    assert second.main_feature_acts == [0.5]


def test_letter_summary_and_aggregate() -> None:
    words = score_words(
        torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, 0.0]]),
        torch.tensor([1.0, 1.0, 1.0, 1.0]),
        torch.tensor([1.0, 0.8]),
        [0],
        ["a1", "a2", "a3", "a4"],
        "a",
    )
    s = letter_summary("a", 0.9, [0], words)
    # word 1 absorbed (fraction 1, full); words 2-3 explained by the main feature; word 4 nothing fires.
    assert s.num_probe_true_positives == 4
    assert s.num_full_absorption == 1
    assert s.mean_absorption_fraction == pytest.approx(0.25)
    assert s.full_absorption_rate == pytest.approx(0.25)
    assert s.num_split_features == 1 and s.included
    weak = letter_summary("b", 0.6, [3, 4], words)  # F1 must exceed 0.6 strictly
    assert not weak.included
    metrics = aggregate_letters([s, weak], min_letters=1)
    assert metrics.mean_absorption_fraction_score == pytest.approx(0.25)
    assert metrics.mean_num_split_features == 1.0
    assert metrics.std_dev_absorption_fraction_score == 0.0
    feats = absorbing_features(words)
    assert [(f.feature_id, f.letter, f.tokens) for f in feats] == [(1, "a", ["a1"])]


def test_aggregate_refuses_with_f1s() -> None:
    letters = [
        LetterAbsorption(c, f1, f1 > 0.6, [0], 1, 10, 0, 0.0, 0.0)
        for c, f1 in zip("abc", [0.9, 0.5, 0.55], strict=True)
    ]
    with pytest.raises(ProbeTooWeakError, match=r"only 1 .*need 2.*b=0\.50, c=0\.55"):
        aggregate_letters(letters, min_letters=2)
