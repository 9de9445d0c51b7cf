"""The feature page through AppTest (issue 37 item 3): PRISM cluster texts go through the one text renderer, and an
empty co-occurrence list on an indexed store says why instead of asking to run `workbench index`."""

from __future__ import annotations

import pytest

from sae_workbench.app import queries
from sae_workbench.app.render import text_block
from tests.app.sample_store import PRISM_TRICKY_TEXT, SampleStore
from tests.app.test_app_pages import run_page


@pytest.fixture()
def sample(app_sample_store: SampleStore) -> SampleStore:
    queries.clear_caches()
    return app_sample_store


def test_prism_cluster_text_is_rendered_by_text_block(sample: SampleStore, monkeypatch) -> None:
    at = run_page(
        "feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.explained_feature)
    )
    bodies = [m.value for m in at.markdown]
    assert text_block(PRISM_TRICKY_TEXT) in bodies
    # No markdown body holds a raw line break inside a wb-tokens block (the blank line that broke the HTML block).
    assert not [b for b in bodies if "wb-tokens" in b and "\n" in b]


def test_dead_features_empty_cooccurrence_list_is_explained_not_sent_to_index(
    sample: SampleStore, monkeypatch
) -> None:
    """Failed before: the caption read '– (filled by `workbench index`)' although index had written the row."""
    at = run_page("feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.dead_feature))
    captions = [c.value for c in at.caption]
    assert "– none: the feature never fired" in captions
    assert not any("filled by `workbench index`" in c for c in captions)
