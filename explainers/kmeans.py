"""Seeded KMeans for PRISM's clustering step: the algorithm of sklearn's `KMeans(n_init=10)`, without its per-call
overhead.

    labels_N = kmeans_labels(embeddings_ND, k=5, seed=0)   # == KMeans(5, random_state=0, n_init=10).fit_predict(...)

sklearn spends ~3 ms per restart on input validation, array-API dispatch in k-means++ and a threadpoolctl context
around every Lloyd run — 30–130 ms per feature for 60 texts on this machine, against well under a millisecond of
arithmetic. Here every step is sklearn's, written in numpy with the same floating-point operations in the same order,
so the labels are the same, not just close: the data are centred; k-means++ (greedy, 2 + ln k local trials,
distances upcast to float64 as sklearn does) draws from the same `RandomState`; Lloyd's iterations assign each row
to its nearest centre through the same BLAS call sklearn makes (scipy's gemm: ‖c‖² − 2·x·c in chunks of 256 rows),
sum each cluster's rows in row order, scale by the reciprocal count, relocate empty clusters to the farthest rows and
stop on unchanged labels or a centre shift within tol; the best restart is picked by inertia with sklearn's
same-clustering check. Only public numpy/scipy API is used. tests/explainers/test_prism_parts.py and test_kmeans.py
check that the labels equal `KMeans(...).fit_predict` on inputs of both float widths, below and above one chunk,
with empty clusters relocated and with duplicate rows.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from scipy.linalg import blas

log = logging.getLogger(__name__)

# sklearn's KMeans defaults.
MAX_ITER = 300
TOL = 1e-4
# Rows per assignment step (sklearn's CHUNK_SIZE): the gemm runs on blocks of this many rows.
CHUNK_ROWS = 256
# scipy's BLAS gemm per dtype: the library sklearn's compiled k-means calls through scipy.linalg.cython_blas.
_GEMM: dict[type, Any] = {t: blas.get_blas_funcs("gemm", dtype=t) for t in (np.float32, np.float64)}


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


def _sq_euclidean_rows(A_ND: np.ndarray, B_ND: np.ndarray) -> np.ndarray:
    """(N,) squared distance of each row pair, summed as sklearn's `_euclidean_dense_dense` does: four products
    at a time, ((p0 + p1) + p2) + p3, added in order to a running sum (then the remainder one by one)."""
    sq_ND = A_ND - B_ND
    sq_ND *= sq_ND
    n_groups = sq_ND.shape[1] // 4
    out = np.zeros(sq_ND.shape[0], dtype=sq_ND.dtype)
    if n_groups:
        s = sq_ND[:, 0 : 4 * n_groups : 4] + sq_ND[:, 1 : 4 * n_groups : 4]
        s += sq_ND[:, 2 : 4 * n_groups : 4]
        s += sq_ND[:, 3 : 4 * n_groups : 4]
        out += np.cumsum(s, axis=1)[:, -1]  # cumsum adds left to right: the running sum, exactly
    for c in range(4 * n_groups, sq_ND.shape[1]):
        out += sq_ND[:, c]
    return out


def _assign(X_ND: np.ndarray, centers_KD: np.ndarray, labels_N: np.ndarray) -> None:
    """Nearest centre of every row into `labels_N`: argmin of ‖c‖² − 2·x·c, from one gemm per chunk of rows."""
    gemm = _GEMM[X_ND.dtype.type]
    norms_K = _row_norms_sq(centers_KD)
    for start in range(0, X_ND.shape[0], CHUNK_ROWS):
        chunk_CD = X_ND[start : start + CHUNK_ROWS]
        dist_CK = np.empty((chunk_CD.shape[0], centers_KD.shape[0]), dtype=X_ND.dtype)
        dist_CK[:] = norms_K
        # The column-major call sklearn's row-major _gemm makes: (K, C) = -2 · centers · chunkᵀ + ‖c‖².
        dist_KC = gemm(-2.0, centers_KD.T, chunk_CD.T, beta=1.0, c=dist_CK.T, trans_a=1, overwrite_c=1)
        labels_N[start : start + chunk_CD.shape[0]] = np.argmin(dist_KC, axis=0)


def _update_centers(
    X_ND: np.ndarray, centers_KD: np.ndarray, labels_N: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(new centres, shift of each centre) after one Lloyd step from `centers_KD` with `labels_N` assigned."""
    k = centers_KD.shape[0]
    counts = np.bincount(labels_N, minlength=k)
    new_KD = np.zeros_like(centers_KD)
    # Each cluster's rows added one after another in row order, as sklearn accumulates them. cumsum adds strictly
    # left to right; a reduction (np.add.reduce/reduceat) may sum in another order and differ in the last bits.
    for j in np.flatnonzero(counts):
        new_KD[j] = np.cumsum(X_ND[labels_N == j], axis=0)[-1]
    count_K = counts.astype(X_ND.dtype)
    empty = np.flatnonzero(count_K == 0)
    if len(empty):
        distances = ((X_ND - centers_KD[labels_N]) ** 2).sum(axis=1)
        if np.max(distances) != 0:  # else more clusters than distinct rows: nothing to move
            far = np.argpartition(distances, -len(empty))[: -len(empty) - 1 : -1]
            for new, row in zip(empty, far, strict=True):
                old = labels_N[row]
                new_KD[old] -= X_ND[row]
                new_KD[new] = X_ND[row]
                count_K[new] = 1
                count_K[old] -= 1
    one = X_ND.dtype.type(1.0)
    biggest = int(np.argmax(count_K))
    for j in range(
        k
    ):  # in order: an empty cluster copies the biggest one, scaled or not yet, as sklearn's loop
        if count_K[j] > 0:
            new_KD[j] *= one / count_K[j]
        else:
            new_KD[j] = new_KD[biggest]
    return new_KD, np.sqrt(_sq_euclidean_rows(new_KD, centers_KD))


def _lloyd(X_ND: np.ndarray, centers_KD: np.ndarray, tol: float) -> tuple[np.ndarray, float]:
    """One k-means run from `centers_KD`: (labels, inertia), step for step as sklearn's `_kmeans_single_lloyd`."""
    n = X_ND.shape[0]
    labels = np.full(n, -1, dtype=np.int32)
    labels_old = labels.copy()
    strict = False
    for _ in range(MAX_ITER):
        _assign(X_ND, centers_KD, labels)
        centers_KD, shift_K = _update_centers(X_ND, centers_KD, labels)
        if np.array_equal(labels, labels_old):
            strict = True
            break
        if (shift_K**2).sum() <= tol:
            break
        labels_old[:] = labels
    if not strict:  # labels that match the final centres
        _assign(X_ND, centers_KD, labels)
    sq_N = _sq_euclidean_rows(X_ND, centers_KD[labels])
    inertia = np.cumsum(sq_N)[-1]  # a running sum in the data's dtype, row by row, as sklearn's
    return labels, float(inertia)


def _same_clustering(labels1: np.ndarray, labels2: np.ndarray, k: int) -> bool:
    """Whether `labels1` maps to `labels2` label for label (sklearn's check before it prefers a run)."""
    mapping = np.full(k, -1, dtype=np.int64)
    mapping[labels1] = labels2  # the last row of each label wins; equal to every row's iff the mapping holds
    return bool(np.array_equal(mapping[labels1], labels2))


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
    tol = np.mean(np.var(X, axis=0)) * TOL  # sklearn's _tolerance (same dtype), on the data before centring
    X -= X.mean(axis=0)  # sklearn centres the data for more accurate distances
    x_sq_N = _row_norms_sq(X)
    weight_N = np.ones(n, dtype=X.dtype)
    rng = np.random.RandomState(seed)
    best_labels: np.ndarray | None = None
    best_inertia = np.inf
    for _ in range(n_init):
        centers = _kmeans_plusplus(X, k, x_sq_N, weight_N, rng)
        labels, inertia = _lloyd(X, centers, float(tol))
        if best_labels is None or (inertia < best_inertia and not _same_clustering(labels, best_labels, k)):
            best_labels, best_inertia = labels, inertia
    assert best_labels is not None
    return best_labels.astype(np.int64)
