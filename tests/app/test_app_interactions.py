"""The Feature page's "Interactions" section (issue 22) through AppTest, against the sample store's planted ProxySPEX
rows (tests/app/sample_store.py `_add_interactions`): the top Möbius term with its singletons, the R^2 table, the
constant result's message, and the `workbench interactions` hint for a feature with nothing stored."""

import pytest

from sae_workbench.app import queries
from tests.app.sample_store import PLANTED_INTERACTION, PLANTED_R2, SampleStore
from tests.app.test_app_pages import run_page


@pytest.fixture()
def sample(app_sample_store: SampleStore) -> SampleStore:
    queries.clear_caches()
    return app_sample_store


def test_feature_page_shows_planted_interactions_and_r2_table(sample: SampleStore, monkeypatch) -> None:
    at = run_page(
        "feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.explained_feature)
    )
    assert "Interactions" in [s.value for s in at.subheader]
    terms = [d.value for d in at.dataframe if "interaction" in d.value.columns]
    assert len(terms) == 1
    first, second, value = PLANTED_INTERACTION
    row = terms[0].iloc[0]
    assert row["interaction"] == f"{first!r} × {second!r}" and row["Möbius"] == pytest.approx(value)
    assert row["singletons"] == "+0.100, -0.200"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["R² ProxySPEX"] == f"{PLANTED_R2['proxyspex']:.3f}"
    assert metrics["R² Shapley"] == f"{PLANTED_R2['shapley']:.3f}"
    assert metrics["R² Banzhaf"] == f"{PLANTED_R2['banzhaf']:.3f}"
    captions = [c.value for c in at.caption]
    assert any("heads" in c and "constant" in c for c in captions)  # the constant result says so, no table
    assert any(c.startswith("FBII at order 2:") for c in captions)


def test_feature_page_without_interactions_gives_the_command(sample: SampleStore, monkeypatch) -> None:
    at = run_page("feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.plain_feature))
    hint = queries.interactions_command(sample.sae_id, sample.plain_feature)
    assert any(hint in c.value and "[interactions]" in c.value for c in at.caption)
    assert not [d for d in at.dataframe if "interaction" in d.value.columns]
