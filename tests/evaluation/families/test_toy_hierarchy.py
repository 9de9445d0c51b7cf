"""The toy absorption model (Chanin et al., arXiv 2409.14507) seen through family matching: in the hierarchical
variant the parent's direction f0 reaches two SAE features (its own and the child's, whose decoder absorbed f0), and
the child's feature is the one f1 matches; with independent features each true feature reaches one SAE feature."""

from __future__ import annotations

import numpy as np
import pytest

from sae_workbench.evaluation.absorption.toy import ToyConfig, train_toy_sae, true_features
from sae_workbench.evaluation.families.matching import make_directions, top_k_candidates

pytestmark = pytest.mark.slow  # two toy SAEs, ~10 s of CPU each

THRESHOLD = 0.5
"""Between an absorbed parent's cosine with the child's decoder (f0 + f1 normalised: 1/√2) and unrelated ones (~0)."""


def _reach(hierarchical: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each true feature: how many SAE features have decoder cosine ≥ THRESHOLD, the best one, the runner-up's
    index."""
    cfg = ToyConfig(hierarchical=hierarchical)
    feats_FD = true_features(cfg)
    sae = train_toy_sae(cfg, feats_FD)
    cands = top_k_candidates(
        make_directions(feats_FD.numpy()), make_directions(sae.W_dec_FD.detach().numpy()), k=2
    )
    return (cands.a_sim_AK >= THRESHOLD).sum(axis=1), cands.a_to_b_AK[:, 0], cands.a_to_b_AK[:, 1]


def test_hierarchical_toy_shows_its_parent_child_structure() -> None:
    n_indep, _, _ = _reach(False)
    assert n_indep.tolist() == [1, 1, 1, 1]
    n_hier, best, second = _reach(True)
    assert n_hier.tolist() == [2, 1, 1, 1]  # only the parent f0 reaches two SAE features
    assert second[0] == best[1]  # ... and the second one is the child f1's own feature
