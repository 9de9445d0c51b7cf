"""The toy model of absorption (evaluation/toy_absorption.py) reproduces the paper's three findings."""

from dataclasses import replace

import pytest

from sae_workbench.evaluation.toy_absorption import ToyConfig, analytic_family, run_toy

CFG = ToyConfig(seed=0)


def test_independent_features_are_recovered_without_absorption() -> None:
    r = run_toy(CFG)
    assert sorted(r.feature_for_true) == [0, 1, 2, 3]  # one SAE feature per true feature
    assert min(r.decoder_cos_true) > 0.98
    assert r.absorption_fraction < 0.02
    assert r.full_absorption_rate < 0.02


def test_hierarchy_causes_absorption_at_p_child_given_parent() -> None:
    r = run_toy(replace(CFG, hierarchical=True))
    assert r.absorption_fraction == pytest.approx(0.2, abs=0.03)  # ≈ P(f1|f0)
    assert r.parent_encoder_cos_f0_minus_f1 > 0.85  # f0's encoder: "f0 and not f1"
    assert r.child_decoder_cos_f0_plus_f1 > 0.97  # f1's decoder absorbed f0's direction
    assert r.explained_variance > 0.98


def test_tied_weights_remove_absorption() -> None:
    r = run_toy(replace(CFG, hierarchical=True, tied=True))
    assert r.absorption_fraction < 0.02
    assert min(r.decoder_cos_true) > 0.98


@pytest.mark.parametrize("delta", [0.0, 0.25, 0.5, 1.0])
def test_analytic_family_reconstructs_perfectly(delta: float) -> None:
    err, l1 = analytic_family(delta, p11=0.05, p10=0.2)
    assert err < 1e-12
    assert l1 == pytest.approx(0.05 * (2 - delta) + 0.2)


def test_analytic_l1_is_lowest_at_full_absorption() -> None:
    costs = {d: analytic_family(d, p11=0.05, p10=0.2)[1] for d in [0.0, 0.3, 0.6, 0.9, 1.0]}
    assert min(costs, key=lambda d: costs[d]) == 1.0
