"""The paper presets of PRISM, CoSy and absorption: their settings against the reference code's, and each preset
reaching the stored provenance through its command (`workbench explain|score|absorption --preset paper`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sae_workbench.evaluation.absorption.eval import AbsorptionConfig, AbsorptionPresetError
from sae_workbench.evaluation.scorers.base import ScoreConfigError
from sae_workbench.evaluation.scorers.cosy import CosyConfig, CosyScorer
from sae_workbench.explainers.prism import (
    PAPER_EMBEDDING_MODEL,
    PrismConfig,
    PrismConfigError,
    PrismExplainer,
)
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store


def test_prism_paper_preset_is_the_reference_config() -> None:
    # lkopf/prism src/utils/config.py: START_INTERVAL 0.99, CLUSTER_N_SAMPLES 1000, ACTIVATION_PERCENTILE 90,
    # N_CLUSTERS 5 (KMeans), MAX_CLUSTER_SIZE 20, CLUSTER_EMBEDDING_MODEL_NAME, set_seed(42).
    p = PrismConfig.paper()
    assert (p.percentile, p.n_texts, p.highlight_percentile, p.k, p.method, p.per_cluster, p.seed) == (
        99.0, 1000, 90.0, 5, "kmeans", 20, 42,
    )  # fmt: skip
    assert p.embedding_model == PAPER_EMBEDDING_MODEL == "Alibaba-NLP/gte-Qwen2-1.5B-instruct"
    assert PrismConfig().embedding_model == "all-MiniLM-L6-v2" and PrismConfig.named("paper") == p
    with pytest.raises(PrismConfigError, match="default, paper"):
        PrismConfig.named("papers")
    sampling = PrismExplainer(p).sampling()["prism"]
    assert sampling["preset"] == "paper" and sampling["embedding_model"] == PAPER_EMBEDDING_MODEL
    named = PrismExplainer(p, embed=lambda texts: texts)
    assert named.embedding_model_name() == "custom-embedder"  # an injected embedder is not recorded as MiniLM


def test_cosy_and_absorption_paper_presets() -> None:
    c = CosyConfig.paper()
    assert (c.preset, c.words_per_text, c.n_control, c.max_tokens) == ("paper", 512, 1000, 512)
    assert CosyConfig.named("default") == CosyConfig() and CosyConfig().max_tokens == 128
    with pytest.raises(ScoreConfigError):
        CosyConfig.named("fast")
    scorer = CosyScorer(None, None, ["a", "b"], c)
    assert scorer.key_params() == {
        "n_control": 2, "cosy": {"preset": "paper", "words_per_text": 512, "max_tokens": 512},
    }  # fmt: skip
    a = AbsorptionConfig.paper()
    assert (a.preset, a.probing.n_icl_examples, a.probing.probe_batch_size) == ("paper", 10, 64)
    assert (
        AbsorptionConfig().probing.n_icl_examples == 5 and AbsorptionConfig().probing.probe_batch_size == 64
    )
    with pytest.raises(AbsorptionPresetError):
        AbsorptionConfig.named("saebench")


@pytest.fixture()
def app():
    from sae_workbench.cli import _register_stage_commands, app

    _register_stage_commands()
    return app


def test_explain_prism_paper_preset_is_recorded(app, tmp_path: Path, tiny_model) -> None:
    build_planted_store(tmp_path, tiny_model.tokenizer)
    args = [
        "explain",
        "--store",
        str(tmp_path / "store.duckdb"),
        "--sae",
        PLANTED_SAE,
        "--explainer",
        "prism",
    ]
    args += ["--features", "3", "--preset", "paper", "--embedding-model", "all-MiniLM-L6-v2"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    from sae_workbench.store import Store

    (e,) = Store.open(tmp_path / "store.duckdb", read_only=True).explanations(PLANTED_SAE, explainer="prism")
    assert e.sampling["prism"]["preset"] == "paper" and e.sampling["prism"]["seed"] == 42
    assert e.extra["preset"] == "paper" and e.extra["embedding_model"] == "all-MiniLM-L6-v2"
    bad = CliRunner().invoke(app, [*args[:6], "lexical", "--embedding-model", "x"])
    assert bad.exit_code != 0 and "prism explainer only" in str(bad.exception)


def test_absorption_paper_preset_reaches_the_eval_json(app, tmp_path: Path, monkeypatch) -> None:
    from sae_lens import SAE, StandardSAEConfig

    from sae_workbench.sae.io import save_sae

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    cfg = StandardSAEConfig(d_in=64, d_sae=128)
    cfg.metadata.hook_name = "blocks.1.hook_resid_post"
    sae_dir = save_sae(SAE.from_dict(cfg.to_dict()), tmp_path / "sae")
    args = ["absorption", "--sae", str(sae_dir), "--model", "tiny", "--max-words", "300", "--preset", "paper"]
    args += ["--min-probe-f1", "0.0", "--min-letters", "1", "--json", str(tmp_path / "abs.json")]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    doc = json.loads((tmp_path / "abs.json").read_text())
    probing = doc["eval_config"]["workbench"]["probing"]
    assert doc["workbench_preset"] == "paper" and probing["n_icl_examples"] == 10
    assert probing["probe_batch_size"] == 64


def test_score_rejects_an_unknown_preset_before_opening_the_store(app, tmp_path: Path) -> None:
    args = [
        "score",
        "--store",
        str(tmp_path / "none.duckdb"),
        "--sae",
        "x",
        "--scorer",
        "cosy",
        "--preset",
        "fast",
    ]
    out = CliRunner().invoke(app, args)
    assert isinstance(out.exception, ScoreConfigError) and "unknown CoSy preset 'fast'" in str(out.exception)
    assert not (tmp_path / "none.duckdb").exists()


def test_smoke_preset_is_the_smallest_search_and_only_tree_and_prism_take_it(
    app, tmp_path: Path, tiny_model
) -> None:
    """The demo's LLM stages run tree and PRISM with --preset smoke: one root and one revision, two clusters of 10
    texts; it reaches the stored provenance, and an explainer without presets refuses it."""
    from sae_workbench.explainers.tree import tree_preset
    from sae_workbench.store import Store

    t = tree_preset("smoke", rule_cap=4)
    assert (t.roots, t.branching, t.width, t.depth, t.rule_cap, t.preset) == (1, 1, 1, 1, 4, "smoke")
    p = PrismConfig.named("smoke")
    assert (p.k, p.n_texts, p.percentile, p.preset) == (2, 10, 90.0, "smoke")
    build_planted_store(tmp_path, tiny_model.tokenizer)
    base = ["explain", "--store", str(tmp_path / "store.duckdb"), "--sae", PLANTED_SAE, "--features", "3"]
    base += ["--negatives", "random_negative"]
    out = CliRunner().invoke(
        app, [*base, "--explainer", "tree", "--preset", "smoke"]
    )  # offline lexical proposer
    assert out.exit_code == 0, out.output
    (e,) = Store.open(tmp_path / "store.duckdb", read_only=True).explanations(PLANTED_SAE, explainer="tree")
    assert e.sampling["preset"] == "smoke" and e.sampling["tree"]["depth"] == 1
    bad = CliRunner().invoke(app, [*base, "--explainer", "lexical", "--preset", "smoke"])
    assert bad.exit_code != 0 and "tree and prism explainers" in str(bad.exception)
