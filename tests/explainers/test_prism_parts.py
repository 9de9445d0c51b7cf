"""PRISM's pure parts on hand-computed cases: percentile selection, highlighting, clustering."""

from typing import Any

import numpy as np
import pytest

from sae_workbench.examples.records import Record
from sae_workbench.explainers.prism import PrismConfig, cluster_labels, highlight, select_texts, text_score


def test_select_texts_keeps_p99_and_spaces_evenly():
    scores = np.zeros(1000)
    scores[-20:] = np.arange(1, 21)  # 20 positive texts; p99 of 1000 values = 10.99 → texts scoring ≥ 11 (10)
    picked = select_texts(scores, 99.0, 4)
    assert scores[picked].tolist() == [20.0, 17.0, 14.0, 11.0]
    assert len(select_texts(scores, 99.0, 100)) == 10
    assert len(select_texts(np.zeros(10), 99.0, 5)) == 0  # zero scores are never picked


def test_highlight_merges_runs_above_p90():
    acts = np.zeros(20, "f4")
    acts[[5, 6, 12]] = [3.0, 2.0, 0.1]
    r = Record(0, tuple(f" t{i}" for i in range(20)), acts)
    h = highlight(r)
    # sorted acts: 17 zeros, 0.1, 2, 3; p90 (linear) at rank 17.1 = 0.1 + 0.1·(2 − 0.1) = 0.29
    # → tokens 5 and 6 highlighted and merged into one span; token 12 (0.1) is below the threshold
    assert h.text == "t0 t1 t2 t3 t4[ t5 t6] t7 t8 t9 t10 t11 t12 t13 t14 t15 t16 t17 t18 t19"
    assert h.summary == "t5 (3.00)"
    assert text_score(r) == np.float32(5.1) / 20


def test_kmeans_is_seeded_and_hdbscan_option():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 0.01, (6, 4)), rng.normal(5, 0.01, (6, 4))]).astype("f4")
    a = cluster_labels(x, PrismConfig(k=2))
    assert (a == cluster_labels(x, PrismConfig(k=2))).all() and len(set(a[:6])) == 1 and a[0] != a[-1]
    h = cluster_labels(x, PrismConfig(method="hdbscan"))
    assert len(set(h[:6])) == 1 and h[0] != h[-1]


@pytest.mark.parametrize("seed", range(8))
def test_kmeans_labels_equal_sklearn_kmeans(seed):
    from sklearn.cluster import KMeans

    from sae_workbench.explainers.kmeans import kmeans_labels

    rng = np.random.default_rng(seed)
    n, d, k = int(rng.integers(8, 300)), int(rng.choice([4, 384])), int(rng.integers(2, 7))
    centers = rng.normal(size=(k + 1, d))
    x = centers[rng.integers(0, k + 1, n)] + 0.6 * rng.normal(size=(n, d))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32 if seed % 2 else np.float64)
    n_init: Any = 10  # sklearn's stubs type n_init as str ("auto")
    want = KMeans(n_clusters=k, random_state=seed, n_init=n_init).fit_predict(x)
    assert kmeans_labels(x, k, seed).tolist() == want.tolist()
