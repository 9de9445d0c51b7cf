"""Splitting and the shared-fraction curve checked against planted structure (no store)."""

from __future__ import annotations

import numpy as np
import pytest

from sae_workbench.evaluation.families.agreement import (
    THRESHOLDS,
    agreement_from_sums,
    flag_disagreement,
    shared_fraction_curve,
)
from sae_workbench.evaluation.families.matching import make_directions, match
from sae_workbench.evaluation.families.splitting import SPLIT_THRESHOLD, find_splits, split_tree
from tests.evaluation.families.family_store import SPLIT_OFFSET, split_rows


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """n random unit rows."""
    W = rng.standard_normal((n, d))
    return (W / np.linalg.norm(W, axis=1, keepdims=True)).astype(np.float32)


def test_planted_split_finds_exactly_the_ten_parents() -> None:
    rng = np.random.default_rng(0)
    dec_a = _unit(rng, 256, 64)
    parents = sorted(rng.choice(256, 10, replace=False).tolist())
    dec_b, where = split_rows(dec_a, parents, SPLIT_OFFSET, rng)
    link = match(make_directions(dec_b), make_directions(dec_a), "greedy")  # each wider feature's parent
    splits = find_splits(link, SPLIT_THRESHOLD)
    assert [s.parent for s in splits] == parents
    for s in splits:
        assert sorted(s.children) == sorted(where[s.parent])
        np.testing.assert_allclose(s.sims, 1 / np.sqrt(1 + SPLIT_OFFSET**2), rtol=1e-5)
    # Coverage decides: a parent whose children cover too little of its top windows is no split.
    covered = find_splits(link, SPLIT_THRESHOLD, coverage=lambda p, kids: 0.2 if p == parents[0] else 0.9)
    assert [s.parent for s in covered] == parents[1:]
    # A threshold above the children's cosine finds none; the documented one is between it and random cosines.
    assert find_splits(link, 0.85) == []


def test_split_tree_over_three_widths() -> None:
    rng = np.random.default_rng(1)
    w0 = _unit(rng, 40, 32)
    w1, s01 = split_rows(w0, [3, 7], SPLIT_OFFSET, rng)
    w2, s12 = split_rows(w1, [s01[3][1]], SPLIT_OFFSET, rng)
    links = [match(make_directions(w1), make_directions(w0), "greedy"),
             match(make_directions(w2), make_directions(w1), "greedy")]  # fmt: skip
    tree = split_tree(links, 3, annotate=lambda level, f: {"label": f"{level}:{f}"})
    assert tree.splits and sorted(c.feature for c in tree.children) == sorted(s01[3])
    grand = {c.feature: c for c in tree.children}[s01[3][1]]
    assert sorted(g.feature for g in grand.children) == sorted(s12[s01[3][1]])
    assert tree.info == {"label": "0:3"} and len(tree.walk()) == 6  # 3 -> (3 -> 3, 40 -> two)
    plain = split_tree(links, 5)
    assert not plain.splits and [c.feature for c in plain.children] == [5]  # kept as its own single child


def test_shared_fraction_curve_counts_dead_features_apart() -> None:
    partner = np.array([1, 0, 2, 3, -1])
    sim = np.array([0.96, 0.72, 0.5, 0.99, 0.0])
    dead_a = np.array([False, False, False, True, False])
    dead_b = np.array([False, False, True, False, False])
    curve = shared_fraction_curve(partner, sim, dead_a, dead_b)
    # Counted: features 0, 1 and 4 (3 is dead, 2's partner is dead; 4 is unmatched, so unshared).
    assert (curve.n_counted, curve.n_dead, curve.n_partner_dead) == (3, 1, 1)
    assert curve.thresholds == THRESHOLDS and len(THRESHOLDS) == 10
    assert curve.at(0.7) == pytest.approx(2 / 3) and curve.at(0.75) == pytest.approx(1 / 3)
    assert curve.at(0.95) == pytest.approx(1 / 3)


def test_agreement_from_sums_is_pearson_and_jaccard() -> None:
    rng = np.random.default_rng(2)
    x = np.where(rng.random(200) < 0.3, rng.random(200), 0.0)
    y = np.where(rng.random(200) < 0.3, rng.random(200), 0.0) + 0.5 * x
    sums = {
        "feature_a": [0], "feature_b": [0], "n_windows": [7], "n_tokens": [200],
        "sx": [x.sum()], "sxx": [(x * x).sum()], "sy": [y.sum()], "syy": [(y * y).sum()], "sxy": [(x * y).sum()],
        "top_a": [20], "top_b": [20], "top_both": [5],
    }  # fmt: skip
    g = agreement_from_sums(sums)
    assert g.act_corr[0] == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-9)
    assert g.top_jaccard[0] == pytest.approx(5 / 35)


def test_flags_similar_weights_with_different_activations_but_not_dead_pairs() -> None:
    sim = np.array([0.9, 0.9, 0.9, 0.9, 0.5])
    corr = np.array([0.8, 0.1, np.nan, np.nan, 0.0])
    n_windows = np.array(
        [10, 10, 4, 0, 10]
    )  # pair 2: one side silent where the other fires; pair 3: both dead
    assert flag_disagreement(sim, corr, 0.7, n_windows).tolist() == [False, True, True, False, False]
    assert flag_disagreement(sim, corr, 0.7).tolist() == [False, True, False, False, False]
