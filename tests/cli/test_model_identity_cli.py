"""SAEs from elsewhere through `workbench index` (issue 37 item 1): an SAELens-format SAE whose cfg names a model the
workbench does not know loads when what can be checked fits, with a line naming what matched; and every command an
error message on this path suggests is run and must work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from sae_lens import TopKSAE, TopKSAEConfig
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.model_identity import model_fingerprint
from sae_workbench.models import load_model
from sae_workbench.sae.io import save_sae

HOOK = "blocks.0.hook_resid_post"
TEXT = "\n".join(f"The quick brown fox {i} jumps over the lazy dog near river {i % 7}." for i in range(60))


def saelens_folder(folder: Path, model_name: str, fingerprint: str | None = None) -> Path:
    """A SAELens-format SAE (cfg.json + sae_weights.safetensors) for the tiny model's layer-0 residual stream whose
    cfg names `model_name` (and records `fingerprint` when given), as an SAE trained elsewhere would."""
    torch.manual_seed(0)
    sae = TopKSAE(TopKSAEConfig(d_in=64, d_sae=128, k=8))
    sae.cfg.metadata.hook_name = HOOK
    save_sae(sae, folder)
    cfg_path = folder / "cfg.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.setdefault("metadata", {})["model_name"] = model_name
    if fingerprint is not None:
        cfg["metadata"]["model_fingerprint"] = fingerprint
    cfg_path.write_text(json.dumps(cfg))
    for extra in folder.glob("train_result.json"):
        extra.unlink()
    return folder


def index_args(tmp_path: Path, sae: Path, *extra: str) -> list[str]:
    """`workbench index` of `sae` over a small corpus into a store under tmp_path."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    return ["index", "--store", str(tmp_path / "store.duckdb"), "--sae", str(sae), "--corpus", str(corpus),
            "--tokens", "128", "--context-size", "32", "--batch-size", "4", "--no-progress", *extra]  # fmt: skip


def run(args: list[str]):
    """Invoke the CLI as `workbench` would (stage commands registered), stderr kept apart."""
    cli._register_stage_commands()
    return CliRunner().invoke(cli.app, args)


def test_an_unknown_model_name_with_the_recorded_fingerprint_loads_and_says_what_matched(
    tmp_path: Path,
) -> None:
    """Failed before: ModelMismatchError 'the names are not known aliases of one model', suggesting
    `--model tiny-sft-local`, which cannot load."""
    fingerprint = model_fingerprint(load_model("tiny"))
    sae = saelens_folder(tmp_path / "sae", "tiny-sft-local", fingerprint)
    result = run(index_args(tmp_path, sae, "--model", "tiny"))
    assert result.exit_code == 0, result.output
    assert (
        f"accepted for the SAE's model 'tiny-sft-local': the weights fingerprint {fingerprint}"
        in result.output
    )
    assert f"{HOOK} has the SAE's input width 64" in result.output
    assert "new windows" in result.output


def test_an_unknown_model_name_with_only_the_width_to_check_loads_with_the_risk_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sae = saelens_folder(tmp_path / "sae", "/home/someone/models/tiny-sft")
    result = run(index_args(tmp_path, sae, "--model", "tiny"))
    assert result.exit_code == 0, result.output
    warnings = [r.getMessage() for r in caplog.records if r.name == "sae_workbench.model_identity"]
    assert any(
        f"{HOOK} has the SAE's input width 64" in w and "records no weights fingerprint" in w
        for w in warnings
    )


VALUE_FLAGS = ("--model", "--hook")


def suggestions(message: str) -> list[list[str]]:
    """Every flag an error message suggests, backticked or not (`--model tiny:1`, --force-model), as argument lists;
    "--model with the model ..." is prose, not a suggestion."""
    out: list[list[str]] = []
    for flag, value in re.findall(r"(--[a-z][a-z-]*)(?:[ =]([^\s`,;()]+))?", message):
        if flag in VALUE_FLAGS:
            if value and value != "with":
                out.append([flag, value])
        elif flag not in {f for f, *_ in out}:
            out.append([flag])
    return out


def with_flags(args: list[str], flags: list[str]) -> list[str]:
    """`args` with each suggested flag set: an option given already takes the suggested value."""
    out = list(args)
    if flags[0] in out and len(flags) == 2:
        out[out.index(flags[0]) + 1] = flags[1]
        return out
    return out + flags


# (cfg's model name, fingerprint recorded: None / "tiny:1", extra args): each one refused with suggestions.
REFUSED = [
    pytest.param("tiny:1", None, ["--model", "tiny"], id="another-known-model"),
    pytest.param("tiny", "tiny:1", [], id="same-name-other-weights"),
    pytest.param("tiny-sft-local", "tiny:1", ["--model", "tiny"], id="unknown-name-other-weights"),
    pytest.param("tiny-sft-local", None, [], id="unknown-name-no-model"),
]


@pytest.mark.parametrize(("recorded", "weights_of", "extra"), REFUSED)
def test_every_suggestion_an_error_makes_works(
    tmp_path: Path, recorded: str, weights_of: str | None, extra: list[str]
) -> None:
    """Failed before on same-name-other-weights and unknown-name-other-weights: the mismatch error suggested
    `--model` with the SAE's recorded name, the one just refused or one that cannot load (the issue's loop)."""
    fingerprint = model_fingerprint(load_model(weights_of)) if weights_of else None
    sae = saelens_folder(tmp_path / "sae", recorded, fingerprint)
    args = index_args(tmp_path, sae, *extra)
    refused = run(args)
    assert refused.exit_code != 0 and refused.exception is not None
    message = str(refused.exception)
    for flags in suggestions(message):
        retried = run(with_flags(args, flags))
        assert retried.exit_code == 0, (message, flags, retried.output, retried.exception)
