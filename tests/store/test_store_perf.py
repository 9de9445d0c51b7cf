"""The store's fast paths keep their answers: attach/detach sessions, session caches, batched explanation writes,
the memory-mapped embedding copy, and exact top-k by argpartition."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sae_workbench.examples.sampling import top_k_by_score
from sae_workbench.store import ExplanationRecord, Store, StoreBusyError, StoreError
from sae_workbench.store.connection import HUB
from sae_workbench.store.vectors import vectors_dir


def _acts(feature: int, windows: list[int], values: list[float]) -> pa.Table:
    n = len(windows)
    return pa.table({"feature": np.full(n, feature, np.int32), "window_id": np.array(windows, np.int64),
                     "position": np.ones(n, np.int16), "value": np.array(values, np.float32)})  # fmt: skip


def _windows(ids: list[int], t: int = 4) -> dict:
    n = len(ids)
    return {"window_ids": np.array(ids), "tokens_BT": np.ones((n, t), np.int32), "mask_BT": np.ones((n, t), bool),
            "texts": [f"w{i}" for i in ids], "token_strings": [["a"] * t] * n, "sources": ["s"] * n,
            "offsets": np.zeros(n, np.int64)}  # fmt: skip


def _small_store(path: Path) -> Store:
    """Windows 0-2; feature 0 fires on windows 0 and 2."""
    s = Store.open(path)
    s.register_sae("sae", "tiny", "blocks.0.hook_resid_post", 4, 8, {})
    s.start_index("sae", "c", 4, None, {})
    s.add_index_batch("sae", "c", _windows([0, 1, 2]), _acts(0, [0, 2], [1.0, 3.0]), 3, 9)
    s.finalize_index("sae")
    return s


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    return _small_store(tmp_path / "s.duckdb")


def _in_layout(s: Store, layout: str, graduated_copy, folder: Path) -> Store:
    """`s` itself (single file) or its copy graduated to partitioned Parquet under `folder`."""
    return graduated_copy(s, folder) if layout == "partitioned" else s


@pytest.fixture(scope="module")
def small_store(store_layout: str, graduated_copy, tmp_path_factory: pytest.TempPathFactory) -> Store:
    """`_small_store`, read-only, in each layout (built once per module)."""
    folder = tmp_path_factory.mktemp("small")
    return _in_layout(_small_store(folder / "s.duckdb"), store_layout, graduated_copy, folder / "partitioned")


@pytest.fixture(scope="module")
def ties_store(store_layout: str, graduated_copy, tmp_path_factory: pytest.TempPathFactory) -> Store:
    """40 windows, feature 0 on each with values rounded to whole numbers (many ties), in each layout."""
    folder = tmp_path_factory.mktemp("ties")
    s = Store.open(folder / "t.duckdb")
    s.register_sae("sae", "tiny", "blocks.0.hook_resid_post", 4, 8, {})
    s.start_index("sae", "c", 4, None, {})
    rng = np.random.default_rng(0)
    ids = list(range(40))
    values = np.round(rng.random(40) * 4, 0).astype(np.float32).tolist()  # many ties, broken by window id
    s.add_index_batch("sae", "c", _windows(ids), _acts(0, ids, values), 40, 9)
    s.finalize_index("sae")
    return _in_layout(s, store_layout, graduated_copy, folder / "partitioned")


@pytest.fixture(scope="module")
def random_store(
    store_layout: str, graduated_copy, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Store, int]:
    """`_random_store` in each layout."""
    folder = tmp_path_factory.mktemp("random")
    s, n_features = _random_store(folder)
    return _in_layout(s, store_layout, graduated_copy, folder / "partitioned"), n_features


def test_session_releases_the_file_for_other_processes(store: Store) -> None:
    code = "import sys, duckdb; duckdb.connect(sys.argv[1]).close(); print('ok')"
    with store.session():
        held = subprocess.run([sys.executable, "-c", code, str(store.path)], capture_output=True, text=True)
    assert held.returncode != 0 and "lock" in held.stderr.lower()
    free = subprocess.run([sys.executable, "-c", code, str(store.path)], capture_output=True, text=True)
    assert free.stdout.strip() == "ok", free.stderr


def test_read_write_session_waits_for_a_read_only_one_in_this_process(store: Store) -> None:
    reader = Store.open(store.path, read_only=True)
    writer = Store.open(store.path, busy_timeout_s=0.2)
    with reader.session():
        assert reader.index_progress("sae") is not None
        with pytest.raises(StoreBusyError):
            writer.add_eval("sae", "x", {})
    writer.add_eval("sae", "x", {})
    # A read-only session shares a read-write attachment of this process.
    with writer.session():
        assert len(reader.evals("sae")) == 1


def test_session_cache_sees_this_process_writes(store: Store) -> None:
    with store.session():
        before = store.index_progress("sae")
        assert before is not None and before.next_window == 3 and before.finalized
        assert store.indexed_window_ids("sae").tolist() == [0, 1, 2]
        assert store.window_maxima("sae", 0).window_ids.tolist() == [0, 2]
        store.add_index_batch("sae", "c", _windows([3]), _acts(0, [3], [5.0]), 4, 3)
        after = store.index_progress("sae")
        assert after is not None and after.next_window == 4 and not after.finalized
        assert store.indexed_window_ids("sae").tolist() == [0, 1, 2, 3]
        store.finalize_index("sae")
        assert store.window_maxima("sae", 0).window_ids.tolist() == [0, 2, 3]
        assert store.top_examples("sae", 0, 1)[0].window_id == 3
    # Callers may modify what they get without touching the cache.
    with store.session():
        ids = store.indexed_window_ids("sae")
        ids[:] = -1
        assert store.indexed_window_ids("sae").tolist() == [0, 1, 2, 3]


def test_session_cache_is_invalidated_by_another_thread_of_this_process(store: Store) -> None:
    import threading

    other = Store.open(store.path)
    with store.session():
        assert store.get_sae("sae").metrics == {}
        generation = HUB.generation(store.path)
        t = threading.Thread(target=other.update_sae_metrics, args=("sae", {"l0": 3}))
        t.start()
        t.join()
        assert HUB.generation(store.path) > generation
        assert store.get_sae("sae").metrics == {"l0": 3}


def _record(feature: int, key: str, text: str = "t") -> ExplanationRecord:
    return ExplanationRecord("sae", feature, "lexical", "1", "", "", {"a": 1}, {"k": 2}, [1, 2], [3], text, key,
                             rules=[{"r": 1}], extra={"x": [1]}, tokens_in=4, tokens_out=5, seconds=0.5)  # fmt: skip


def test_add_explanations_batch_returns_ids_in_order_and_skips_stored_keys(store: Store) -> None:
    first = store.add_explanation(_record(0, "k0"))
    ids = store.add_explanations(
        [_record(1, "k1"), _record(0, "k0", "again"), _record(2, "k2"), _record(1, "k1")]
    )
    assert ids[1] == first and ids[0] == ids[3] and len(set(ids)) == 3
    rows = store.explanations("sae")
    assert [(e.feature, e.config_key, e.text) for e in rows] == [
        (0, "k0", "t"),
        (1, "k1", "t"),
        (2, "k2", "t"),
    ]
    e = store.get_explanation(ids[2])
    assert (e.rules, e.extra, e.example_ids, e.negative_ids, e.tokens_in, e.tokens_out, e.seconds) == (
        [{"r": 1}],
        {"x": [1]},
        [1, 2],
        [3],
        4,
        5,
        0.5,
    )
    assert store.add_explanations([]) == []


def test_embedding_copy_is_used_only_while_it_matches(store: Store) -> None:
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(3, 8)).astype(np.float32)
    store.add_window_embeddings("c", "m", np.array([2, 0, 1]), vecs)
    fetched = store.window_embeddings("c", "m")  # from DuckDB; writes the copy
    assert fetched.window_ids.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(fetched.embeddings_ND, vecs[[1, 2, 0]])
    assert len(list(vectors_dir(store.path).glob("*.f32.npy"))) == 1
    mapped = store.window_embeddings("c", "m")
    assert isinstance(mapped.embeddings_ND, np.memmap)
    np.testing.assert_array_equal(mapped.embeddings_ND, vecs[[1, 2, 0]])
    # More rows: the copy no longer matches, is replaced.
    store.add_window_embeddings("c", "m", np.array([3]), vecs[:1] * 2)
    grown = store.window_embeddings("c", "m")
    assert not isinstance(grown.embeddings_ND, np.memmap) and grown.window_ids.tolist() == [0, 1, 2, 3]
    assert len(list(vectors_dir(store.path).glob("*.f32.npy"))) == 1
    # A copy whose content differs from the table (e.g. a store rebuilt at the same path) is ignored.
    (copy,) = vectors_dir(store.path).glob("*.f32.npy")
    tampered = np.load(copy)
    tampered[-1] += 1
    np.save(copy, tampered)
    again = store.window_embeddings("c", "m")
    assert not isinstance(again.embeddings_ND, np.memmap)
    np.testing.assert_array_equal(again.embeddings_ND[-1], vecs[0] * 2)


def test_top_k_by_score_is_exact_with_ties() -> None:
    ids = np.array([5, 3, 9, 1, 7, 2])
    scores = np.array([0.5, 0.9, 0.5, 0.5, 0.1, 0.9], np.float32)
    assert top_k_by_score(ids, scores, 3).tolist() == [2, 3, 1]
    assert top_k_by_score(ids, scores, 4).tolist() == [2, 3, 1, 5]
    assert top_k_by_score(ids, scores, 10).tolist() == [2, 3, 1, 5, 9, 7]
    assert top_k_by_score(ids, scores, 0).tolist() == []
    rng = np.random.default_rng(1)
    many = rng.permutation(5000)
    rounded = rng.integers(0, 50, 5000).astype(np.float32)  # many ties
    reference = many[np.lexsort((many, -rounded))][:37]
    assert top_k_by_score(many, rounded, 37).tolist() == reference.tolist()


def test_top_from_window_maxima_equals_the_top_examples_query(ties_store: Store) -> None:
    s = ties_store
    for k in (0, 1, 7, 40, 100):
        assert s.window_maxima("sae", 0).top(k) == s.top_examples("sae", 0, k)
    # And both equal the ranking by hand: value descending, ties by window id (every value is window 0..39's own).
    rows = s.activation_coordinates("sae")
    ids, values = rows.column("window_id").to_numpy(), rows.column("value").to_numpy()
    by_hand = ids[np.lexsort((ids, -values))][:7].tolist()
    assert [e.window_id for e in s.top_examples("sae", 0, 7)] == by_hand


def test_explain_lease_pause_frees_the_file_and_a_long_pause_counts_as_the_yield(store: Store) -> None:
    import time

    from sae_workbench.store.connection import YIELD_S, announce_waiting, waiting_marker
    from sae_workbench.store.lease import StoreLease

    code = "import sys, duckdb; duckdb.connect(sys.argv[1]).close(); print('ok')"
    waiting_marker(store.path).unlink(missing_ok=True)
    lease = StoreLease(store, seconds=10.0)
    lease.acquire()
    try:
        held = subprocess.run([sys.executable, "-c", code, str(store.path)], capture_output=True, text=True)
        assert held.returncode != 0 and "lock" in held.stderr.lower()
        started = lease._since
        with lease.paused():  # nobody waits: the lease keeps the file
            inside = subprocess.run(
                [sys.executable, "-c", code, str(store.path)], capture_output=True, text=True
            )
        assert inside.returncode != 0 and "lock" in inside.stderr.lower()
        announce_waiting(
            store.path
        )  # (a raw duckdb.connect does not announce itself; the Store's retry loop does)
        with lease.paused():  # a short pause: the lease keeps its age
            pass
        assert lease._since == started
        with lease.paused():
            free = subprocess.run(
                [sys.executable, "-c", code, str(store.path)], capture_output=True, text=True
            )
            time.sleep(YIELD_S)
        assert free.stdout.strip() == "ok", free.stderr
        assert lease._since > started  # the pause was the yield: the lease's clock restarted
        assert store.index_progress("sae") is not None  # and the lease holds a working session again
    finally:
        lease.release()


def test_session_cache_keeps_facts_across_appends_and_evicts_least_recently_used(
    store: Store, monkeypatch
) -> None:
    from sae_workbench.store import base

    reads: list[str] = []
    read_progress = Store._read_progress

    def counting(self: Store, sae_id: str):
        reads.append(sae_id)
        return read_progress(self, sae_id)

    monkeypatch.setattr(Store, "_read_progress", counting)
    with store.session():
        store.index_progress("sae")
        # Appends to output tables (explanations, evals, LLM cache) cannot change a cached fact: kept.
        store.add_explanations([_record(0, "k0")])
        store.add_eval("sae", "x", {})
        store.llm_cache_put_many([("key", "m", {"a": 1}, 3)])
        # More features' maxima than the cache holds: the fact in use (read again below each time) stays.
        for f in range(3 * base.SESSION_CACHE_ENTRIES):
            store.window_maxima("sae", f)
            store.index_progress("sae")
        assert reads == ["sae"]
        # A write to what the facts are read from invalidates them.
        assert store.window_maxima("sae", 1).window_ids.tolist() == []
        store.add_activations("sae", _acts(1, [1], [2.0]))
        store.finalize_index("sae")
        store.index_progress("sae")
        assert reads[-1] == "sae" and len(reads) >= 2
        assert store.window_maxima("sae", 1).window_ids.tolist() == [1]


def test_stored_explanation_keys_is_the_stored_subset(store: Store) -> None:
    assert store.stored_explanation_keys([]) == set()
    store.add_explanations([_record(0, "a"), _record(1, "b")])
    assert store.stored_explanation_keys(["a", "c", "b", "a"]) == {"a", "b"}
    assert store.stored_explanation_keys(["c"]) == set()


def test_explain_lease_steps_aside_only_for_a_waiting_process(store: Store) -> None:
    """A writer holding the lease keeps the file while nobody waits; a reader process that finds it locked
    announces itself and gets in at the writer's next feature boundary."""
    import time

    from sae_workbench.store.connection import waiting_marker
    from sae_workbench.store.lease import StoreLease

    waiting_marker(store.path).unlink(missing_ok=True)
    lease = StoreLease(store, seconds=0.05, max_seconds=60.0)
    lease.acquire()
    try:
        first = lease._since
        for _ in range(10):  # "features" of 20 ms with nobody waiting: never released
            time.sleep(0.02)
            assert not lease.due()
            lease.renew()
        assert lease._since == first
        reader = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; from workbench.store import Store; t = time.monotonic(); "
             "s = Store.open(sys.argv[1], read_only=True, busy_timeout_s=20); s.index_progress('sae'); "
             "print(round(time.monotonic() - t, 3))", str(store.path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while reader.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
            lease.renew()
        out, err = reader.communicate(timeout=30)
        assert reader.returncode == 0, err
        assert float(out) < 10  # in well before its busy timeout
        assert lease._since > first  # the lease stepped aside for the reader
        assert store.index_progress("sae") is not None  # and holds a working session again
    finally:
        lease.release()


def test_explain_lease_falls_back_to_yielding_every_max_seconds(store: Store) -> None:
    import time

    from sae_workbench.store.connection import waiting_marker
    from sae_workbench.store.lease import StoreLease

    waiting_marker(store.path).unlink(missing_ok=True)
    lease = StoreLease(store, seconds=0.01, max_seconds=0.1)
    lease.acquire()
    try:
        first = lease._since
        time.sleep(0.12)
        assert lease.due()
        lease.renew()
        assert lease._since > first
    finally:
        lease.release()


def _random_store(tmp_path: Path, seed: int = 0) -> tuple[Store, int]:
    """A store whose features have random sparse activations with many ties (values rounded to 0.5)."""
    rng = np.random.default_rng(seed)
    t, n_windows, n_features = 8, 60, 6
    s = Store.open(tmp_path / f"r{seed}.duckdb")
    s.register_sae("sae", "tiny", "blocks.0.hook_resid_post", 4, n_features, {})
    s.start_index("sae", "c", t, None, {})
    dense = (
        np.round(rng.random((n_features, n_windows, t)) * 2, 0)
        / 2
        * (rng.random((n_features, n_windows, t)) < 0.3)
    )
    f, w, p = np.nonzero(dense)
    order = rng.permutation(len(f))  # stored in no particular order
    table = pa.table({"feature": f[order].astype(np.int32), "window_id": w[order].astype(np.int64),
                      "position": p[order].astype(np.int16), "value": dense[f, w, p][order].astype(np.float32)})  # fmt: skip
    windows = _windows(list(range(n_windows)), t)
    lengths = rng.integers(2, t + 1, n_windows)  # padded windows: token counts differ per window
    windows["mask_BT"] = np.arange(t)[None, :] < lengths[:, None]
    s.add_index_batch("sae", "c", windows, table, n_windows, int(dense.size))
    s.finalize_index("sae")
    return s, n_features


def test_feature_rows_answer_like_the_aggregate_queries(random_store: tuple[Store, int], monkeypatch) -> None:
    from sae_workbench.store import feature_rows

    s, n_features = random_store
    rng = np.random.default_rng(1)
    asked = np.concatenate([rng.choice(70, 25), [3, 3, 65]])  # repeats and ids beyond the corpus
    with s.session():  # rows read once per feature and reused
        from_rows = [
            (s.window_maxima("sae", f), s.window_activations("sae", f, asked)) for f in range(n_features)
        ]
        scores_rows = [s.window_text_scores("sae", f) for f in range(n_features)]
    outside = [(s.window_maxima("sae", f), s.window_activations("sae", f, asked)) for f in range(n_features)]
    scores_sql = [s.window_text_scores("sae", f) for f in range(n_features)]  # one SQL aggregate + join each
    for (ids_r, sc_r), (ids_q, sc_q) in zip(scores_rows, scores_sql, strict=True):
        assert len(ids_r) > 0
        np.testing.assert_array_equal(ids_r, ids_q)
        np.testing.assert_allclose(sc_r, sc_q, rtol=1e-6)
    coords = s.activation_coordinates("sae")  # the reference, from the stored rows themselves
    monkeypatch.setattr(feature_rows, "ROWS_CAP", 0)  # every feature "dense": DuckDB aggregates
    aggregated = [s.window_maxima("sae", f) for f in range(n_features)]
    with s.session():
        aggregated_in_session = [s.window_maxima("sae", f) for f in range(n_features)]
        scores_in_session = [s.window_text_scores("sae", f) for f in range(n_features)]
    for (ids_r, sc_r), (ids_q, sc_q) in zip(scores_rows, scores_in_session, strict=True):
        np.testing.assert_array_equal(ids_r, ids_q)
        np.testing.assert_allclose(sc_r, sc_q, rtol=1e-6)
    feat = coords.column("feature").to_numpy()
    for f in range(n_features):
        (m, acts), (m2, acts2) = from_rows[f], outside[f]
        for other in (m2, aggregated[f], aggregated_in_session[f]):
            np.testing.assert_array_equal(m.window_ids, other.window_ids)
            np.testing.assert_array_equal(m.values, other.values)
            np.testing.assert_array_equal(m.positions, other.positions)
        np.testing.assert_array_equal(acts, acts2)
        # The reference: a window's peak is its max value at its earliest position; rows densified by hand.
        mine = feat == f
        dense = np.zeros((70, 8), np.float32)
        dense[coords.column("window_id").to_numpy()[mine], coords.column("position").to_numpy()[mine]] = (
            coords.column("value").to_numpy()[mine]
        )
        np.testing.assert_array_equal(acts, dense[asked])
        peak = dense.max(axis=1)
        live = np.flatnonzero(peak > 0)
        np.testing.assert_array_equal(m.window_ids, live)
        np.testing.assert_array_equal(m.values, peak[live])
        np.testing.assert_array_equal(m.positions, dense[live].argmax(axis=1))


def test_feature_rows_sort_unsorted_input_and_handle_empty() -> None:
    from sae_workbench.store.feature_rows import FeatureRows

    rows = FeatureRows.from_columns(
        np.array([5, 2, 5, 2]), np.array([3, 1, 0, 4]), np.array([1, 2, 1, 7], np.float32)
    )
    assert rows.window_ids.tolist() == [2, 2, 5, 5] and rows.positions.tolist() == [1, 4, 0, 3]
    m = rows.maxima()
    assert (
        m.window_ids.tolist() == [2, 5] and m.values.tolist() == [7.0, 1.0] and m.positions.tolist() == [4, 0]
    )
    empty = FeatureRows.from_columns(np.zeros(0), np.zeros(0), np.zeros(0))
    assert len(empty.maxima().window_ids) == 0
    assert empty.dense(np.array([1, 2]), 4).shape == (2, 4) and not empty.dense(np.array([1, 2]), 4).any()


def test_window_tokens_equal_the_windows_fields(small_store: Store) -> None:
    store = small_store
    windows = store.get_windows("c", [2, 0, 1])
    tokens = store.window_tokens("c", [2, 0, 1, 2])
    assert sorted(tokens) == [0, 1, 2]
    for w in windows:
        strings, mask = tokens[w.window_id]
        assert strings == w.token_strings and mask.dtype == bool
        np.testing.assert_array_equal(mask, w.mask)
    with pytest.raises(StoreError, match="not in the store"):
        store.window_tokens("c", [0, 99])
