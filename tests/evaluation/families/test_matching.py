"""Matching checked against planted ground truth: a permuted copy, and the dense solver on small random SAEs."""

from __future__ import annotations

import numpy as np
import pytest

from sae_workbench.evaluation.families.matching import (
    MatchingError,
    dense_similarity,
    make_directions,
    match,
    top_k_candidates,
)


def _random_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """n random unit-free Gaussian rows."""
    return rng.standard_normal((n, d)).astype(np.float32)


def _permuted(rng: np.random.Generator, dec: np.ndarray, enc: np.ndarray, noise: float):
    """(B's decoder, B's encoder, perm) with B[perm[i]] = A[i] + noise."""
    perm = rng.permutation(dec.shape[0])
    dec_b, enc_b = np.empty_like(dec), np.empty_like(enc)
    dec_b[perm] = dec + noise * rng.standard_normal(dec.shape).astype(np.float32)
    enc_b[perm] = enc + noise * rng.standard_normal(enc.shape).astype(np.float32)
    return dec_b, enc_b, perm


@pytest.mark.parametrize("similarity", ["decoder", "encoder", "both"])
@pytest.mark.parametrize("method", ["hungarian", "greedy", "sinkhorn"])
def test_planted_permutation_is_recovered_exactly(method: str, similarity: str) -> None:
    rng = np.random.default_rng(0)
    dec, enc = _random_rows(rng, 384, 48), _random_rows(rng, 384, 48)
    dec_b, enc_b, perm = _permuted(rng, dec, enc, noise=0.05)
    a, b = make_directions(dec, enc), make_directions(dec_b, enc_b)
    m = match(a, b, method, similarity, k=8, block=100)
    assert np.array_equal(m.feature_a, np.arange(384))
    assert np.array_equal(m.feature_b, perm)
    # A little noise keeps every pair far above 0.9: the shared fraction at 0.9 is 1.
    assert float(m.sim.min()) > 0.9


def test_sparse_and_dense_hungarian_agree_on_random_saes() -> None:
    rng = np.random.default_rng(1)
    for d_a, d_b in ((200, 200), (150, 260), (260, 150)):
        a = make_directions(_random_rows(rng, d_a, 32))
        b = make_directions(_random_rows(rng, d_b, 32))
        sparse = match(a, b, "hungarian", solver="sparse", k=24)
        dense = match(a, b, "hungarian", solver="dense")
        assert sparse.solver == "sparse" and dense.solver == "dense"
        assert len(sparse.feature_a) == min(d_a, d_b)
        assert np.array_equal(sparse.feature_a, dense.feature_a)
        assert np.array_equal(sparse.feature_b, dense.feature_b)
        np.testing.assert_allclose(sparse.sim, dense.sim, rtol=1e-6)


def test_blocked_candidates_equal_the_dense_matrix_top_k() -> None:
    rng = np.random.default_rng(2)
    a = make_directions(_random_rows(rng, 130, 16), _random_rows(rng, 130, 16))
    b = make_directions(_random_rows(rng, 90, 16), _random_rows(rng, 90, 16))
    S = dense_similarity(a, b, "both")
    cands = top_k_candidates(a, b, "both", k=5, block=17)
    np.testing.assert_array_equal(cands.a_to_b_AK, np.argsort(-S, axis=1, kind="stable")[:, :5])
    np.testing.assert_array_equal(cands.b_to_a_BK, np.argsort(-S.T, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(cands.a_sim_AK, -np.sort(-S, axis=1)[:, :5], rtol=1e-6)


def test_bad_pairs_fail_with_typed_errors() -> None:
    rng = np.random.default_rng(3)
    a = make_directions(_random_rows(rng, 10, 8))
    with pytest.raises(MatchingError, match="same model and hook"):
        match(a, make_directions(_random_rows(rng, 10, 9)))
    with pytest.raises(MatchingError, match="encoders"):
        match(a, make_directions(_random_rows(rng, 10, 8)), similarity="encoder")
    with pytest.raises(MatchingError, match="GiB"):
        match(a, a, "sinkhorn", dense_max_bytes=10)
    with pytest.raises(MatchingError, match="unknown matching method"):
        match(a, a, "magic")
