"""PRISM's k-means (explainers/kmeans.py, public numpy/scipy only) gives sklearn's KMeans labels exactly, also where
its rarer branches run: several 256-row chunks, empty clusters relocated, duplicate rows, heavy tails."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from sae_workbench.explainers.kmeans import kmeans_labels


def _data(kind: str, seed: int) -> tuple[np.ndarray, int]:
    rng = np.random.default_rng(100 + seed)
    if kind == "chunks":  # more rows than one assignment chunk, few dimensions
        return rng.normal(size=(700, 3)), 6
    if kind == "duplicates":  # 3 distinct points, 5 clusters: empty clusters that cannot all be relocated
        return rng.normal(size=(3, 8))[rng.integers(0, 3, 40)], 5
    if kind == "near-duplicates":  # a few groups of equal rows, 15% moved off them: empty clusters with rows
        # left to move to (these seeds relocate in 9-10 of their 10 restarts)
        rng = np.random.default_rng(seed)
        n, g = int(rng.integers(20, 80)), int(rng.integers(2, 5))
        k = int(rng.integers(g + 1, g + 4))
        x = rng.normal(size=(g, 6))[rng.integers(0, g, n)]
        moved = rng.random(n) < 0.15
        x[moved] += rng.normal(size=(int(moved.sum()), 6)) * 0.5
        return x, k
    return rng.standard_t(2, size=(120, 7)), 4  # heavy tails


SEEDS = {"near-duplicates": (49, 56, 57)}


@pytest.mark.parametrize("kind", ["chunks", "duplicates", "near-duplicates", "heavy-tails"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kmeans_labels_equal_sklearn_on_rare_branches(kind: str, dtype: Any) -> None:
    from sklearn.cluster import KMeans

    for seed in SEEDS.get(kind, (0, 1, 2)):
        x, k = _data(kind, seed)
        x = x.astype(dtype)
        n_init: Any = 10  # sklearn's stubs type n_init as str ("auto")
        with warnings.catch_warnings():  # "fewer distinct points than clusters" for the duplicates
            warnings.simplefilter("ignore")
            want = KMeans(n_clusters=k, random_state=seed, n_init=n_init).fit_predict(x)
        assert kmeans_labels(x, k, seed).tolist() == want.tolist(), (kind, seed)
