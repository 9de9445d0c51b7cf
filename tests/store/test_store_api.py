"""The store's session handle and token search, against ground truth planted in the windows and activations; on the
single file and on the same store graduated to partitioned Parquet."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sae_workbench.store import NotIndexedError, Session, Store


@pytest.fixture(scope="module")
def token_store(
    store_layout: str, graduated_copy, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Store, list[list[str]], np.ndarray, dict[tuple[int, int, int], float]]:
    """Windows of random words (position 0 is BOS, some positions masked) and random activations on them; in the
    single file or graduated to partitioned Parquet (`store_layout`, one build per layout for the module)."""
    tmp_path = tmp_path_factory.mktemp("token_store")
    rng = np.random.default_rng(0)
    words = np.array(["<bos>", " cat", "cat ", " Cat", " dog", " the"])
    n, t = 12, 6
    strings = [["<bos>", *rng.choice(words[1:], t - 1)] for _ in range(n)]
    mask = np.ones((n, t), bool)
    mask[:, 0] = False
    mask[rng.random((n, t)) < 0.15] = False
    acts: dict[tuple[int, int, int], float] = {}
    for w in range(n):
        for p in range(t):
            for f in range(4):
                if rng.random() < 0.4:
                    acts[(f, w, p)] = float(rng.integers(1, 9))
    keys = sorted(acts)
    table = pa.table({"feature": np.array([k[0] for k in keys], np.int32),
                      "window_id": np.array([k[1] for k in keys], np.int64),
                      "position": np.array([k[2] for k in keys], np.int16),
                      "value": np.array([acts[k] for k in keys], np.float32)})  # fmt: skip
    store = Store.open(tmp_path / "s.duckdb")
    store.register_sae("sae", "tiny", "blocks.0.hook_resid_post", 4, 4, {})
    store.start_index("sae", "c", t, None, {})
    windows = {"window_ids": np.arange(n), "tokens_BT": np.ones((n, t), np.int32), "mask_BT": mask,
               "texts": ["".join(s) for s in strings], "token_strings": strings, "sources": ["s"] * n,
               "offsets": np.zeros(n, np.int64)}  # fmt: skip
    store.add_index_batch("sae", "c", windows, table, n, int(mask.sum()))
    store.finalize_index("sae")
    if store_layout == "partitioned":
        store = graduated_copy(store, tmp_path / "partitioned")
    return store, strings, mask, acts


def test_session_is_a_handle_without_sql(token_store) -> None:
    store = token_store[0]
    with store.session() as s, store.session() as inner:
        assert isinstance(s, Session) and inner is s and s.path == store.path and not s.read_only
        assert not any(hasattr(s, name) for name in ("execute", "sql", "cursor", "conn"))
        assert store.index_progress("sae") is not None


@pytest.mark.parametrize("ignore_case", [False, True])
def test_features_for_token_match_a_count_by_hand(token_store, ignore_case: bool) -> None:
    store, strings, mask, acts = token_store
    norm = (lambda s: s.strip().lower()) if ignore_case else (lambda s: s.strip())
    where = [
        (w, p) for w, row in enumerate(strings) for p, s in enumerate(row) if mask[w, p] and norm(s) == "cat"
    ]
    expected: dict[int, list[float]] = {}
    for (f, w, p), v in acts.items():
        if (w, p) in where:
            expected.setdefault(f, []).append(v)
    total, found = store.features_for_token("sae", " cat", ignore_case=ignore_case, limit=10)
    assert total == len(where) > 0
    assert {h.feature: (h.n_fires, h.mean_value, h.max_value) for h in found} == {
        f: (len(v), pytest.approx(np.mean(v)), max(v)) for f, v in expected.items()
    }
    ranks = [(-h.n_fires, -h.mean_value, h.feature) for h in found]
    assert ranks == sorted(ranks)
    assert len(store.features_for_token("sae", "cat", ignore_case=ignore_case, limit=1)[1]) == 1


def test_features_for_token_needs_an_indexed_sae(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    store.register_sae("sae", "tiny", "blocks.0.hook_resid_post", 4, 4, {})
    with pytest.raises(NotIndexedError):
        store.features_for_token("sae", "cat")
