"""Commands that take --sae default the hook to the one the SAE's cfg records (issue 19, item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sae_workbench import cli, defaults
from sae_workbench.sae.index_loop import SAEHookMismatchError
from sae_workbench.sae.io import load_sae, save_sae
from sae_workbench.store import Store
from tests.sae.test_indexing import TEXT, make_sae

HOOK0 = "blocks.0.hook_resid_post"


@pytest.fixture(scope="module")
def app():
    if not any(c.name == "index" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    return cli.app


def _index_args(tmp_path: Path, sae_dir: Path, *extra: str) -> list[str]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    return ["index", "--store", str(tmp_path / "s.duckdb"), "--sae", str(sae_dir), "--model", "tiny",
            "--corpus", str(corpus), "--tokens", "128", "--context-size", "32", "--batch-size", "4",
            *extra]  # fmt: skip


def test_index_without_hook_uses_the_hook_the_sae_records(app, tmp_path: Path) -> None:
    # The SAE reads layer 0; the default hook is layer 3 (which the 2-layer tiny model does not even have).
    assert defaults.DEFAULT_HOOK != HOOK0
    sae_dir = save_sae(make_sae(hook=HOOK0), tmp_path / "sae")
    result = CliRunner().invoke(app, _index_args(tmp_path, sae_dir))
    assert result.exit_code == 0, (result.output, result.exception)
    (record,) = Store.open(tmp_path / "s.duckdb", read_only=True).list_saes()
    assert record.hook == HOOK0
    # Issue 19 item 4: the silent steps around the indexing bar are announced (the hook says where it came from).
    for step in (
        "loading model tiny",
        "loading SAE",
        f"hook {HOOK0} (from the SAE's cfg)",
        "feature statistics",
    ):
        assert step in result.stderr, (step, result.stderr)


def test_an_explicit_hook_that_contradicts_the_sae_is_still_refused(app, tmp_path: Path) -> None:
    sae_dir = save_sae(make_sae(hook=HOOK0), tmp_path / "sae")
    result = CliRunner().invoke(app, _index_args(tmp_path, sae_dir, "--hook", "blocks.1.hook_resid_post"))
    assert isinstance(result.exception, SAEHookMismatchError), result.output
    assert HOOK0 in str(result.exception)


def test_resolve_hook_reads_the_cfg_in_either_place(tmp_path: Path) -> None:
    from sae_workbench.sae.io import recorded_hook, resolve_hook

    sae = load_sae(save_sae(make_sae(hook=HOOK0), tmp_path / "sae"))
    assert recorded_hook(sae) == HOOK0 and resolve_hook(sae, None) == HOOK0
    assert resolve_hook(sae, "blocks.1.hook_resid_post") == "blocks.1.hook_resid_post"  # given wins
    bare = make_sae(hook="")
    bare.cfg.metadata.hook_name = None  # type: ignore[assignment]
    assert recorded_hook(bare) is None and resolve_hook(bare, None) == defaults.DEFAULT_HOOK
    # Older sae-lens cfgs keep hook_name at the top level, not under metadata.
    assert recorded_hook({"hook_name": "blocks.2.hook_mlp_out", "d_in": 4}) == "blocks.2.hook_mlp_out"


def _absorption_args(sae_dir: Path, *extra: str) -> list[str]:
    return ["absorption", "--sae", str(sae_dir), "--model", "tiny", "--max-words", "200",
            "--n-icl-examples", "2", "--min-letters", "0", "--min-probe-f1", "-1", *extra]  # fmt: skip


def _saved_sae(tmp_path: Path, model_name: str) -> Path:
    sae = make_sae(hook="blocks.1.hook_resid_post")
    sae.cfg.metadata.model_name = model_name
    return save_sae(sae, tmp_path / "sae")


def test_absorption_accepts_an_alias_of_the_probed_model(app, tmp_path: Path, monkeypatch) -> None:
    """An SAE whose cfg spells the model differently ('TINY' for 'tiny', as SAELens cfgs spell SmolLM2 by its hub
    id) is not refused; the eval runs and shows its progress."""
    monkeypatch.setenv("WORKBENCH_HOME", str(_home(tmp_path)))
    result = CliRunner().invoke(app, _absorption_args(_saved_sae(tmp_path, "TINY")))
    assert result.exit_code == 0, (result.output, result.exception)
    assert "mean_absorption_fraction_score=" in result.output
    # Issue 19 item 4: every stage over ~2 s shows a bar or a step line (on stderr, also when it is not a TTY).
    for step in ("loading model tiny", "loading SAE", "alphabetic vocabulary", "first-letter prompts (train)",
                 "first-letter prompts (test)", "build prompts (train)", "letter probes", "SAE encode",
                 "L1 probe on SAE features", "k-sparse probes"):  # fmt: skip
        assert step in result.stderr, (step, result.stderr[-2000:])


def test_absorption_refuses_another_model_unless_forced(app, tmp_path: Path, monkeypatch, caplog) -> None:
    from sae_workbench.evaluation.absorption.eval import ProbeTooWeakError
    from sae_workbench.model_identity import ModelMismatchError

    monkeypatch.setenv("WORKBENCH_HOME", str(_home(tmp_path)))
    sae_dir = _saved_sae(tmp_path, "HuggingFaceTB/SmolLM2-135M-Instruct")
    refused = CliRunner().invoke(app, _absorption_args(sae_dir))
    assert isinstance(refused.exception, ModelMismatchError), refused.output
    assert "--force-model" in str(refused.exception) and "d_model" in str(refused.exception)
    # Forced, the eval goes on past the model check (to the letter probes, where 27 letters can never qualify:
    # that stops the run without paying for the k-sparse probes) and the mismatch is a logged warning.
    with caplog.at_level("WARNING", logger="sae_workbench.model_identity"):
        forced = CliRunner().invoke(app, [*_absorption_args(sae_dir, "--force-model"), "--min-letters", "27"])
    assert isinstance(forced.exception, ProbeTooWeakError), (forced.output, forced.exception)
    assert any("--force-model" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def _home(tmp_path: Path) -> Path:
    """A fresh WORKBENCH_HOME (no cached probe data) that reuses the converted models and tokenizer."""
    from sae_workbench import paths

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "models").symlink_to(paths.models_dir(), target_is_directory=True)
    return home


def test_index_without_model_or_hook_uses_what_the_sae_records(app, tmp_path: Path) -> None:
    sae = make_sae(hook=HOOK0)
    sae.cfg.metadata.model_name = "tiny"
    sae_dir = save_sae(sae, tmp_path / "sae")
    args = [a for a in _index_args(tmp_path, sae_dir) if a not in ("--model", "tiny")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    (record,) = Store.open(tmp_path / "s.duckdb", read_only=True).list_saes()
    assert (record.model, record.hook) == ("tiny", HOOK0)
    assert "model tiny (from the SAE's cfg)" in result.stderr


def test_resolve_model_prefers_a_loadable_spelling(tmp_path: Path) -> None:
    from sae_workbench.model_identity import resolve_model

    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct", None) == "smollm2-135m"  # embedded, offline
    assert resolve_model("tiny", None) == "tiny"  # loadable as recorded: kept (the SAE id hashes the name)
    assert resolve_model(None, None) == defaults.DEFAULT_MODEL
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct", "tiny") == "tiny"  # --model wins


def test_train_announces_its_stages_and_loads_the_model_once(app, tmp_path: Path, monkeypatch) -> None:
    """Issue 19 item 4: `workbench train` says what it does between its bars, and loads (and checks) the subject
    model once: the CLI's load is the one the run trains on."""
    from sae_workbench import models

    loads: list[str] = []
    real_load_model = models.load_model

    def counting_load_model(name: str, *args, **kwargs):
        loads.append(name)
        return real_load_model(name, *args, **kwargs)

    monkeypatch.setattr(models, "load_model", counting_load_model)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 40)
    out = tmp_path / "sae"

    def args(out: Path) -> list[str]:
        return ["train", "--model", "tiny", "--hook", "blocks.1.hook_resid_post", "--corpus", str(corpus),
                "--d-sae", "64", "--k", "4", "--tokens", "1024", "--batch-size", "256", "--context-size", "32",
                "--out", str(out), "--eval-windows", "2", "--ce-windows", "0", "--checkpoint-every", "0"]  # fmt: skip

    result = CliRunner().invoke(app, args(out))
    assert result.exit_code == 0, (result.output, result.exception)
    assert loads == ["tiny"]
    assert (out / "metrics.json").exists()
    steps = [line for line in result.stderr.splitlines() if line.startswith("▶ ")]
    expected = ["loading model tiny", f"corpus {corpus}", "training a topk SAE at blocks.1.hook_resid_post",
                "held-out metrics on 2 windows"]  # fmt: skip
    assert len(steps) == len(expected), steps
    for line, want in zip(steps, expected, strict=True):
        assert want in line, (want, steps)
    quiet = CliRunner().invoke(app, [*args(tmp_path / "quiet"), "--no-progress"])
    assert quiet.exit_code == 0, (quiet.output, quiet.exception)
    assert "▶" not in quiet.stderr
