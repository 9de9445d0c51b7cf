"""The `workbench` CLI: help text for every command, `workbench cache` end to end, and errors as one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.activation_cache.reader import ActivationCache
from sae_workbench.cli.cache import default_cache_dir
from sae_workbench.errors import CacheMismatchError, HookNotFoundError
from tests.core.test_activation_cache import write_corpus

WORKBENCH = Path(sys.executable).parent / "workbench"
runner = CliRunner()


@pytest.fixture(scope="module")
def app():
    if not any(c.name == "cache" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    return cli.app


def _registered(app) -> list[tuple[str, ...]]:
    """Every command the CLI registers (groups' commands included), as the words a user types."""
    out: list[tuple[str, ...]] = []
    for command in app.registered_commands:
        assert command.callback is not None
        out.append((command.name or command.callback.__name__.replace("_", "-"),))
    for group in app.registered_groups:
        out.append((group.name,))
        for command in group.typer_instance.registered_commands:
            assert command.callback is not None
            out.append((group.name, command.name or command.callback.__name__.replace("_", "-")))
    return out


def test_help_explains_every_command(app):
    """Every registered command (not a hand-picked two) is listed in the top-level help with its summary, and its
    own --help works and shows its docstring's first line."""
    result = runner.invoke(app, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "Cache activations of a model" in result.output
    commands = _registered(app)
    assert len(commands) >= 17, commands
    for words in commands:
        if len(words) == 1:
            assert words[0] in result.output, words
        own = runner.invoke(app, [*words, "--help"], terminal_width=200)
        assert own.exit_code == 0, (words, own.output)
        assert "Usage:" in own.output, words
    cache_help = runner.invoke(app, ["cache", "--help"], terminal_width=200).output
    for option in ("--model", "--hook", "--corpus", "--tokens", "--context-size", "--batch-size", "--dtype",
                   "--out", "--shard-tokens", "--exclude-outliers"):  # fmt: skip
        assert option in cache_help


def test_cache_command_writes_and_resumes(app, tmp_path: Path):
    corpus = write_corpus(tmp_path / "c.txt")
    args = ["cache", "--model", "tiny", "--hook", "blocks.1.hook_resid_post", "--corpus", str(corpus),
            "--tokens", "320", "--context-size", "16", "--batch-size", "4", "--shard-tokens", "64",
            "--out", str(tmp_path / "out"), "--no-progress", "--exclude-outliers", "5"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"cache: {(tmp_path / 'out').resolve()}" in result.output
    assert "320 tokens" in result.output and "5 shards" in result.output and "float16" in result.output
    cache = ActivationCache(tmp_path / "out")
    assert cache.manifest.hooks == ("blocks.1.hook_resid_post",) and cache.manifest.dtype == "float16"
    assert cache.manifest.mask_policy["outlier_norm_factor"] == 5.0
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "already complete" in again.output
    other = [a if a != "16" else "32" for a in args]  # same folder, different --context-size
    mismatch = runner.invoke(app, other)
    assert isinstance(mismatch.exception, CacheMismatchError), mismatch.output
    assert "context_size" in str(mismatch.exception)


def test_default_out_folder_names_the_settings():
    folder = default_cache_dir("smollm2-135m", ["blocks.3.hook_resid_post"], "default", 128)
    assert folder == Path("runs/cache/smollm2-135m__blocks.3.hook-resid-post__default__ctx128")
    assert (
        default_cache_dir("/x/my model", ["a", "b"], "/data/c.jsonl", 64).name
        == "my-model__a+b__c.jsonl__ctx64"
    )


def test_bad_hook_raises_typed_error(app, tmp_path: Path):
    result = runner.invoke(app, ["cache", "--model", "tiny", "--hook", "blocks.9.hook_resid_post",
                                 "--out", str(tmp_path / "o")])  # fmt: skip
    assert isinstance(result.exception, HookNotFoundError)
    assert not (tmp_path / "o").exists()


def test_console_script_reports_errors_in_one_line():
    done = subprocess.run(
        [str(WORKBENCH), "cache", "--model", "no-such-model"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "UnknownModelError" in errors[0] and "'tiny'" in errors[0]
    assert "Traceback" not in done.stderr
