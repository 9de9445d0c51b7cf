"""The `index_ranges` ledger (store/ranges.py) without Ray: each staged range commits once with its windows and rows,
progress follows the contiguous prefix, a tampered staging file is refused, and a local run will not index past a gap."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sae_workbench.errors import WorkbenchError
from sae_workbench.store import Store
from sae_workbench.store.errors import StoreError
from sae_workbench.store.ranges import IndexRange, StagedRange, file_sha256

T = 4


def stage(tmp_path: Path, start: int, end: int, value: float = 1.0) -> StagedRange:
    """Hand-written staging files for windows [start, end): one row per window (feature = window id % 3)."""
    ids = np.arange(start, end, dtype=np.int64)
    n = len(ids)
    windows = pa.table(
        {
            "corpus": pa.array(["c"] * n),
            "window_id": pa.array(ids),
            "tokens": pa.array([[1, 2, 3, 4]] * n, pa.list_(pa.int32())),
            "text": pa.array([f"w{i}" for i in ids]),
            "token_strings": pa.array([["a", "b", "c", "d"]] * n, pa.list_(pa.string())),
            "source": pa.array(["doc"] * n),
            "offset": pa.array(ids * 3),
            "mask": pa.array([[False, True, True, True]] * n, pa.list_(pa.bool_())),
        }
    )
    acts = pa.table(
        {
            "feature": pa.array((ids % 3).astype(np.int32)),
            "window_id": pa.array(ids),
            "position": pa.array(np.ones(n, np.int16)),
            "value": pa.array(np.full(n, value, np.float32)),
        }
    )
    wfile, afile = tmp_path / f"w{start}.parquet", tmp_path / f"a{start}.parquet"
    pq.write_table(windows, wfile)
    pq.write_table(acts, afile)
    return StagedRange(
        start, end, str(wfile), file_sha256(wfile), str(afile), file_sha256(afile), n * (T - 1), n, n
    )


def test_each_range_commits_once_and_progress_follows_the_prefix(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    store.register_sae("s", "tiny", "blocks.0.hook_resid_post", 64, 8, {})
    store.start_index("s", "c", T, None, {})
    assert store.commit_index_range("s", "c", stage(tmp_path, 8, 16), "cfg")
    progress = store.index_progress("s")
    assert progress is not None and progress.next_window == 0 and progress.n_tokens == 8 * 3
    assert store.activation_count("s", staged=True) == 8 and store.window_ids("c").tolist() == list(
        range(8, 16)
    )
    assert not store.commit_index_range("s", "c", stage(tmp_path, 8, 16, value=9.0), "cfg")  # twice: refused
    assert not store.commit_index_range("s", "c", stage(tmp_path, 12, 20), "cfg")  # overlapping: refused
    assert store.activation_count("s", staged=True) == 8
    tampered = stage(tmp_path, 0, 8)
    pq.write_table(pa.table({"feature": pa.array([0], pa.int32())}), tampered.activations_file)
    with pytest.raises(StoreError, match="checksum"):
        store.commit_index_range("s", "c", tampered, "cfg")
    assert store.index_ranges("s") == [IndexRange(8, 16, 24, 8)]
    assert store.commit_index_range("s", "c", stage(tmp_path, 0, 8), "cfg")
    progress = store.index_progress("s")
    assert progress is not None and progress.next_window == 16 and not progress.finalized
    assert [(r.start, r.end) for r in store.index_ranges("s")] == [(0, 8), (8, 16)]
    assert not store.commit_index_range("s", "c", stage(tmp_path, 4, 8), "cfg")  # below the prefix: refused
    assert store.finalize_index("s") == 16


def test_local_index_refuses_to_run_past_a_ray_gap(tiny_model, tmp_path: Path) -> None:
    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.sae.index_loop import index_sae, start_indexing
    from sae_workbench.sae.index_request import IndexConfig, IndexRequest
    from tests.sae.test_indexing import HOOK, TEXT, make_sae

    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text(TEXT)
    corpus = resolve_corpus(str(corpus_file))
    store = Store.open(tmp_path / "s.duckdb")
    sae, cfg = make_sae(), IndexConfig(context_size=T, batch_size=4)
    sae_id, _, _ = start_indexing(store, IndexRequest(tiny_model, sae, HOOK, corpus, 16 * T, cfg))
    staged = stage(tmp_path, 8, 16)
    assert store.commit_index_range(sae_id, corpus.name, staged, "cfg")
    with pytest.raises(WorkbenchError, match="--backend ray"):
        index_sae(store, IndexRequest(tiny_model, sae, HOOK, corpus, 16 * T, cfg))
