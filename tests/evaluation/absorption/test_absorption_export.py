"""SAEBench-style JSON export (evaluation/absorption/saebench.py) and the `workbench absorption` command.

The absorption export is validated against SAEBench's own JSON schema (data/saebench/, from the sae-bench package).
"""

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from sae_workbench.evaluation.absorption.eval import (
    AbsorbingFeature,
    AbsorptionConfig,
    AbsorptionMetrics,
    AbsorptionResult,
    LetterAbsorption,
)
from sae_workbench.evaluation.absorption.saebench import (
    absorption_eval_json,
    core_eval_json,
    group_core_metrics,
    word_token_offset,
    write_eval_json,
)

SCHEMA_PATH = (
    Path(__file__).resolve().parents[3] / "data/saebench/eval_output_schema_absorption_first_letter.json"
)


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Every violation of SAEBench's absorption output schema, as 'path: message'."""
    schema = json.loads(SCHEMA_PATH.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]


SAEBENCH_FIELDS = {
    "eval_type_id",
    "eval_config",
    "eval_id",
    "datetime_epoch_millis",
    "eval_result_metrics",
    "eval_result_details",
    "sae_bench_commit_hash",
    "sae_lens_id",
    "sae_lens_release_id",
    "sae_lens_version",
    "sae_cfg_dict",
    "eval_result_unstructured",
}


def _result() -> AbsorptionResult:
    letters = [
        LetterAbsorption("a", 0.9, True, [3], 1, 10, 2, 0.25, 0.2),
        LetterAbsorption("b", 0.4, False, [7, 8], 2, 5, 0, 0.0, 0.0),
    ]
    metrics = AbsorptionMetrics(0.25, 0.2, 1.0, 0.0, 0.0, 0.0)
    return AbsorptionResult(metrics, letters, [], [AbsorbingFeature(11, "a", 2, [" apple", " ant"], 0.9)])


def test_absorption_json_has_saebench_layout(tmp_path: Path) -> None:
    doc = absorption_eval_json(
        _result(),
        AbsorptionConfig(),
        sae_id="abc",
        model_name="smollm2-135m",
        llm_dtype="bfloat16",
        prompt_token_pos=-6,
        eval_id="e1",
        now_ms=5,
    )
    assert SAEBENCH_FIELDS <= set(doc)
    assert doc["eval_type_id"] == "absorption_first_letter"
    assert doc["eval_id"] == "e1" and doc["datetime_epoch_millis"] == 5
    assert doc["eval_result_metrics"]["mean"]["mean_absorption_fraction_score"] == 0.25
    assert set(doc["eval_result_metrics"]["mean"]) == {
        "mean_absorption_fraction_score",
        "mean_full_absorption_score",
        "mean_num_split_features",
        "std_dev_absorption_fraction_score",
        "std_dev_full_absorption_score",
        "std_dev_num_split_features",
    }
    # SAEBench lists only letters whose probe qualifies; ours keeps every letter in the unstructured part.
    assert [d["first_letter"] for d in doc["eval_result_details"]] == ["a"]
    assert doc["eval_result_details"][0]["num_full_absorption"] == 2
    assert len(doc["eval_result_unstructured"]["letters"]) == 2
    assert doc["eval_result_unstructured"]["absorbing_features"][0]["tokens"] == [" apple", " ant"]
    assert doc["eval_config"]["min_GT_probe_f1"] == 0.6 and doc["eval_config"]["min_feats_for_eval"] == 20
    path = write_eval_json(doc, tmp_path / "out" / "absorption.json")
    written = json.loads(path.read_text())
    assert written["sae_lens_id"] == "abc"
    assert schema_errors(written) == []
    assert (written["eval_config"]["llm_dtype"], written["eval_config"]["prompt_token_pos"]) == (
        "bfloat16",
        -6,
    )


def test_schema_check_catches_what_saebench_rejects() -> None:
    doc = absorption_eval_json(
        _result(), AbsorptionConfig(), sae_id="abc", model_name="m", llm_dtype="float32", prompt_token_pos=-6
    )
    assert schema_errors(doc) == []
    # The export's earlier shape: a null word position and dtype, which SAEBench's schema types as int and str.
    broken = {**doc, "eval_config": {**doc["eval_config"], "prompt_token_pos": None, "llm_dtype": None}}
    assert sorted(schema_errors(broken)) == [
        "eval_config/llm_dtype: None is not of type 'string'",
        "eval_config/prompt_token_pos: None is not of type 'integer'",
    ]
    no_letters = {**doc, "eval_result_details": [{"first_letter": "a"}]}
    assert any("is a required property" in e for e in schema_errors(no_letters))


def test_word_token_offset_points_at_the_word(tiny_model) -> None:
    tok = tiny_model.tokenizer  # SmolLM2's tokenizer
    template = "{word} has the first letter:"
    offset = word_token_offset(tok, template)
    assert (
        offset == -6
    )  # " has", " the", " first", " letter", ":" follow the word: SAEBench's default position
    # The offset finds the word in a real prompt with ICL examples, whichever one-token word it is.
    from sae_workbench.evaluation.absorption.probes import build_prompt

    for word in (" ocean", " House", " tin"):
        assert len(tok(word, add_special_tokens=False)["input_ids"]) == 1
        _, full = build_prompt(word, ["cat", " Dog"], template)
        ids = tok(full, add_special_tokens=False)["input_ids"]
        assert tok.decode([ids[offset]]) == word
    assert word_token_offset(tok, "{word}?") == -2


def test_core_json_groups_flat_metrics(tmp_path: Path) -> None:
    flat = {
        "explained_variance": 0.72,
        "l0": 32.0,
        "mse": 0.1,
        "frac_alive": 0.26,
        "dead_features": 3400,
        "kl": math.nan,
    }
    grouped = group_core_metrics(flat)
    assert grouped["reconstruction_quality"] == {"explained_variance": 0.72, "mse": 0.1}
    assert grouped["sparsity"] == {"l0": 32.0}
    assert grouped["misc_metrics"] == {"frac_alive": 0.26}
    assert set(grouped["workbench_other"]) == {"dead_features", "kl"}
    assert group_core_metrics(grouped) is grouped  # already nested: unchanged
    doc = core_eval_json(flat, sae_id="abc", model_name="m", hook_name="blocks.3.hook_resid_post")
    assert doc["eval_type_id"] == "core" and SAEBENCH_FIELDS <= set(doc)
    text = write_eval_json(doc, tmp_path / "core.json").read_text()
    assert json.loads(text)["eval_result_metrics"]["workbench_other"]["kl"] is None  # NaN → null


def test_cli_toy_prints_three_variants() -> None:
    from sae_workbench.cli import _register_stage_commands, app

    _register_stage_commands()
    out = CliRunner().invoke(app, ["absorption", "--toy"])
    assert out.exit_code == 0, out.output
    rows = {line.split()[0]: line.split() for line in out.output.splitlines() if line.split()}
    assert float(rows["independent"][1]) < 0.02
    assert abs(float(rows["hierarchical"][1]) - 0.2) < 0.03
    assert float(rows["hierarchical_tied"][1]) < 0.02


def test_cli_real_path_writes_store_and_json_and_resumes(tiny_model, tmp_path: Path, monkeypatch) -> None:
    from sae_lens import SAE, StandardSAEConfig

    from sae_workbench.cli import _register_stage_commands, app
    from sae_workbench.sae.io import save_sae
    from sae_workbench.store import Store

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    cfg = StandardSAEConfig(d_in=64, d_sae=128)
    cfg.metadata.hook_name = "blocks.1.hook_resid_post"
    sae_dir = save_sae(SAE.from_dict(cfg.to_dict()), tmp_path / "sae")
    _register_stage_commands()
    args = [
        "absorption",
        "--sae",
        str(sae_dir),
        "--model",
        "tiny",
        "--max-words",
        "300",
        "--n-icl-examples",
        "2",
    ]
    args += ["--min-probe-f1", "0.0", "--min-letters", "1", "--store", str(tmp_path / "wb.duckdb")]
    out = CliRunner().invoke(app, [*args, "--json", str(tmp_path / "abs.json")])
    assert out.exit_code == 0, out.output
    assert "mean_absorption_fraction_score=" in out.output
    doc = json.loads((tmp_path / "abs.json").read_text())
    assert doc["hook_name"] == "blocks.1.hook_resid_post"  # layer taken from the SAE's hook
    assert schema_errors(doc) == []
    assert (doc["eval_config"]["llm_dtype"], doc["eval_config"]["prompt_token_pos"]) == ("float32", -6)
    store = Store.open(tmp_path / "wb.duckdb", read_only=True)
    evals = store.evals(eval_type_id="absorption_first_letter")
    assert len(evals) == 1 and evals[0].eval["eval_result_metrics"] == doc["eval_result_metrics"]
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "already in" in again.output


def test_cli_without_sae_says_what_to_do() -> None:
    from sae_workbench.cli.absorption import AbsorptionCLIError, absorption

    with pytest.raises(AbsorptionCLIError, match="--sae PATH"):
        absorption(toy=False, sae=None)
