"""The example-sampling and dashboard-statistics read tests of other packages, rerun on the partitioned layout.

The tests themselves live with their packages (tests/examples/test_sampling.py, tests/sae/test_indexing.py) and run
there on the single file; here each runs unchanged with its store builder swapped for one that hands back the same
store graduated to partitioned Parquet (`Store.graduate`), so their hand-computed expectations (top-k order, quantile
bins, seeded random draws, density/max/mean/quantiles/histogram against the rows) are checked on that layout too.
"""

from pathlib import Path

import pytest

from sae_workbench.sae.feature_stats import compute_feature_stats
from sae_workbench.sae.index_request import IndexRequest, IndexResult
from sae_workbench.store import Store
from tests.examples import test_sampling as sampling
from tests.sae import test_indexing as indexing


@pytest.fixture()
def graduated_sampling_store(monkeypatch: pytest.MonkeyPatch, graduated_copy):
    """`sampling.build_store` returns its store graduated to partitioned Parquet; after the test, checks it was
    called (else the test ran on nothing partitioned)."""
    build = sampling.build_store
    built: list[Store] = []

    def build_graduated(path: Path) -> Store:
        built.append(graduated_copy(build(path), path.parent / "partitioned"))
        return built[-1]

    monkeypatch.setattr(sampling, "build_store", build_graduated)
    yield
    assert built and all(s.activations_root("sae") is not None for s in built)


def test_example_sources_on_partitioned(graduated_sampling_store, tmp_path: Path) -> None:
    """Top-k, quantile bins and random activating examples (tests/examples/test_sampling.py)."""
    sampling.test_example_sources(tmp_path)


def test_random_sources_on_partitioned(graduated_sampling_store, tmp_path: Path) -> None:
    """Seeded random windows and random negatives, which must skip every activating window."""
    sampling.test_random_sources_are_seeded_and_respect_activation(tmp_path)


def test_feature_stats_hand_checked_on_partitioned(
    tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard statistics (tests/sae/test_indexing.py) of an SAE indexed, graduated, then recomputed from the
    Parquet; they must also equal the statistics computed from the table before graduating."""
    index = indexing.index_sae
    graduated: list[str] = []

    def index_then_graduate(store: Store, request: IndexRequest) -> IndexResult:
        result = index(store, request)
        model, sae, cfg = request.model, request.sae, request.config
        from_table = store.feature_table(result.sae_id)
        n = store.activation_count(result.sae_id)
        store.graduate(str(tmp_path / "root"))
        assert (
            store.activations_root(result.sae_id) is not None and store.activation_count(result.sae_id) == n
        )
        compute_feature_stats(store, result.sae_id, sae, model, cfg)
        assert store.feature_table(result.sae_id).equals(from_table)
        graduated.append(result.sae_id)
        return result

    monkeypatch.setattr(indexing, "index_sae", index_then_graduate)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(indexing.TEXT)
    indexing.test_feature_stats_hand_checked(tiny_model, corpus, tmp_path)
    assert graduated, "the test never indexed through the graduating wrapper"
