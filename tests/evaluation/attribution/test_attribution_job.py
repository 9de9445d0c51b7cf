"""`workbench attribute` end to end on the tiny model's sample store: stored, complete, resumable, exported.

Checks against what the job did not compute itself: the indexing stage's stored peak activation of each example
(the attributed activation must equal it), the DePass completeness identity, and the graph format's own fields.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.corpus import default_bos_id
from sae_workbench.evaluation.attribution.export import graph_json
from sae_workbench.evaluation.attribution.job import AttributeConfig, AttributeConfigError, run_attribution
from sae_workbench.models import load_model
from sae_workbench.sae.io import load_sae
from sae_workbench.store import Store
from tests.app.sample_store import MODEL, build_sample_store

runner = CliRunner()


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory):
    """A private copy of the app's sample store (this test writes to it)."""
    return build_sample_store(tmp_path_factory.mktemp("attr_store"))


def _features_with_examples(store: Store, sae_id: str, d_sae: int, n: int, k: int = 2) -> list[int]:
    """The first `n` features with at least `k` activating windows."""
    return [f for f in range(d_sae) if len(store.top_examples(sae_id, f, k)) == k][:n]


def test_job_stores_complete_attributions_and_effects_and_resumes(sample):
    store = Store.open(sample.path)
    model = load_model(MODEL)
    sae = load_sae(str(sample.sae_dir))
    features = _features_with_examples(store, sample.sae_id, sample.d_sae, 2)
    config = AttributeConfig(examples=2, baselines=("grad_x_input",), alphas=(5.0,), steer_tokens=3)
    summary = run_attribution(store, model, sae, sample.sae_id, features, config, progress=False)
    # 2 features x 2 examples x (tokens, components, grad_x_input); 3 effects per feature.
    assert (summary.attributions, summary.effects, summary.skipped) == (12, 6, 0)
    for f in features:
        examples = {e.window_id: e for e in store.top_examples(sample.sae_id, f, 2)}
        tokens = store.attributions(sample.sae_id, f, level="tokens", method="depass")
        assert len(tokens) == 2
        for row in tokens:
            r = row.result
            assert row.window_id is not None
            ex = examples[row.window_id]
            # The attributed activation is the one the indexing stage stored for this window's peak.
            assert row.position == ex.max_position == r["position"]
            assert r["activation"] == pytest.approx(ex.max_value, rel=1e-3, abs=1e-4)
            total = sum(r["scores_N"]) + r["rest"] + r["model_bias"] + r["sae_bias"]
            assert total == pytest.approx(r["pre_activation"], rel=1e-4, abs=1e-5)
            assert row.rule == r["rule"] == "softmax"
            # Every indexed window starts with the index's BOS (<|endoftext|>, not the tokenizer's <|im_start|>):
            # DePass recognises it, so the BOS rule applies and the page can set the sink aside.
            tokenizer = model.tokenizer
            assert tokenizer is not None
            assert r["token_ids_N"][0] == default_bos_id(tokenizer) != tokenizer.bos_token_id
            assert r["bos_position"] == 0
        comps = store.attributions(sample.sae_id, f, level="components")
        assert (
            len(comps) == 2 and len(comps[0].result["head_scores_LH"]) == 2
        )  # blocks 0 and 1 before the hook
        kinds = {e.kind: e for e in store.effects(sample.sae_id, f)}
        assert set(kinds) == {"zero_ablation", "mean_ablation", "steering"}
        zero = kinds["zero_ablation"].result
        assert sorted(kinds["zero_ablation"].window_ids) == sorted(examples)
        assert zero["splice_max_logit_error"] < 1e-3
        assert any(any(row) for row in zero["fired_BN"])
        assert kinds["steering"].result["effects"][0]["alpha"] == 5.0
    again = run_attribution(store, model, sae, sample.sae_id, features, config, progress=False)
    assert (again.attributions, again.effects, again.skipped) == (0, 0, 18)
    # A different rule is a different result: stored beside the first.
    other = run_attribution(
        store, model, sae, sample.sae_id, features[:1],
        AttributeConfig(examples=2, levels=("tokens",), rule="up_linear", effects=False), progress=False,
    )  # fmt: skip
    assert other.attributions == 2
    assert {
        r.rule for r in store.attributions(sample.sae_id, features[0], level="tokens", method="depass")
    } == {
        "softmax",
        "up_linear",
    }
    bad = AttributeConfig(rule="relu")  # type: ignore[arg-type]
    with pytest.raises(AttributeConfigError, match="relu"):
        run_attribution(store, model, sae, sample.sae_id, features, bad, progress=False)


def test_graph_json_links_sum_to_the_activation(sample):
    store = Store.open(sample.path)
    feature = _features_with_examples(store, sample.sae_id, sample.d_sae, 1)[0]
    model = load_model(MODEL)
    run_attribution(
        store, model, load_sae(str(sample.sae_dir)), sample.sae_id, [feature],
        AttributeConfig(examples=1, levels=("tokens",), effects=False), progress=False,
    )  # fmt: skip
    row = store.attributions(sample.sae_id, feature, level="tokens", method="depass")[0]
    progress = store.index_progress(sample.sae_id)
    assert progress is not None and row.window_id is not None
    window = store.get_windows(progress.corpus, [row.window_id])[0]
    graph = graph_json(row.result, list(window.token_strings), MODEL, "slug")
    assert set(graph) == {"metadata", "qParams", "nodes", "links"}
    ids = [n["node_id"] for n in graph["nodes"]]
    assert len(ids) == len(set(ids)) == row.position + 3  # tokens 0..t, the feature, the bias/error node
    target = graph["qParams"]["pinnedIds"][0]
    assert target == f"1_{feature}_{row.position}" and all(
        link["target"] == target for link in graph["links"]
    )
    assert sum(link["weight"] for link in graph["links"]) == pytest.approx(row.result["activation"], rel=1e-4)
    embed = [n for n in graph["nodes"] if n["feature_type"] == "embedding"]
    assert [n["clerp"] for n in embed] == list(window.token_strings[: row.position + 1])
    assert graph["metadata"]["prompt_tokens"] == list(window.token_strings[: row.position + 1])


def test_attribute_command_runs_resumes_and_exports(sample, tmp_path: Path):
    if not any(c.name == "attribute" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    store = Store.open(sample.path)
    # a feature nothing is stored for yet (the sample store plants DePass rows for its explained feature)
    feature = next(
        f
        for f in reversed(_features_with_examples(store, sample.sae_id, sample.d_sae, 8))
        if not store.attributions(sample.sae_id, f)
    )
    args = ["attribute", "--store", str(sample.path), "--sae", sample.sae_id, "--sae-path", str(sample.sae_dir),
            "--features", str(feature), "--examples", "1", "--alphas", "4", "--no-progress",
            "--export-graphs", str(tmp_path / "graphs")]  # fmt: skip
    first = runner.invoke(cli.app, args)
    assert first.exit_code == 0, first.output
    assert "2 new attributions, 3 new effects, 0 already stored" in first.output
    files = sorted((tmp_path / "graphs").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["metadata"]["scan"] == MODEL
    again = runner.invoke(cli.app, args)
    assert again.exit_code == 0 and "0 new attributions, 0 new effects, 5 already stored" in again.output
    wrong = runner.invoke(cli.app, [*args[:3], "--sae", "not-this-id", *args[5:]])
    assert wrong.exit_code != 0


def test_upstream_level_stores_complete_shares_and_exports_a_two_layer_graph(sample, tmp_path: Path):
    import torch
    from sae_lens import TopKSAE, TopKSAEConfig

    from sae_workbench.sae.io import save_sae

    if not any(c.name == "attribute" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    model = load_model(MODEL)
    torch.manual_seed(7)
    up = TopKSAE(TopKSAEConfig(d_in=model.cfg.d_model, d_sae=64, k=6))
    up.cfg.metadata.hook_name = "blocks.0.hook_resid_post"
    up_dir = save_sae(up, tmp_path / "upstream")
    store = Store.open(sample.path)
    # a feature nothing is stored for yet (the sample store plants DePass rows for its explained feature)
    feature = next(
        f
        for f in _features_with_examples(store, sample.sae_id, sample.d_sae, 8)
        if not store.attributions(sample.sae_id, f)
    )
    base = ["attribute", "--store", str(sample.path), "--sae", sample.sae_id, "--sae-path", str(sample.sae_dir),
            "--features", str(feature), "--examples", "1", "--no-effects", "--no-progress"]  # fmt: skip
    # The upstream level without an upstream SAE is refused before anything runs.
    refused = runner.invoke(cli.app, [*base, "--levels", "upstream"])
    assert refused.exit_code != 0 and "upstream SAE" in str(refused.exception)
    args = [
        *base,
        "--levels",
        "upstream",
        "--upstream-sae",
        str(up_dir),
        "--export-graphs",
        str(tmp_path / "g"),
    ]
    first = runner.invoke(cli.app, args)
    assert first.exit_code == 0, first.output
    assert "1 new attributions" in first.output
    rows = store.attributions(sample.sae_id, feature, level="upstream", method="depass")
    assert len(rows) == 1
    r = rows[0].result
    assert r["upstream_hook"] == "blocks.0.hook_resid_post" and r["hook"] == "blocks.1.hook_resid_post"
    # The exact split: every credited part adds up to the downstream feature's pre-activation.
    parts = [
        *r["scores_K"],
        *(r[k] for k in ("other_features", "b_dec", "bos", "sae_error", "model_bias", "sae_bias")),
    ]
    assert sum(parts) == pytest.approx(r["pre_activation"], abs=1e-4 * max(1.0, sum(abs(p) for p in parts)))
    assert r["bos"] != 0.0  # the index's BOS position's state is set aside as its own part
    # The example's stored peak is what was attributed.
    ex = store.top_examples(sample.sae_id, feature, 1)[0]
    assert r["activation"] == pytest.approx(ex.max_value, rel=1e-3, abs=1e-4)
    graphs = sorted((tmp_path / "g").glob("*-upstream.json"))
    assert len(graphs) == 1
    graph = json.loads(graphs[0].read_text())
    layers = {n["layer"] for n in graph["nodes"]}
    assert layers == {"0", "1"}  # upstream features at layer 0, the attributed feature at layer 1
    assert sum(link["weight"] for link in graph["links"]) == pytest.approx(sum(parts), rel=1e-6, abs=1e-6)
    again = runner.invoke(cli.app, args)
    assert (
        again.exit_code == 0 and "0 new attributions" in again.output and "1 already stored" in again.output
    )
