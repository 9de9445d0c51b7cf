"""The Feature page's position-aware LRP view (issue 35) through AppTest: real PA-LRP rows computed by the job on a
private copy of the sample store, shown beside the planted DePass rows of the same examples, with each method's
conservation note; and the `--method pa_lrp` hint for a feature with none stored."""

import pytest

from sae_workbench.app import lrp_queries, queries
from sae_workbench.evaluation.attribution.lrp_job import LrpConfig, run_lrp_attribution
from sae_workbench.models import load_model
from sae_workbench.sae.io import load_sae
from sae_workbench.store import Store
from tests.app.sample_store import MODEL, SampleStore, build_sample_store
from tests.app.test_app_pages import markdown_text, run_page


@pytest.fixture(scope="module")
def lrp_sample(tmp_path_factory: pytest.TempPathFactory) -> SampleStore:
    sample = build_sample_store(tmp_path_factory.mktemp("lrp_app"))
    store = Store.open(sample.path)
    run_lrp_attribution(
        store, load_model(MODEL), load_sae(str(sample.sae_dir)), sample.sae_id, [sample.explained_feature],
        LrpConfig(modes=("pa_lrp",), examples=2), progress=False,
    )  # fmt: skip
    return sample


def test_feature_page_shows_lrp_tokens_and_positions_beside_depass(
    lrp_sample: SampleStore, monkeypatch
) -> None:
    queries.clear_caches()
    at = run_page(
        "feature",
        lrp_sample.path,
        monkeypatch,
        sae=lrp_sample.sae_id,
        feature=str(lrp_sample.explained_feature),
    )
    md = markdown_text(at)
    captions = [c.value for c in at.caption]
    rows = Store.open(lrp_sample.path, read_only=True).lrp_attributions(
        lrp_sample.sae_id, lrp_sample.explained_feature
    )
    assert len(rows) == 2
    for row in rows:
        positional = row.result["positional"]  # the tiny model has learned positions
        assert f"window {row.window_id} · position {row.position} · pa_lrp ({positional} positions)" in md
        # The largest position relevance of the example is rendered with its stored value.
        pos = row.result["position_scores_N"]
        top = max(range(len(pos)), key=lambda i: abs(pos[i]))
        assert f'data-act="{pos[top]:.4g}"' in md
    assert any(lrp_queries.DEPASS_NOTE in c for c in captions)
    assert any(lrp_queries.LRP_NOTE["pa_lrp"] in c for c in captions)
    assert not any("no DePass row" in c for c in captions)  # the planted DePass rows are the same examples
    assert any("NOT conservative" in e.label for e in at.expander)


def test_feature_page_with_depass_only_gives_the_method_hint(
    app_sample_store: SampleStore, monkeypatch
) -> None:
    """The shared sample store has planted DePass rows and no LRP rows: the page says how to add them."""
    queries.clear_caches()
    sample = app_sample_store
    at = run_page(
        "feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.explained_feature)
    )
    hints = [c.value for c in at.caption if "--method pa_lrp" in c.value]
    assert hints and f"--features {sample.explained_feature}" in hints[0]
