"""The app on a graduated store (activations and windows in partitioned Parquet): the feature dashboard renders the
same page."""

import shutil
from pathlib import Path

import duckdb
import pytest

from sae_workbench.app import queries
from sae_workbench.store import Store
from tests.app.sample_store import SampleStore
from tests.app.test_app_pages import markdown_text, run_page


def test_feature_page_is_the_same_from_a_partitioned_store(
    app_sample_store: SampleStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = app_sample_store
    path = tmp_path / "parted.duckdb"
    shutil.copy(sample.path, path)
    reports = Store.open(path).graduate(str(tmp_path / "root"))
    assert [r.kind for r in reports] == ["activations", "windows"] and all(r.n_rows > 0 for r in reports)
    con = duckdb.connect(str(path), read_only=True)
    for table in ("activations", "windows"):  # only the Parquet can answer
        assert con.execute(f"SELECT count(*) FROM {table}").fetchall() == [(0,)]
    con.close()
    pages = []
    for store in (sample.path, path):
        queries.clear_caches()
        feature = str(sample.explained_feature)
        at = run_page("feature", store, monkeypatch, sae=sample.sae_id, feature=feature)
        pages.append((at.title[0].value, markdown_text(at), [m.value for m in at.metric]))
    queries.clear_caches()
    assert pages[1] == pages[0]
    assert pages[1][1].count('class="wb-tok') > 50  # the top examples' tokens, read from the bucket file


def test_feature_page_of_a_damaged_store_says_which_file_and_what_to_do(
    app_sample_store: SampleStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sae_workbench.store.partitioned import activations_dir, bucket_of, listed_files

    sample = app_sample_store
    path = tmp_path / "parted.duckdb"
    shutil.copy(sample.path, path)
    root = str(tmp_path / "root")
    Store.open(path).graduate(root)
    folder = Path(activations_dir(root, sample.sae_id, bucket_of(sample.explained_feature)))
    (name,) = listed_files(str(folder))
    (folder / name).unlink()
    queries.clear_caches()
    at = run_page("feature", path, monkeypatch, sae=sample.sae_id, feature=str(sample.explained_feature))
    queries.clear_caches()
    errors = " ".join(e.value for e in at.error)
    # Before: "Active windows" above "No activating windows" (the store read as if the feature never fired).
    assert not at.exception and "PartitionFileError" in errors and name in errors and "--repair" in errors
    assert not at.metric
