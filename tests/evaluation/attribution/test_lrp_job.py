"""`workbench attribute --method pa_lrp|attnlrp|cp` end to end on the tiny model's sample store: stored next to
DePass, conservative, resumable. Checked against what the job did not compute: the indexing stage's stored peak
activation of each example, and the conservation identity recomputed from the stored terms."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.evaluation.attribution.lrp_job import LrpConfig, LrpConfigError, run_lrp_attribution
from sae_workbench.models import load_model
from sae_workbench.sae.io import load_sae
from sae_workbench.store import Store
from tests.app.sample_store import MODEL, build_sample_store

runner = CliRunner()


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory):
    """A private copy of the app's sample store (this test writes to it)."""
    return build_sample_store(tmp_path_factory.mktemp("lrp_store"))


def _features(store: Store, sae_id: str, d_sae: int, n: int) -> list[int]:
    return [f for f in range(d_sae) if len(store.top_examples(sae_id, f, 2)) == 2][:n]


def test_lrp_job_stores_conservative_maps_and_resumes(sample):
    store = Store.open(sample.path)
    model = load_model(MODEL)
    sae = load_sae(str(sample.sae_dir))
    features = _features(store, sample.sae_id, sample.d_sae, 2)
    config = LrpConfig(modes=("pa_lrp", "cp"), examples=2)
    summary = run_lrp_attribution(store, model, sae, sample.sae_id, features, config, progress=False)
    assert (summary.attributions, summary.skipped, summary.failed) == (8, 0, {})
    for f in features:
        examples = {e.window_id: e for e in store.top_examples(sample.sae_id, f, 2)}
        rows = store.lrp_attributions(sample.sae_id, f)
        assert sorted(r.mode for r in rows) == ["cp", "cp", "pa_lrp", "pa_lrp"]
        for row in rows:
            assert row.window_id is not None
            ex = examples[row.window_id]
            r = row.result
            assert row.position == ex.max_position == r["position"]
            # The split pre-activation is the activation the index stored (the feature is active at its peak).
            assert row.pre_activation == pytest.approx(ex.max_value, rel=1e-3, abs=1e-4)
            terms = (
                sum(r["token_scores_N"]) + sum(r["position_scores_N"]) + r["dropped_position"]
                + sum(r["bias_shares"].values()) + sum(r["softmax_leak_L"])
            )  # fmt: skip
            assert terms == pytest.approx(row.target, rel=1e-4, abs=1e-5)
            assert len(r["position_scores_LN"]) == len(r["position_layers"])
        assert len(store.lrp_attributions(sample.sae_id, f, mode="cp")) == 2
    again = run_lrp_attribution(store, model, sae, sample.sae_id, features, config, progress=False)
    assert (again.attributions, again.skipped) == (0, 8)
    with pytest.raises(LrpConfigError, match="bogus"):
        run_lrp_attribution(store, model, sae, sample.sae_id, features, LrpConfig(modes=("bogus",)))  # type: ignore[arg-type]


def test_attribute_command_with_lrp_methods(sample):
    if not any(c.name == "attribute" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    store = Store.open(sample.path)
    feature = _features(store, sample.sae_id, sample.d_sae, 3)[-1]
    args = ["attribute", "--store", str(sample.path), "--sae", sample.sae_id, "--sae-path", str(sample.sae_dir),
            "--features", str(feature), "--examples", "1", "--method", "pa_lrp,attnlrp", "--no-progress"]  # fmt: skip
    depass_rows = len(store.attributions(sample.sae_id, feature))
    first = runner.invoke(cli.app, args)
    assert first.exit_code == 0, first.output
    assert "2 new attributions, 0 already stored" in first.output
    assert (
        len(store.attributions(sample.sae_id, feature)) == depass_rows
    )  # only LRP asked for: DePass not run
    assert {r.mode for r in store.lrp_attributions(sample.sae_id, feature)} == {"pa_lrp", "attnlrp"}
    again = runner.invoke(cli.app, args)
    assert "0 new attributions, 2 already stored" in again.output
    bad = runner.invoke(cli.app, [*args[:-3], "--method", "lrp", "--no-progress"])
    assert bad.exit_code != 0 and "unknown method" in bad.output
