"""The LLM options every command that calls an LLM takes (explain, score, polysemanticity-sweep), declared once, each
with its WORKBENCH_LLM_* environment variable; `llm_endpoint` turns them into the endpoint to use.

    def command(
        llm_model: llm_options.LlmModel = None,
        llm_base_url: llm_options.LlmBaseUrl = None,
        api_key_env: llm_options.ApiKeyEnv = defaults.LLM_API_KEY_ENV,
        concurrency: llm_options.Concurrency = defaults.LLM_CONCURRENCY,
        llm_timeout: llm_options.LlmTimeout = None,
        llm_max_tokens: llm_options.LlmMaxTokens = None,
        llm_context: llm_options.LlmContext = None,
    ) -> None:
        status = llm_options.llm_endpoint(llm_model, llm_base_url, api_key_env, concurrency, llm_timeout,
                                          llm_max_tokens, llm_context)
        status.config  # LLMConfig, or None (offline) with status.notice saying why

An option given on the command line wins over its variable; `workbench llm serve` prints the variables for its server.
This module imports typer only, so `--help` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from sae_workbench.llm.config import EndpointStatus

LlmModel = Annotated[
    str | None,
    typer.Option(
        "--llm-model",
        envvar="WORKBENCH_LLM_MODEL",
        help="Model at an OpenAI-compatible endpoint (`workbench llm serve` starts a local one); none: offline.",
    ),
]
LlmBaseUrl = Annotated[
    str | None,
    typer.Option(
        "--llm-base-url",
        envvar="WORKBENCH_LLM_BASE_URL",
        help="Endpoint root incl. /v1 (also $OPENAI_BASE_URL); default OpenAI's.",
    ),
]
ApiKeyEnv = Annotated[
    str,
    typer.Option(
        "--api-key-env",
        envvar="WORKBENCH_LLM_API_KEY_ENV",
        help="Name of the environment variable holding the key (never stored).",
    ),
]
Concurrency = Annotated[
    int,
    typer.Option(
        "--concurrency",
        min=1,
        envvar="WORKBENCH_LLM_CONCURRENCY",
        help="Features (and at most this many LLM calls) in flight at once; the client starts at 2 for a local "
        "endpoint and adapts (halves on timeouts, grows on fast answers).",
    ),
]
LlmTimeout = Annotated[
    float | None,
    typer.Option(
        "--llm-timeout",
        min=0.001,
        envvar="WORKBENCH_LLM_TIMEOUT",
        help="Seconds per LLM HTTP attempt (default 60; a retried timeout gets twice as long, at most 4x).",
    ),
]
LlmMaxTokens = Annotated[
    int | None,
    typer.Option(
        "--llm-max-tokens",
        min=1,
        envvar="WORKBENCH_LLM_MAX_TOKENS",
        help="Completion budget per LLM call in tokens (default 1024).",
    ),
]
LlmContext = Annotated[
    int | None,
    typer.Option(
        "--llm-context",
        min=1,
        envvar="WORKBENCH_LLM_CONTEXT",
        help="The model's context length in tokens, where the server does not report it (vLLM and llama-server "
        "do; llama-cpp-python, Ollama and hosted APIs do not).",
    ),
]

LLM_FLAGS = {
    "llm_model": "--llm-model",
    "llm_base_url": "--llm-base-url",
    "api_key_env": "--api-key-env",
    "concurrency": "--concurrency",
    "llm_timeout": "--llm-timeout",
    "llm_max_tokens": "--llm-max-tokens",
    "llm_context": "--llm-context",
}
"""Parameter name -> flag of every LLM option (a command that calls an LLM takes all of them)."""


def llm_endpoint(
    llm_model: str | None,
    llm_base_url: str | None,
    api_key_env: str,
    concurrency: int,
    llm_timeout: float | None = None,
    llm_max_tokens: int | None = None,
    llm_context: int | None = None,
) -> EndpointStatus:
    """The endpoint the LLM options name (unset ones from their WORKBENCH_LLM_* variables, then the defaults)."""
    from sae_workbench.llm.config import endpoint_status

    return endpoint_status(
        llm_model or None,
        llm_base_url or None,
        api_key_env=api_key_env,
        concurrency=concurrency,
        timeout_s=llm_timeout,
        max_tokens=llm_max_tokens,
        context_length=llm_context,
    )
