"""Seeded KMeans for PRISM's clustering step: the algorithm of sklearn's `KMeans(n_init=10)`, without its per-call
overhead.

    labels_N = kmeans_labels(embeddings_ND, k=5, seed=0)   # == KMeans(5, random_state=0, n_init=10).fit_predict(...)

sklearn spends ~3 ms per restart on input validation, array-API dispatch in k-means++ and a threadpoolctl context
around every Lloyd run — 30–130 ms per feature for 60 texts on this machine, against well under a millisecond of
arithmetic. Here the steps are sklearn's own: the data are centred, k-means++ (greedy, 2 + ln k local trials,
distances upcast to float64 as sklearn does) is re-implemented draw for draw on the same `RandomState`, the Lloyd
iterations are sklearn's compiled `_kmeans_single_lloyd` (called unwrapped, single-threaded), and the best run is
picked by inertia with sklearn's same-clustering check. tests/test_prism_parts.py checks that the labels equal
`KMeans(...).fit_predict` on several inputs; if sklearn's private helpers move, `kmeans_labels` falls back to
`KMeans` itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# sklearn's KMeans defaults.
MAX_ITER = 300
TOL = 1e-4


def _sklearn_helpers() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """(unwrapped single Lloyd run, same-clustering check) from sklearn, or None when they are not there."""
    try:
        from sklearn.cluster._kmeans import _is_same_clustering, _kmeans_single_lloyd
    except ImportError:
        return None
    return getattr(_kmeans_single_lloyd, "__wrapped__", _kmeans_single_lloyd), _is_same_clustering


def _row_norms_sq(X_ND: np.ndarray) -> np.ndarray:
    """Squared row norms (sklearn's row_norms(squared=True))."""
    return np.einsum("ij,ij->i", X_ND, X_ND)


def _sq_distances(A_MD: np.ndarray, X_ND: np.ndarray, x_sq_N: np.ndarray) -> np.ndarray:
    """(M, N) squared distances as sklearn's `_euclidean_distances(..., squared=True)` computes them."""
    if X_ND.dtype == np.float32:
        # sklearn upcasts float32 to float64 and recomputes the norms there, then stores float32.
        A64, X64 = A_MD.astype(np.float64), X_ND.astype(np.float64)
        d = -2 * (A64 @ X64.T)
        d += _row_norms_sq(A64)[:, None]
        d += _row_norms_sq(X64)[None, :]
        out = d.astype(np.float32)
    else:
        out = -2 * (A_MD @ X_ND.T)
        out += _row_norms_sq(A_MD)[:, None]
        out += x_sq_N[None, :]
    np.maximum(out, 0, out=out)
    return out


def _kmeans_plusplus(
    X_ND: np.ndarray, k: int, x_sq_N: np.ndarray, weight_N: np.ndarray, rng: np.random.RandomState
) -> np.ndarray:
    """(k, D) initial centres: sklearn's greedy k-means++ (Arthur & Vassilvitskii 2007), same draws."""
    n = X_ND.shape[0]
    centers_KD = np.empty((k, X_ND.shape[1]), dtype=X_ND.dtype)
    n_local_trials = 2 + int(np.log(k))
    first = rng.choice(n, p=weight_N / weight_N.sum())
    centers_KD[0] = X_ND[first]
    closest = _sq_distances(X_ND[first][None, :], X_ND, x_sq_N)  # (1, N)
    pot = closest @ weight_N
    for c in range(1, k):
        rand_vals = rng.uniform(size=n_local_trials) * pot
        candidates = np.searchsorted(np.cumsum(weight_N * closest), rand_vals)
        np.clip(candidates, None, closest.size - 1, out=candidates)
        dist = _sq_distances(X_ND[candidates], X_ND, x_sq_N)
        np.minimum(closest, dist, out=dist)
        cand_pot = dist @ weight_N.reshape(-1, 1)
        best = int(np.argmin(cand_pot))
        pot = cand_pot[best]
        closest = dist[best]
        centers_KD[c] = X_ND[candidates[best]]
    return centers_KD


def kmeans_labels(embeddings_ND: np.ndarray, k: int, seed: int, n_init: int = 10) -> np.ndarray:
    """Cluster label per row (int64), as `KMeans(k, random_state=seed, n_init=n_init).fit_predict` gives."""
    X = np.array(embeddings_ND, order="C", copy=True)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    n = X.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if not 1 <= k <= n:
        raise ValueError(f"k={k} clusters need 1..{n} rows")
    helpers = _sklearn_helpers()
    if helpers is None:  # pragma: no cover - depends on the installed sklearn
        from sklearn.cluster import KMeans

        log.info("sklearn's private KMeans helpers are not available; using KMeans")
        n_init_any: Any = n_init
        return KMeans(n_clusters=k, random_state=seed, n_init=n_init_any).fit_predict(X).astype(np.int64)
    lloyd, same_clustering = helpers
    tol = np.mean(np.var(X, axis=0)) * TOL  # sklearn's _tolerance (same dtype), on the data before centring
    X -= X.mean(axis=0)  # sklearn centres the data for more accurate distances
    x_sq_N = _row_norms_sq(X)
    weight_N = np.ones(n, dtype=X.dtype)
    rng = np.random.RandomState(seed)
    best_labels: np.ndarray | None = None
    best_inertia = np.inf
    for _ in range(n_init):
        centers = _kmeans_plusplus(X, k, x_sq_N, weight_N, rng)
        labels, inertia, _, _ = lloyd(
            X, weight_N, centers, max_iter=MAX_ITER, verbose=False, tol=tol, n_threads=1
        )
        if best_labels is None or (inertia < best_inertia and not same_clustering(labels, best_labels, k)):
            best_labels, best_inertia = labels, inertia
    assert best_labels is not None
    return best_labels.astype(np.int64)
