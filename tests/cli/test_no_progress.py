"""`--no-progress` silences every command that shows progress (issue 37 item 4): each registered command that shows
a bar or step lines runs with it on cheap inputs (the tiny model, a small corpus), and its stderr holds no progress
bar and no step line. Before: `index` printed its bar and `explain` rejected the flag."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.progress import bars_enabled

pytestmark = pytest.mark.slow

HOOK = "blocks.0.hook_resid_post"
TEXT = "\n".join(
    f"In the beginning {i} God created the heaven and the earth; def f{i}(x): return x * {i} + 1."
    for i in range(400)
)
# A tqdm bar ("embed windows:  40%|████      | 2/5 [00:01<00:01, 2.0it/s]") or a step line ("▶ loading model").
BAR = re.compile(r"\d+%\||\d+/\d+ \[\d\d:\d\d|it/s\]|s/it\]|▶ ")
# Every command that shows progress (bars or step lines) on the way to its result; `demo` runs these as
# subprocesses and passes the flag on (test_demo_passes_no_progress_to_its_stages), too long to run here.
SHOWS_PROGRESS = {"cache", "train", "index", "explain", "score", "polysemanticity-sweep", "absorption", "attribute",
                  "interactions", "match", "demo"}  # fmt: skip


def invoke(args: list[str]) -> Any:
    """Run the CLI in-process; stdout and stderr kept apart."""
    cli._register_stage_commands()
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, (args, result.output, result.exception)
    assert bars_enabled(), "--no-progress leaked past the command"
    return result


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """cache → train (two SAEs) → index → explain: the inputs of the later commands, built with --no-progress."""
    root = tmp_path_factory.mktemp("no-progress")
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT)
    common = [
        "--model",
        "tiny",
        "--hook",
        HOOK,
        "--corpus",
        str(corpus),
        "--context-size",
        "32",
        "--no-progress",
    ]
    stderr: dict[str, str] = {}
    stderr["cache"] = invoke(["cache", *common, "--tokens", "4096", "--out", str(root / "cache")]).stderr
    for seed in (0, 1):
        train = ["train", *common, "--cache", str(root / "cache"), "--tokens", "2048", "--expansion", "2", "--k", "4",
                 "--batch-size", "256", "--eval-windows", "4", "--ce-windows", "2", "--seed", str(seed),
                 "--out", str(root / f"sae{seed}")]  # fmt: skip
        stderr["train"] = invoke(train).stderr
    store = str(root / "store.duckdb")
    index = [
        "index",
        *common,
        "--sae",
        str(root / "sae0"),
        "--store",
        store,
        "--tokens",
        "2048",
        "--batch-size",
        "8",
    ]
    result = invoke(index)
    stderr["index"] = result.stderr
    sae_id = re.search(r"sae ([0-9a-f]{16})", result.stdout)
    assert sae_id is not None, result.stdout
    explain = ["explain", "--store", store, "--sae", sae_id.group(1), "--explainer", "lexical", "--features", "0-1",
               "--no-progress"]  # fmt: skip
    stderr["explain"] = invoke(explain).stderr
    return {
        "root": str(root),
        "store": store,
        "sae_id": sae_id.group(1),
        **{f"stderr:{k}": v for k, v in stderr.items()},
    }


@pytest.mark.parametrize("command", ["cache", "train", "index", "explain"])
def test_pipeline_commands_print_no_bar(pipeline: dict[str, str], command: str) -> None:
    assert not BAR.search(pipeline[f"stderr:{command}"]), pipeline[f"stderr:{command}"]


def later_args(command: str, p: dict[str, str]) -> list[str]:
    """Cheap arguments of the commands that read the pipeline's store and SAEs."""
    store, sae, root = ["--store", p["store"]], ["--sae", p["sae_id"]], Path(p["root"])
    one = ["--features", "0"]
    return {
        "score": ["score", *store, *sae, "--scorer", "embedding", "--features", "0-1"],
        "polysemanticity-sweep": ["polysemanticity-sweep", *store, *sae, *one, "--rule-caps", "1"],
        "absorption": ["absorption", "--toy"],
        "attribute": [
            "attribute",
            *store,
            *sae,
            "--sae-path",
            str(root / "sae0"),
            *one,
            "--examples",
            "1",
            "--levels",
            "tokens",
            "--no-effects",
        ],
        "interactions": ["interactions", *store, *sae, "--sae-path", str(root / "sae0"), *one, "--quick"],
        "match": ["match", *store, "--sae", str(root / "sae0"), "--sae", str(root / "sae1")],
    }[command]


@pytest.mark.parametrize(
    "command", ["score", "polysemanticity-sweep", "absorption", "attribute", "interactions", "match"]
)
def test_later_commands_print_no_bar(pipeline: dict[str, str], command: str) -> None:
    stderr = invoke([*later_args(command, pipeline), "--no-progress"]).stderr
    assert not BAR.search(stderr), stderr


def test_every_command_that_shows_progress_takes_the_flag() -> None:
    """The list above is every registered command with a progress flag (a new one joins the runs above)."""
    from tests.cli.test_options import _commands

    takes = {name for name, fn in _commands().items() if "progress" in inspect.signature(fn).parameters}
    assert takes == SHOWS_PROGRESS


def test_demo_passes_no_progress_to_its_stages() -> None:
    from sae_workbench.cli.demo import stage_args
    from sae_workbench.progress import silence_bars

    assert stage_args(["index", "--store", "s"]) == ["index", "--store", "s"]
    restore = silence_bars()
    try:
        assert stage_args(["index", "--store", "s"]) == ["index", "--no-progress", "--store", "s"]
        assert stage_args(["report", "--store", "s"]) == ["report", "--store", "s"]  # takes no such flag
    finally:
        restore()
