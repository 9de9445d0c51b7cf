"""Every command that calls an LLM takes the same LLM options (declared once in cli/llm_options.py), each readable from
its WORKBENCH_LLM_* variable, and turns them into one endpoint config."""

from __future__ import annotations

import typing
from typing import Any

import pytest
import typer

from sae_workbench.cli import llm_options

ENV = {
    "llm_model": ("WORKBENCH_LLM_MODEL", "env-model"),
    "llm_base_url": ("WORKBENCH_LLM_BASE_URL", "http://127.0.0.1:9/v1"),
    "api_key_env": ("WORKBENCH_LLM_API_KEY_ENV", "MY_KEY"),
    "concurrency": ("WORKBENCH_LLM_CONCURRENCY", "3"),
    "llm_timeout": ("WORKBENCH_LLM_TIMEOUT", "120"),
    "llm_max_tokens": ("WORKBENCH_LLM_MAX_TOKENS", "256"),
    "llm_context": ("WORKBENCH_LLM_CONTEXT", "8192"),
}
PARSED = {"concurrency": 3, "llm_timeout": 120.0, "llm_max_tokens": 256, "llm_context": 8192}
# The commands that call an LLM; the scan below also catches any new command that takes --llm-model.
LLM_COMMANDS = {"explain", "score", "polysemanticity-sweep"}


def _click_commands() -> dict[str, Any]:
    """Every top-level command as click sees it (after registration)."""
    from sae_workbench.cli import _register_stage_commands, app

    if not any(c.name == "score" for c in app.registered_commands):
        _register_stage_commands()
    group: Any = typer.main.get_command(app)  # typer's own click: typed loosely here
    return dict(group.commands)


def _llm_commands() -> list[str]:
    """Commands with an --llm-model option."""
    out = []
    for name, cmd in _click_commands().items():
        if any("--llm-model" in getattr(p, "opts", ()) for p in cmd.params):
            out.append(name)
    return sorted(out)


def test_the_llm_commands_are_the_expected_ones() -> None:
    assert set(_llm_commands()) >= LLM_COMMANDS


@pytest.mark.parametrize("name", sorted(LLM_COMMANDS))
def test_every_llm_command_takes_every_llm_option_from_llm_options(name: str) -> None:
    from sae_workbench.cli import _register_stage_commands, app

    if not any(c.name == "score" for c in app.registered_commands):
        _register_stage_commands()
    fn = next(c.callback for c in app.registered_commands if c.name == name)
    hints = typing.get_type_hints(fn, include_extras=True)
    declared = {id(meta) for v in vars(llm_options).values() for meta in getattr(v, "__metadata__", ())}
    for param, flag in llm_options.LLM_FLAGS.items():
        assert param in hints, f"{name} lacks {flag}"
        metadata = getattr(hints[param], "__metadata__", ())
        assert metadata and id(metadata[0]) in declared, f"{name} declares {flag} itself"
        info: Any = metadata[0]
        assert flag in (info.default, *info.param_decls) and info.envvar == ENV[param][0], (name, param)


@pytest.mark.parametrize("name", sorted(LLM_COMMANDS))
def test_every_llm_command_reads_the_llm_variables(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var, value in ENV.values():
        monkeypatch.setenv(var, value)
    cmd = _click_commands()[name]
    required = [p for p in cmd.params if p.required and getattr(p, "opts", None)]
    args = [a for p in required for a in (p.opts[0], "x")]
    ctx = cmd.make_context(name, args, resilient_parsing=False)
    for param, (_var, value) in ENV.items():
        assert ctx.params[param] == PARSED.get(param, value), (name, param)


def test_llm_endpoint_turns_the_options_into_one_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for var, _ in ENV.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MY_KEY", "k")
    status = llm_options.llm_endpoint("m", "http://127.0.0.1:9/v1", "MY_KEY", 4, 30.0, 64, 2048)
    cfg = status.config
    assert cfg is not None and (cfg.model, cfg.base_url, cfg.api_key_env) == (
        "m",
        "http://127.0.0.1:9/v1",
        "MY_KEY",
    )
    assert (cfg.concurrency, cfg.timeout_s, cfg.max_tokens, cfg.context_length) == (4, 30.0, 64, 2048)
    # Unset options keep the config's defaults.
    cfg = llm_options.llm_endpoint("m", "http://127.0.0.1:9/v1", "MY_KEY", 4).config
    assert cfg is not None and (cfg.timeout_s, cfg.max_tokens, cfg.context_length) == (60.0, 1024, None)
    assert not llm_options.llm_endpoint(None, None, "MY_KEY", 4).configured
