"""The partitioned data plane: a graduated store answers every per-feature and window read exactly like the single
file, reads open only the asked feature's bucket (window chunk), and `graduate` is crash-safe (rerun after a crash at
any step: rows once)."""

import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sae_workbench.examples.sampling import quantile_examples, random_examples, random_negatives
from sae_workbench.store import Store, StoreError
from sae_workbench.store.errors import PartitionFileError
from sae_workbench.store.partitioned import (
    activations_dir,
    activations_relation,
    bucket_of,
    part_name,
    windows_dir,
    windows_relation,
)

FEATURES = [0, 1, 2, 255, 256, 300, 301, 700]
"""Features of the fixture: three buckets (0, 1, 2), bucket edges 255/256 included."""
ABSENT = [3, 257, 1000]
"""Features with no rows: in an existing bucket, and in a bucket that has no file at all (1000 -> bucket 3)."""
T, N_WINDOWS = 8, 50


def _build(path: Path, seed: int = 0) -> Store:
    """A store with random sparse activations of FEATURES on padded windows, many ties (values rounded to 0.5)."""
    rng = np.random.default_rng(seed)
    s = Store.open(path)
    s.register_sae("sae", "tiny", "blocks.0.hook_resid_post", 4, 1024, {})
    s.start_index("sae", "c", T, None, {"seed": seed})
    dense = (
        np.round(rng.random((len(FEATURES), N_WINDOWS, T)) * 4)
        / 2
        * (rng.random((len(FEATURES), N_WINDOWS, T)) < 0.3)
    )
    dense[-1, :, :] = 0.0
    dense[-1, 3, 2] = 1.5  # a feature with one row
    f, w, p = np.nonzero(dense)
    order = rng.permutation(len(f))
    table = pa.table({"feature": np.array(FEATURES, np.int32)[f[order]], "window_id": w[order].astype(np.int64),
                      "position": p[order].astype(np.int16), "value": dense[f, w, p][order].astype(np.float32)})  # fmt: skip
    words = np.array(["<bos>", " cat", " dog", " the"])
    strings = [["<bos>", *rng.choice(words[1:], T - 1)] for _ in range(N_WINDOWS)]
    lengths = rng.integers(2, T + 1, N_WINDOWS)
    windows = {"window_ids": np.arange(N_WINDOWS), "tokens_BT": np.ones((N_WINDOWS, T), np.int32),
               "mask_BT": np.arange(T)[None, :] < lengths[:, None], "texts": ["".join(x) for x in strings],
               "token_strings": strings, "sources": ["s"] * N_WINDOWS, "offsets": np.zeros(N_WINDOWS, np.int64)}  # fmt: skip
    s.add_index_batch("sae", "c", windows, table, N_WINDOWS, N_WINDOWS * T)
    s.finalize_index("sae")
    s.compute_activation_stats("sae")
    return s


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Store, Store, Path]:
    """(single-file store, the same store graduated to tmp_path/root, that root)."""
    single = _build(tmp_path / "single.duckdb")
    shutil.copy(single.path, tmp_path / "parted.duckdb")
    parted = Store.open(tmp_path / "parted.duckdb")
    root = tmp_path / "root"
    reports = [(r.kind, r.key, r.n_rows, r.n_buckets, r.already) for r in parted.graduate(str(root))]
    n = single.activation_count("sae")
    assert reports == [("activations", "sae", n, 3, False), ("windows", "c", N_WINDOWS, 1, False)]
    return single, parted, root


def _reads(s: Store, feature: int) -> list:
    """Every per-feature read of the store (and the example draws built on them), as comparable values."""
    asked = [0, 7, 7, 3, 49, 60]  # repeats and an id beyond the corpus
    maxima = s.window_maxima("sae", feature)
    ids, scores = s.window_text_scores("sae", feature)
    return [
        [s.top_examples("sae", feature, k) for k in (0, 1, 5, 20, 1000)],
        (maxima.window_ids.tolist(), maxima.values.tolist(), maxima.positions.tolist()),
        s.window_activations("sae", feature, asked).tolist(),
        (ids.tolist(), np.round(scores, 6).tolist()),
        quantile_examples(s, "sae", feature, n_quantiles=4, per_quantile=3, seed=1),
        random_examples(s, "sae", feature, 5, seed=2),
        random_negatives(s, "sae", feature, 5, seed=3),
        s.feature_stats("sae", feature),
    ]


def _window_reads(s: Store) -> list:
    """Every window read of the store, as comparable values."""
    ids = [49, 0, 7, 7]
    return [
        [(w.window_id, w.tokens.tolist(), w.text, w.token_strings, w.source, w.offset, w.mask.tolist())
         for w in s.get_windows("c", ids)],
        {k: (v[0], v[1].tolist()) for k, v in s.window_tokens("c", ids).items()},
        s.window_texts("c", ids),
        s.window_ids("c").tolist(),
        s.indexed_window_ids("sae").tolist(),
        s.windows_missing_embeddings("c", "some-model").tolist(),
    ]  # fmt: skip


def test_every_per_feature_read_is_identical_on_both_layouts(pair, monkeypatch) -> None:
    from sae_workbench.store import feature_rows

    single, parted, _ = pair
    assert single.activations_root("sae") is None and parted.activations_root("sae") is not None
    con = duckdb.connect(str(parted.path), read_only=True)
    for table in ("activations", "windows"):  # moved out of the file, not copied
        assert con.execute(f"SELECT count(*) FROM {table}").fetchall() == [(0,)]
    con.close()
    assert parted.windows_root("c") is not None and _window_reads(parted) == _window_reads(single)
    with parted.session():
        assert _window_reads(parted) == _window_reads(single)
    # Your own SQL's `activations` still names every row (a view over the file and the Parquet, for that query only).
    sql = "SELECT feature, count(*) AS n, max(value) AS m FROM activations WHERE sae_id = 'sae' GROUP BY 1 ORDER BY 1"
    assert parted.query(sql).equals(single.query(sql)) and parted.query(sql).num_rows == len(FEATURES)
    sql = "SELECT corpus, count(*) AS n, sum(len(text)) AS chars, max(window_id) AS last FROM windows GROUP BY 1"
    assert (
        parted.query(sql).equals(single.query(sql)) and parted.query(sql).column("n")[0].as_py() == N_WINDOWS
    )
    for feature in FEATURES + ABSENT:
        reference = _reads(single, feature)
        assert _reads(parted, feature) == reference, feature
        with parted.session():  # the in-session path (rows read once, answered in numpy)
            assert _reads(parted, feature) == reference, feature
        monkeypatch.setattr(feature_rows, "ROWS_CAP", 0)  # every feature "dense": the SQL aggregates
        assert _reads(parted, feature) == reference, feature
        with parted.session():
            assert _reads(parted, feature) == reference, feature
        monkeypatch.undo()
    assert single.activation_count("sae") == parted.activation_count("sae") > 0
    by = ["feature", "window_id", "position"]
    assert (
        parted.activation_coordinates("sae")
        .sort_by([(c, "ascending") for c in by])
        .equals(single.activation_coordinates("sae").sort_by([(c, "ascending") for c in by]))
    )
    assert parted.features_for_token("sae", " cat") == single.features_for_token("sae", " cat")
    # Statistics recomputed from the Parquet equal those computed from the table.
    assert parted.compute_activation_stats("sae") == len(FEATURES)
    assert parted.feature_table("sae").equals(single.feature_table("sae"))
    assert [parted.feature_stats("sae", f) for f in FEATURES] == [
        single.feature_stats("sae", f) for f in FEATURES
    ]


def test_bucket_files_are_sorted_by_feature_and_value_with_their_rank(pair) -> None:
    root = pair[2]
    for fb in (0, 1, 2):
        (path,) = Path(activations_dir(str(root), "sae", fb)).glob("*.parquet")
        assert path.name.startswith("part-") and path.name == part_name(path.name[5:13])
        t = pq.read_table(path)
        assert t.column_names == ["feature", "window_id", "position", "value", "rank"]
        f, v, r = (t.column(c).to_numpy() for c in ("feature", "value", "rank"))
        assert (np.array([bucket_of(x) for x in f]) == fb).all()
        key = np.lexsort((-v, f))
        np.testing.assert_array_equal(key, np.arange(len(f)))  # sorted by (feature, value desc)
        for feature in np.unique(f):
            np.testing.assert_array_equal(r[f == feature], np.arange((f == feature).sum()))


def test_a_read_opens_only_its_bucket(pair) -> None:
    single, parted, root = pair
    relation = activations_relation(str(root), "sae")
    plan = parted.query(f"EXPLAIN ANALYZE SELECT count(*) FROM {relation} WHERE fb = 1 AND feature = 300")
    text = "\n".join(str(x) for x in plan.column(1).to_pylist())
    assert "Scanning Files: 1/3" in text and "fb=00001" in text
    reference = [_reads(single, f) for f in (256, 300, 301)]
    assert [_reads(parted, f) for f in (256, 300, 301)] == reference
    # A lost bucket is a damaged SAE (issue 34): every read of it is refused, naming the file, rather than some
    # reads answering from what is left.
    for fb in (0, 2):
        shutil.rmtree(activations_dir(str(root), "sae", fb))
    with pytest.raises(PartitionFileError, match=r"fb=00000/part-.*\.parquet is missing"):
        _reads(parted, 300)


@pytest.fixture()
def small_chunks(monkeypatch) -> None:
    """Windows in chunks of 16 (so the fixture's 50 windows span 4 chunk files)."""
    from sae_workbench.store import graduate, partitioned

    monkeypatch.setattr(partitioned, "WINDOW_CHUNK", 16)
    monkeypatch.setattr(graduate, "WINDOW_CHUNK", 16)


def test_window_reads_by_id_open_only_their_chunks(pair, small_chunks, tmp_path: Path) -> None:
    single = pair[0]
    shutil.copy(single.path, tmp_path / "chunked.duckdb")
    s = Store.open(tmp_path / "chunked.duckdb")
    root = str(tmp_path / "chunked")
    assert [r.n_buckets for r in s.graduate(root)] == [3, 4]
    plan = s.query(
        f"EXPLAIN ANALYZE SELECT text FROM {windows_relation(root, 'c')} WHERE chunk IN (1) AND window_id IN (20)"
    )
    text = "\n".join(str(x) for x in plan.column(1).to_pylist())
    assert "Scanning Files: 1/4" in text and "chunk=00001" in text
    reference = _window_reads(single)
    assert _window_reads(s) == reference
    shutil.rmtree(windows_dir(root, "c", 2))  # windows 32..47: the corpus is damaged, every read refused
    with pytest.raises(PartitionFileError, match=r"chunk=00002/part-.*\.parquet is missing"):
        s.get_windows("c", [49, 0, 7, 20])


@pytest.mark.parametrize("kind", ["activations", "windows"])
@pytest.mark.parametrize("crash_after", ["plan", "stage", "place_one", "place", "commit"])
def test_graduate_after_a_crash_finishes_and_counts_every_row_once(
    tmp_path: Path, crash_after: str, kind: str, small_chunks
) -> None:
    single = _build(tmp_path / "single.duckdb")
    shutil.copy(single.path, tmp_path / "parted.duckdb")
    s = Store.open(tmp_path / "parted.duckdb")
    root = str(tmp_path / "root")
    key = "sae" if kind == "activations" else "c"
    # The state on disk a crash after each step leaves (the steps are the ones `graduate` runs, in its order).
    plan = s._graduation_plan(kind, key, root)  # type: ignore[arg-type]
    if crash_after != "plan":
        s._stage_buckets(plan)
    if crash_after == "place_one":
        fb = next(iter(plan.buckets))
        Path(plan.final_file(fb)).parent.mkdir(parents=True)
        shutil.move(plan.staged_file(fb), plan.final_file(fb))
    if crash_after in ("place", "commit"):
        s._place_buckets(plan)
    if crash_after == "commit":
        s._commit_graduation(plan)
    # Before the commit the table still answers, with every row; after it the Parquet does.
    assert s.activation_count("sae") == single.activation_count("sae")
    assert _reads(s, 300) == _reads(single, 300) and _window_reads(s) == _window_reads(single)
    reports = {r.kind: r for r in s.graduate(root)}
    assert reports[kind].already == (crash_after == "commit")
    assert s.activation_count("sae") == single.activation_count("sae") == reports["activations"].n_rows
    assert reports["windows"].n_rows == N_WINDOWS
    files = sorted(Path(root, "activations").rglob("*.parquet"))
    assert [f.parent.name for f in files] == ["fb=00000", "fb=00001", "fb=00002"]
    assert sum(pq.read_metadata(f).num_rows for f in files) == reports["activations"].n_rows
    files = sorted(Path(root, "windows").rglob("*.parquet"))
    assert [f.parent.name for f in files] == [f"chunk={c:05d}" for c in range(4)]
    assert sum(pq.read_metadata(f).num_rows for f in files) == N_WINDOWS
    assert not Path(root, "staging").exists() or not any(Path(root, "staging").iterdir())
    for feature in (2, 300, 700):  # one per bucket (every feature: the equivalence test above)
        assert _reads(s, feature) == _reads(single, feature)
    assert _window_reads(s) == _window_reads(single)
    assert all(r.already for r in s.graduate(root))  # a third run changes nothing


def test_graduate_replaces_stray_files_and_refuses_what_it_cannot_do(pair, tmp_path: Path) -> None:
    single, parted, root = pair
    with pytest.raises(StoreError, match="already live under"):
        parted.graduate(str(tmp_path / "elsewhere"), ["sae"])
    # A stray file from an earlier, different run in a bucket folder is removed before the commit.
    shutil.copy(single.path, tmp_path / "again.duckdb")
    again = Store.open(tmp_path / "again.duckdb")
    other = tmp_path / "root2"
    stray = Path(activations_dir(str(other), "sae", 1), "part-00000000.parquet")
    stray.parent.mkdir(parents=True)
    shutil.copy(next(Path(activations_dir(str(root), "sae", 1)).glob("*.parquet")), stray)
    again.graduate(str(other))
    assert not stray.exists() and again.activation_count("sae") == single.activation_count("sae")
    # Staged rows cannot join a partitioned SAE (the table is no longer read).
    again.add_activations(
        "sae", pa.table({"feature": [1], "window_id": [0], "position": [1], "value": [1.0]})
    )
    with pytest.raises(StoreError, match="moved to Parquet"):
        again.finalize_index("sae")
    # Nor can new windows join a graduated corpus.
    with pytest.raises(StoreError, match="moved to Parquet"):
        again.add_windows("c", np.array([99]), np.ones((1, T), np.int32), np.ones((1, T), bool), ["x"],
                          [["x"] * T], ["s"], np.zeros(1, np.int64))  # fmt: skip


def test_graduate_skips_a_corpus_without_stored_windows(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "bare.duckdb")
    s.register_sae("sae", "tiny", "blocks.0.hook_resid_post", 4, 1024, {})
    s.start_index("sae", "nowhere", T, None, {})
    s.add_activations("sae", pa.table({"feature": np.array([5, 300], np.int32), "window_id": np.array([0, 1]),
                                       "position": np.array([1, 2], np.int16), "value": np.array([1.0, 2.0], np.float32)}))  # fmt: skip
    s.finalize_index("sae")
    reports = s.graduate(str(tmp_path / "root"))
    assert [(r.kind, r.n_rows, r.n_buckets) for r in reports] == [("activations", 2, 2)]
    assert s.windows_root("nowhere") is None and s.top_examples("sae", 300, 5)[0].window_id == 1
