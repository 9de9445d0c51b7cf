"""`workbench train` end to end on the tiny model: trains, saves, writes metrics with directions, prints them."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sae_workbench.cli.train import train
from sae_workbench.sae.io import load_sae


@pytest.mark.slow  # trains and evaluates on the tiny model (CE/KL on 2 of 8 windows)
def test_train_command_on_tiny_model(tmp_path: Path):
    corpus = tmp_path / "c.txt"
    import inspect

    corpus.write_text(inspect.getsource(inspect))
    app = typer.Typer()
    app.command()(train)
    out = tmp_path / "sae"
    args = [
        "--model",
        "tiny",
        "--hook",
        "blocks.1.hook_resid_post",
        "--corpus",
        str(corpus),
        "--d-sae",
        "128",
        "--k",
        "4",
        "--tokens",
        "2048",
        "--batch-size",
        "512",
        "--context-size",
        "32",
        "--out",
        str(out),
        "--eval-windows",
        "8",
        "--ce-windows",
        "2",
        "--checkpoint-every",
        "0",
        "--dense-step",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "explained_variance" in result.output and "higher is better" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["metrics"]["n_tokens"] > 0 and "ce_loss_recovered" in metrics["metrics"]
    assert 0 < metrics["metrics"]["n_ce_tokens"] <= 2 * 31 < metrics["metrics"]["n_tokens"]
    assert metrics["eval_config"]["ce_windows"] == 2
    assert load_sae(out).cfg.d_sae == 128
    assert json.loads((out / "train_config.json").read_text())["sparse_step"] is False
