"""The CLI's shared options: each declared once in cli/options.py, defaults from sae_workbench.defaults; feature
selections parsed by one function; the subject model checked once at a command's edge."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest

from sae_workbench import defaults
from sae_workbench.cli import options
from sae_workbench.errors import ContextSizeError, HookNotFoundError
from sae_workbench.features import FeatureSpecError, parse_features

# Parameter name → the flag every command spells it with (explain.py and score.py are being rewritten elsewhere).
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
}


def _commands() -> dict[str, Callable[..., Any]]:
    from sae_workbench.cli import corpus_info
    from sae_workbench.cli.absorption import absorption
    from sae_workbench.cli.cache import cache
    from sae_workbench.cli.demo import demo
    from sae_workbench.cli.index import index
    from sae_workbench.cli.serve import app
    from sae_workbench.cli.train import train

    return {
        "cache": cache,
        "train": train,
        "index": index,
        "demo": demo,
        "app": app,
        "absorption": absorption,
        "corpus info": corpus_info,
    }


def _option_infos() -> set[int]:
    """ids of the typer OptionInfo objects options.py declares."""
    out = set()
    for value in vars(options).values():
        for meta in getattr(value, "__metadata__", ()):
            out.add(id(meta))
    return out


@pytest.mark.parametrize("name", sorted(_commands()))
def test_shared_options_come_from_the_options_module(name: str) -> None:
    fn = _commands()[name]
    declared = _option_infos()
    hints = typing.get_type_hints(fn, include_extras=True)
    shared = [p for p in inspect.signature(fn).parameters if p in SHARED]
    assert shared, f"{name} has none of the shared options"
    for param in shared:
        metadata = getattr(hints[param], "__metadata__", ())
        assert metadata and id(metadata[0]) in declared, f"{name} declares --{param} itself"
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


def test_train_config_defaults_are_the_cli_defaults() -> None:
    from sae_workbench.sae.indexing import IndexConfig
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
    model = options.load_subject("tiny", ["blocks.1.hook_resid_post"], 32)
    assert model.cfg.n_layers == 2
    with pytest.raises(HookNotFoundError, match=r"blocks\.9\.hook_resid_post"):
        options.load_subject("tiny", ["blocks.9.hook_resid_post"])
    with pytest.raises(ContextSizeError):
        options.load_subject("tiny", ["blocks.1.hook_resid_post"], 10_000)
