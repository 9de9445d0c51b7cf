"""The CLI's shared options: each declared once in cli/options.py, defaults from sae_workbench.defaults; feature
selections parsed by one function; the subject model checked once at a command's edge."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any

import pytest
import typer

from sae_workbench import defaults
from sae_workbench.cli import loaders, options
from sae_workbench.errors import ContextSizeError, HookNotFoundError
from sae_workbench.features import FeatureSpecError, parse_features

# Parameter name → the flag every command spells it with.
SHARED = {
    "store": "--store",
    "model": "--model",
    "hook": "--hook",
    "corpus": "--corpus",
    "context_size": "--context-size",
    "device": "--device",
    "seed": "--seed",
    "features": "--features",
    "progress": "--progress/--no-progress",
    "sae": "--sae",
    "llm_model": "--llm-model",
    "llm_base_url": "--llm-base-url",
    "api_key_env": "--api-key-env",
    "concurrency": "--concurrency",
    "negatives": "--negatives",
    "preset": "--preset",
    "embedding_model": "--embedding-model",
    "explainer": "--explainer",
    "record_len": "--record-len",
    "backend": "--backend",
    "ray_address": "--ray-address",
    "ray_workers": "--ray-workers",
    "llm_qps": "--llm-qps",
}
# (command, parameter) pairs declared in the command's own module on purpose, because the parameter means something
# else there: the sweep's --explainer takes tree or oneshot only (default tree), absorption's --preset names SAEBench's
# settings, graduate's --sae-id is a list. Each is a strict xfail, so moving one to options.py turns its xfail into a
# failure that asks to delete its line here.
KNOWN_GAPS = {
    (
        "polysemanticity-sweep",
        "explainer",
    ): "cli/polysemanticity_sweep.py declares --explainer (default 'tree') itself",
    ("absorption", "preset"): "cli/absorption.py declares --preset (SAEBench's settings) itself",
    ("graduate", "sae"): "cli/graduate.py declares --sae itself",
    ("graduate", "repair_sae"): "graduate --repair declares --sae itself (to move to options.py)",
    ("graduate", "repair_model"): "graduate --repair declares --model itself (to move to options.py)",
    ("graduate", "repair_corpus"): "graduate --repair declares --corpus itself (to move to options.py)",
    ("match", "sae"): "match's --sae is a list (two or more SAE ids or folders)",
    ("match", "explainer"): "match's --explainer turns the explanation-stability comparison on, no filter",
}


def _commands() -> dict[str, Callable[..., Any]]:
    """Every command the CLI registers, by the name users type."""
    from sae_workbench.cli import _register_stage_commands, app, corpus_app

    if not any(c.name == "score" for c in app.registered_commands):
        _register_stage_commands()
    out: dict[str, Callable[..., Any]] = {}
    for group, prefix in ((app, ""), (corpus_app, "corpus ")):
        for command in group.registered_commands:
            assert command.callback is not None
            out[prefix + (command.name or command.callback.__name__)] = command.callback
    return out


def _option_infos() -> set[int]:
    """ids of the typer OptionInfo objects options.py declares."""
    out = set()
    for value in vars(options).values():
        for meta in getattr(value, "__metadata__", ()):
            out.add(id(meta))
    return out


def _uses(params: Collection[str], gaps: Mapping[tuple[str, str], str]) -> list[Any]:
    """One pytest param per (command, parameter in `params` it takes); the pairs in `gaps` are strict xfails."""
    uses = []
    for name, fn in sorted(_commands().items()):
        for param in inspect.signature(fn).parameters:
            if param in params:
                gap = gaps.get((name, param))
                marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
                uses.append(pytest.param(name, param, marks=marks, id=f"{name}:{param}"))
    return uses


def _shared_uses() -> list[Any]:
    """One pytest param per (command, shared option it takes); the known gaps are strict xfails."""
    return _uses(SHARED, KNOWN_GAPS)


def test_the_scan_sees_every_command_and_the_issue_17_options() -> None:
    commands = _commands()
    assert {"explain", "score", "report", "polysemanticity-sweep", "cache", "train", "index"} <= set(commands)
    seen = {(c, p) for c, fn in commands.items() for p in inspect.signature(fn).parameters}
    for option in ("negatives", "preset", "embedding_model", "explainer"):
        assert {("explain", option), ("score", option)} <= seen, option
    assert ("explain", "record_len") in seen


@pytest.mark.parametrize(("name", "param"), _shared_uses())
def test_shared_options_come_from_the_options_module(name: str, param: str) -> None:
    fn = _commands()[name]
    hints = typing.get_type_hints(fn, include_extras=True)
    metadata = getattr(hints[param], "__metadata__", ())
    assert metadata and id(metadata[0]) in _option_infos(), f"{name} declares --{param} itself"
    info = metadata[0]  # in Annotated, typer reads a leading string "default" as the flag
    assert SHARED[param] in (info.default, *info.param_decls), (name, param)


def test_shared_defaults_are_the_defaults_module_values() -> None:
    values = {
        "model": defaults.DEFAULT_MODEL,
        "hook": defaults.DEFAULT_HOOK,
        "corpus": defaults.DEFAULT_CORPUS,
        "context_size": defaults.CONTEXT_SIZE,
        "device": defaults.DEFAULT_DEVICE,
    }
    seen = 0
    for name, fn in _commands().items():
        for param in inspect.signature(fn).parameters.values():
            # None defers to the input (index: the hook the SAE's cfg records, then defaults.DEFAULT_HOOK).
            if param.name in values and param.default not in (inspect.Parameter.empty, None):
                default = (
                    param.default[0] if isinstance(param.default, list) else param.default
                )  # cache: --hook list
                assert default == values[param.name], (name, param.name)
                seen += 1
    assert seen >= 11


# The explain/score options' defaults (tree paper values, cited in defaults.py); None = the command decides.
EXPLAIN_SCORE_DEFAULTS = {
    "negatives": defaults.NEGATIVES,
    "preset": defaults.PRESET,
    "embedding_model": defaults.EMBEDDING_MODEL,
    "explainer": None,
    "record_len": defaults.RECORD_LEN,
    "rule_cap": defaults.RULE_CAP,
    "per_split": defaults.PER_SPLIT,
}
KNOWN_DEFAULT_GAPS = {("polysemanticity-sweep", "explainer"): "sweep's --explainer defaults to 'tree'"}
# score's negatives and record length default to each explanation's own (issue 33): None there, and the split the
# explanation recorded (whose defaults are the ones above) decides.
FROM_EXPLANATION = {("score", "negatives"), ("score", "record_len")}


def _default_uses() -> list[Any]:
    """One pytest param per (command, explain/score option it takes)."""
    return _uses(EXPLAIN_SCORE_DEFAULTS, KNOWN_DEFAULT_GAPS)


@pytest.mark.parametrize(("name", "param"), _default_uses())
def test_explain_and_score_defaults_come_from_the_defaults_module(name: str, param: str) -> None:
    default = inspect.signature(_commands()[name]).parameters[param].default
    if isinstance(default, typer.models.OptionInfo):  # typer.Option(default, ...) in the signature
        default = default.default
    expected = None if (name, param) in FROM_EXPLANATION else EXPLAIN_SCORE_DEFAULTS[param]
    assert default == expected, (name, param, default)


def test_library_configs_default_to_the_cli_defaults() -> None:
    """The configs the commands build (and their library callers get) agree with the CLI's defaults."""
    from sae_workbench.evaluation.scorers.base import ScoreConfig, ScorerInputs
    from sae_workbench.examples.rules import DEFAULT_RULE_CAP
    from sae_workbench.examples.sampling import NegativeSource
    from sae_workbench.examples.testsets import PER_SPLIT, SplitConfig
    from sae_workbench.explainers.base import ExplainConfig
    from sae_workbench.explainers.tree import TreeConfig, TreeExplainer

    assert NegativeSource(defaults.NEGATIVES) is SplitConfig().negatives is NegativeSource.SIMILAR_NEGATIVE
    explain, score = ExplainConfig(), ScoreConfig("simulation")
    assert explain.negatives == score.split().negatives.value == defaults.NEGATIVES
    assert score.negatives is None and score.record_length is None  # each explanation's own unless told
    assert explain.per_split == score.per_split == PER_SPLIT == defaults.PER_SPLIT == 10
    assert explain.rule_cap == DEFAULT_RULE_CAP == TreeConfig().rule_cap == defaults.RULE_CAP == 5
    assert explain.record_len == TreeExplainer().record_len == defaults.RECORD_LEN == 32
    assert explain.seed == score.seed == defaults.DEFAULT_SEED
    assert explain.preset == ScorerInputs().preset == defaults.PRESET
    assert explain.embedding_model == defaults.EMBEDDING_MODEL


@pytest.mark.parametrize("command", ["explain", "score"])
@pytest.mark.parametrize("spelling", ["similar_negative", "SIMILAR_NEGATIVE", "Random", " random_negative "])
def test_negatives_take_either_spelling_in_both_commands(command: str, spelling: str) -> None:
    """What users could pass to either command before (score: any case; explain: the enum names) both work."""
    from sae_workbench.cli import app
    from sae_workbench.examples.sampling import NegativeSource

    _commands()
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    args = ["--store", "s.duckdb", "--sae", "x", "--negatives", spelling]
    ctx = click_command.make_context(
        command, [*args, *(["--scorer", "detection"] if command == "score" else [])]
    )
    assert ctx.params["negatives"] == NegativeSource[spelling.strip().upper()].value


def test_train_config_defaults_are_the_cli_defaults() -> None:
    from sae_workbench.sae.index_request import IndexConfig
    from sae_workbench.sae.train import TrainConfig

    cfg, params = TrainConfig(), inspect.signature(_commands()["train"]).parameters
    for field, option in (
        ("k", "k"),
        ("expansion", "expansion"),
        ("n_tokens", "tokens"),
        ("batch_size", "batch_size"),
    ):
        assert getattr(cfg, field) == params[option].default.default, field
    index = inspect.signature(_commands()["index"]).parameters
    assert IndexConfig().context_size == index["context_size"].default
    assert IndexConfig().batch_size == index["batch_size"].default


@pytest.mark.parametrize(
    ("spec", "d_sae", "want"),
    [
        ("all", 4, [0, 1, 2, 3]),
        (" ALL ", 2, [0, 1]),
        ("3", 10, [3]),
        ("0-2", 10, [0, 1, 2]),
        ("9,0-2,2, 5", 10, [0, 1, 2, 5, 9]),
        ("7-7", 8, [7]),
    ],
)
def test_parse_features(spec: str, d_sae: int, want: list[int]) -> None:
    assert parse_features(spec, d_sae) == want


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x", "bad --features"),
        ("3-", "bad --features"),
        ("5-2", "bad --features"),
        ("1,,a", "bad --features"),
        (",", "selects no feature"),
        ("0-10", r"outside 0\.\.7"),
        ("-1", r"outside 0\.\.7"),
    ],
)
def test_parse_features_rejects_with_a_typed_error(spec: str, message: str) -> None:
    with pytest.raises(FeatureSpecError, match=message):
        parse_features(spec, 8)


def test_load_subject_checks_hooks_and_window_size_once() -> None:
    model = loaders.load_subject("tiny", ["blocks.1.hook_resid_post"], 32)
    assert model.cfg.n_layers == 2
    with pytest.raises(HookNotFoundError, match=r"blocks\.9\.hook_resid_post"):
        loaders.load_subject("tiny", ["blocks.9.hook_resid_post"])
    with pytest.raises(ContextSizeError):
        loaders.load_subject("tiny", ["blocks.1.hook_resid_post"], 10_000)


# --- every shared option, found from options.py itself (issue 37 item 4) -----------------------------------------


def _option_flags(info: Any) -> set[str]:
    """The flags an OptionInfo declares (`--progress/--no-progress` → both)."""
    decls = [info.default, *info.param_decls] if isinstance(info.default, str) else list(info.param_decls)
    return {
        flag for decl in decls if isinstance(decl, str) for flag in decl.split("/") if flag.startswith("--")
    }


def _shared_flags() -> set[str]:
    """Every flag an option declared in options.py (or re-exported there) has: the shared options."""
    flags: set[str] = set()
    for value in vars(options).values():
        for meta in getattr(value, "__metadata__", ()):
            if isinstance(meta, typer.models.OptionInfo):
                flags |= _option_flags(meta)
    return flags


def _param_option(fn: Callable[..., Any], param: str) -> Any:
    """The OptionInfo behind a command's parameter (from Annotated, or a typer.Option default), or None."""
    hint = typing.get_type_hints(fn, include_extras=True).get(param)
    for meta in getattr(hint, "__metadata__", ()):
        if isinstance(meta, typer.models.OptionInfo):
            return meta
    default = inspect.signature(fn).parameters[param].default
    return default if isinstance(default, typer.models.OptionInfo) else None


def _shared_flag_uses() -> list[Any]:
    """One pytest param per (command, parameter) whose flag is a shared one, whatever the parameter is called."""
    shared, uses = _shared_flags(), []
    for name, fn in sorted(_commands().items()):
        for param in inspect.signature(fn).parameters:
            info = _param_option(fn, param)
            if info is not None and _option_flags(info) & shared:
                gap = KNOWN_GAPS.get((name, param))
                marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
                uses.append(pytest.param(name, param, marks=marks, id=f"{name}:{param}"))
    return uses


def test_shared_flags_cover_every_option_of_the_options_module() -> None:
    """The scan sees all shared options, not a hand-kept list: every flag in SHARED and the LLM options is one."""
    assert set(SHARED.values()) - {"--progress/--no-progress"} <= _shared_flags()
    assert {"--progress", "--no-progress", "--llm-model", "--force-model", "--batch-size"} <= _shared_flags()


@pytest.mark.parametrize(("name", "param"), _shared_flag_uses())
def test_every_shared_flag_means_the_shared_option(name: str, param: str) -> None:
    """A command spelling a shared flag (under any parameter name) declares it through options.py, so its parsing,
    help and side effects (--no-progress silencing every bar) are the same in every command."""
    info = _param_option(_commands()[name], param)
    assert id(info) in _option_infos(), f"{name} declares {sorted(_option_flags(info))} itself (--{param})"


# Every command that shows progress bars or step lines while it works (issue 37 item 4).
SHOWS_PROGRESS = {"cache", "train", "index", "explain", "score", "polysemanticity-sweep", "absorption", "attribute",
                  "interactions", "match", "demo"}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SHOWS_PROGRESS))
def test_every_command_that_shows_progress_takes_no_progress(name: str) -> None:
    """Failed before for explain and demo: explain rejected --no-progress, demo had no such flag."""
    fn = _commands()[name]
    assert "progress" in inspect.signature(fn).parameters, name
    assert id(_param_option(fn, "progress")) in _option_infos(), name
