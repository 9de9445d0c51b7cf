"""The co-occurrence neighbours' row budget (IndexConfig.cooc_max_rows): below it the neighbours are the full
computation; above it they are the full computation restricted to the longest prefix of windows whose rows fit,
checked against rows read independently (a plain DuckDB read of a copy of the store file, or of the Parquet files),
on both store layouts."""

import shutil
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest

from sae_workbench.corpus import resolve_corpus
from sae_workbench.sae.feature_stats import compute_feature_stats, cooccurrence_neighbours
from sae_workbench.sae.index_loop import index_sae
from sae_workbench.sae.index_request import CooccurrenceBudgetError, IndexConfig, IndexRequest
from sae_workbench.store import Store
from sae_workbench.store.partitioned import activations_relation
from tests.sae.test_indexing import HOOK, TEXT, make_sae

CONTEXT = 32
N_WINDOWS = 24


@pytest.fixture(scope="module")
def indexed(tiny_model, store_layout: str, graduated_copy, tmp_path_factory: pytest.TempPathFactory):
    """(store, sae, sae_id, folder): an SAE indexed over 24 windows, in the single file or graduated to Parquet."""
    folder = tmp_path_factory.mktemp(f"cooc_{store_layout}")
    corpus_path = folder / "corpus.txt"
    corpus_path.write_text(TEXT)
    store = Store.open(folder / "s.duckdb")
    sae = make_sae()
    cfg = IndexConfig(context_size=CONTEXT, batch_size=4, commit_tokens=256, compute_stats=False)
    result = index_sae(
        store, IndexRequest(tiny_model, sae, HOOK, resolve_corpus(str(corpus_path)), CONTEXT * N_WINDOWS, cfg)
    )
    if store_layout == "partitioned":
        store = graduated_copy(store, folder / "parted")
    return store, sae, result.sae_id, folder


def plain_rows(store: Store, sae_id: str, folder: Path) -> dict[str, np.ndarray]:
    """Every (feature, window_id, position) row of `sae_id`, read with DuckDB directly: from a copy of the store file,
    or from the Parquet files under the SAE's root (not through any store method)."""
    root = store.activations_root(sae_id)
    if root is None:
        copy = folder / "plain-copy.duckdb"
        shutil.copy(store.path, copy)
        with duckdb.connect(str(copy), read_only=True) as conn:
            sql = "SELECT feature, window_id, position FROM activations WHERE sae_id = ?"
            return {k: np.asarray(v) for k, v in conn.execute(sql, [sae_id]).fetchnumpy().items()}
    glob = f"{root}/activations/sae_id={sae_id}/*/*.parquet"
    with duckdb.connect() as conn:
        sql = f"SELECT feature, window_id, position FROM read_parquet('{glob}')"
        return {k: np.asarray(v) for k, v in conn.execute(sql).fetchnumpy().items()}


def expected_neighbours(
    rows: dict[str, np.ndarray], keep: np.ndarray, d_sae: int
) -> tuple[list[list[int]], list[list[float]]]:
    """cooccurrence_neighbours over the rows selected by `keep`."""
    keys = rows["window_id"][keep].astype(np.int64) * CONTEXT + rows["position"][keep]
    return cooccurrence_neighbours(rows["feature"][keep], keys, d_sae, k=10)


def stored_neighbours(store: Store, sae_id: str) -> tuple[list[list[int]], list[list[float]]]:
    """The cooc_neighbours / cooc_jaccard columns the store holds for `sae_id`, by feature."""
    table = store.query(
        "SELECT cooc_neighbours, cooc_jaccard FROM feature_neighbours WHERE sae_id = ? ORDER BY feature",
        [sae_id],
    )
    return table.column("cooc_neighbours").to_pylist(), table.column("cooc_jaccard").to_pylist()


def assert_same(
    got: tuple[list[list[int]], list[list[float]]], want: tuple[list[list[int]], list[list[float]]]
):
    """Identical neighbour ids; Jaccard values equal once stored as float32."""
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1], strict=True):
        assert np.array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))


def fitting_prefix(rows: dict[str, np.ndarray], budget: int) -> tuple[np.ndarray, int]:
    """Windows (ascending) whose cumulative row count stays within `budget`, and their row count (numpy)."""
    windows, counts = np.unique(rows["window_id"], return_counts=True)
    fits = np.cumsum(counts) <= budget
    assert fits.all() or not fits[np.argmin(fits) :].any()  # a prefix: once over, always over
    return windows[fits], int(counts[fits].sum())


def test_below_budget_is_the_full_computation(indexed, tiny_model) -> None:
    store, sae, sae_id, folder = indexed
    rows = plain_rows(store, sae_id, folder)
    n = len(rows["feature"])
    assert n > 1000
    full = expected_neighbours(rows, np.ones(n, bool), sae.cfg.d_sae)
    for budget in (IndexConfig().cooc_max_rows, n):  # the default, and a budget that exactly fits every row
        compute_feature_stats(
            store, sae_id, sae, tiny_model, IndexConfig(context_size=CONTEXT, cooc_max_rows=budget)
        )
        assert_same(stored_neighbours(store, sae_id), full)
        progress = store.index_progress(sae_id)
        assert progress is not None and "cooc_sample" not in progress.config


@pytest.mark.parametrize("fraction", [0.3, 0.55])
def test_over_budget_uses_the_prefix_of_windows_that_fits(indexed, tiny_model, fraction: float) -> None:
    store, sae, sae_id, folder = indexed
    rows = plain_rows(store, sae_id, folder)
    n = len(rows["feature"])
    budget = int(n * fraction)
    windows, n_fit = fitting_prefix(rows, budget)
    assert 0 < len(windows) < N_WINDOWS and n_fit <= budget
    next_window = int(np.setdiff1d(np.unique(rows["window_id"]), windows).min())
    assert (
        n_fit + int((rows["window_id"] == next_window).sum()) > budget
    )  # the prefix is the longest that fits

    compute_feature_stats(
        store, sae_id, sae, tiny_model, IndexConfig(context_size=CONTEXT, cooc_max_rows=budget)
    )
    want = expected_neighbours(rows, np.isin(rows["window_id"], windows), sae.cfg.d_sae)
    got = stored_neighbours(store, sae_id)
    assert_same(got, want)
    assert (
        got[0] != expected_neighbours(rows, np.ones(n, bool), sae.cfg.d_sae)[0]
    )  # the budget changed something

    progress = store.index_progress(sae_id)
    assert progress is not None
    assert progress.config["cooc_sample"] == {
        "window_end": next_window,
        "n_windows": len(windows),
        "n_rows": n_fit,  # rows the statistics step actually read
        "total_windows": N_WINDOWS,
        "total_rows": n,
        "max_rows": budget,
    }
    # The store-level read with the bound returns exactly those rows.
    assert store.activation_coordinates(sae_id, window_end=next_window).num_rows == n_fit
    root = store.activations_root(sae_id)
    if root is not None:  # partitioned: the bound is a filter of the Parquet scan itself, not a step after it
        relation = activations_relation(root, sae_id)
        plan = store.query(
            f"EXPLAIN SELECT feature, window_id, position, value FROM {relation} "
            f"WHERE sae_id = '{sae_id}' AND window_id < {next_window}"
        )
        text = "\n".join(str(x) for x in plan.column(1).to_pylist())
        assert "READ_PARQUET" in text and f"Filters: window_id < {next_window}" in text, text
    # Back under budget: the full result again, and the note is gone.
    compute_feature_stats(store, sae_id, sae, tiny_model, IndexConfig(context_size=CONTEXT))
    assert_same(stored_neighbours(store, sae_id), expected_neighbours(rows, np.ones(n, bool), sae.cfg.d_sae))
    progress = store.index_progress(sae_id)
    assert progress is not None and "cooc_sample" not in progress.config


def test_budget_below_one_window_reads_nothing(indexed, tiny_model) -> None:
    store, sae, sae_id, _ = indexed
    compute_feature_stats(store, sae_id, sae, tiny_model, IndexConfig(context_size=CONTEXT, cooc_max_rows=1))
    ids, vals = stored_neighbours(store, sae_id)
    assert len(ids) == sae.cfg.d_sae and all(i == [] for i in ids) and all(v == [] for v in vals)
    progress = store.index_progress(sae_id)
    assert progress is not None
    sample = progress.config["cooc_sample"]
    assert (sample["window_end"], sample["n_windows"], sample["n_rows"]) == (0, 0, 0)


def test_bad_budget_is_a_typed_error() -> None:
    with pytest.raises(CooccurrenceBudgetError, match="cooc_max_rows"):
        IndexConfig(cooc_max_rows=0)


@pytest.mark.parametrize("block_pairs", [1, 40, 1 << 22])
def test_blocked_cooccurrence_equals_brute_force_jaccard(block_pairs: int) -> None:
    """Blocked X^T X (any block size) against exact Jaccard indices from Python sets, ties broken by the smaller id."""
    rng = np.random.default_rng(7)
    d_sae, n_tok, k = 23, 60, 4
    active = [
        sorted(rng.choice(d_sae, size=int(rng.integers(1, 6)), replace=False).tolist()) for _ in range(n_tok)
    ]
    features = np.array([f for fs in active for f in fs])
    keys = np.array(
        [1000 + 3 * t for t, fs in enumerate(active) for _ in fs]
    )  # arbitrary, non-contiguous keys
    tokens_of = [{t for t, fs in enumerate(active) if f in fs} for f in range(d_sae)]
    ids, vals = cooccurrence_neighbours(features, keys, d_sae, k, block_pairs=block_pairs)
    for f in range(d_sae):
        scored = [
            (Fraction(len(tokens_of[f] & tokens_of[g]), len(tokens_of[f] | tokens_of[g])), g)
            for g in range(d_sae)
            if g != f and tokens_of[f] & tokens_of[g]
        ]
        top = sorted(scored, key=lambda s: (-s[0], s[1]))[:k]
        assert ids[f] == [g for _, g in top]
        assert vals[f] == pytest.approx([float(j) for j, _ in top], rel=1e-6)
