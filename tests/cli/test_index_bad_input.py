"""Issue 34 item 5: every bad argument of `workbench index` (and a bad --features of `workbench explain`) is refused
with exit status 2 before any store is created or changed, and nothing is registered in a store until the first
batch is committed (a whitespace-only corpus used to leave the SAE registered and pinned to it)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sae_workbench.sae.io import save_sae
from sae_workbench.store import Store
from tests.sae.test_indexing import HOOK, TEXT, make_sae
from tests.store.tables import table_differences


def workbench(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "sae_workbench", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(SAE folder, corpus file)."""
    folder = tmp_path_factory.mktemp("inputs")
    corpus = folder / "corpus.txt"
    corpus.write_text(TEXT)
    return save_sae(make_sae(), folder / "sae"), corpus


def index_args(store: Path, sae: Path, corpus: Path, *extra: str) -> list[str]:
    """`workbench index` on the tiny model with `extra` overriding the defaults (later options win)."""
    return ["index", "--store", str(store), "--sae", str(sae), "--model", "tiny", "--hook", HOOK, "--corpus",
            str(corpus), "--tokens", "320", "--context-size", "32", "--batch-size", "4", *extra]  # fmt: skip


@pytest.mark.parametrize(
    "extra",
    [
        ["--batch-size", "0"],  # before: RuntimeError traceback after registering the SAE in a new store
        ["--batch-size", "-1"],  # before: ValueError traceback, same
        ["--tokens", "-5"],  # before: exit 0, an empty index marked finished, then statistics
        ["--tokens", "10"],  # less than one window
        ["--context-size", "1"],
        ["--top-k", "0"],
    ],
)
def test_bad_index_arguments_exit_2_before_a_store_exists(tmp_path: Path, inputs, extra: list[str]) -> None:
    store = tmp_path / "store.duckdb"
    done = workbench(*index_args(store, *inputs, *extra))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and not store.exists()


def test_a_store_that_cannot_be_written_is_refused_before_loading_anything(tmp_path: Path, inputs) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = workbench(*index_args(blocker / "store.duckdb", *inputs))
    # Before: DuckDB's IOException after the model was loaded (77 s in the run).
    assert done.returncode == 2 and "StoreNotWritableError" in done.stderr, done.stderr
    assert "loading SAE" not in done.stderr


@pytest.mark.slow
def test_a_whitespace_corpus_registers_nothing_and_the_retry_works(tmp_path: Path, inputs) -> None:
    sae, corpus = inputs
    blank = tmp_path / "blank.txt"
    blank.write_text("   \n\n\n \t \n")
    store = tmp_path / "store.duckdb"
    Store.open(store)  # an existing (empty) store
    before = tmp_path / "before.duckdb"
    shutil.copy(store, before)
    done = workbench(*index_args(store, sae, blank))
    assert done.returncode == 2 and "CorpusError" in done.stderr, done.stderr
    # Before: the SAE stayed registered and its index pinned to the blank corpus.
    assert table_differences(before, store) == {}
    retry = workbench(*index_args(store, sae, corpus))
    assert retry.returncode == 0, retry.stderr  # before: IndexConfigError (pinned to the blank corpus)


@pytest.mark.slow
def test_a_huge_feature_range_is_refused_without_building_it(tmp_path: Path, inputs) -> None:
    store = tmp_path / "store.duckdb"
    assert workbench(*index_args(store, *inputs)).returncode == 0
    (record,) = Store.open(store, read_only=True).list_saes()
    before = tmp_path / "before.duckdb"
    shutil.copy(store, before)
    done = workbench("explain", "--store", str(store), "--sae", record.sae_id, "--features", "0-100000000")
    # Before: the whole range was built (a bare MemoryError at the scale).
    assert done.returncode == 2 and "FeatureSpecError" in done.stderr, done.stderr
    assert table_differences(before, store) == {}
