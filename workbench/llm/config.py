"""LLM endpoint configuration and the check callers make before choosing an LLM explainer or the lexical fallback.

The API key is never part of a config: `LLMConfig.api_key_env` names the environment variable that holds it, and the
client reads that variable when it connects. Environment variables understood by `endpoint_status` (and, through the
shared CLI options in `sae_workbench.cli.llm_options`, by every command that calls an LLM):

    WORKBENCH_LLM_MODEL             model name at the endpoint
    WORKBENCH_LLM_BASE_URL          endpoint root incl. /v1 (or OPENAI_BASE_URL); unset = the public OpenAI API
    WORKBENCH_LLM_API_KEY_ENV       name of the variable holding the key (default OPENAI_API_KEY)
    WORKBENCH_LLM_CONCURRENCY       most requests in flight
    WORKBENCH_LLM_TIMEOUT           seconds per HTTP attempt
    WORKBENCH_LLM_MAX_TOKENS        completion budget per call
    WORKBENCH_LLM_CONTEXT           the model's context length in tokens (when the server does not report it)
    WORKBENCH_LLM_STRUCTURED_OUTPUT auto, json_schema, json_object, format or none
    WORKBENCH_LLM_TOKENIZER         a GGUF file whose vocabulary counts prompt tokens (the served model's)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sae_workbench.errors import WorkbenchError

# Env var -> (LLMConfig field, parser) read by endpoint_status when the caller did not set the field.
ENV_FIELDS: dict[str, tuple[str, Any]] = {
    "WORKBENCH_LLM_API_KEY_ENV": ("api_key_env", str),
    "WORKBENCH_LLM_CONCURRENCY": ("concurrency", int),
    "WORKBENCH_LLM_TIMEOUT": ("timeout_s", float),
    "WORKBENCH_LLM_MAX_TOKENS": ("max_tokens", int),
    "WORKBENCH_LLM_CONTEXT": ("context_length", int),
    "WORKBENCH_LLM_STRUCTURED_OUTPUT": ("structured_output", str),
    "WORKBENCH_LLM_TOKENIZER": ("tokenizer_gguf", str),
}

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers (vLLM, Ollama, llama.cpp) accept any key; the openai client still insists on one.
NO_KEY_PLACEHOLDER = "no-key-needed"


class LLMNotConfiguredError(WorkbenchError):
    """No LLM endpoint is configured (no model name, or no key for the public OpenAI endpoint)."""


@dataclass(frozen=True)
class LLMConfig:
    """How to reach one OpenAI-compatible chat endpoint and how hard to try."""

    model: str
    """Model name sent to the endpoint (e.g. "gpt-4o-mini", "Qwen/Qwen2.5-7B-Instruct")."""
    base_url: str | None = None
    """Endpoint root including /v1 (e.g. http://localhost:8000/v1); None = the public OpenAI API."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the key; the key itself is never stored, logged or hashed."""
    temperature: float = 0.0
    """Sampling temperature (a request may override it)."""
    max_tokens: int = 1024
    """Completion token limit per call (a request may override it)."""
    timeout_s: float = 60.0
    """Per-HTTP-attempt timeout in seconds; a timed-out attempt is retried with twice the timeout (at most 4x)."""
    max_retries: int = 5
    """Retries after the first attempt on 429, 5xx, timeouts and connection errors (0 = try once)."""
    concurrency: int = 8
    """Most requests in flight at once from one client: the ceiling of the adaptive window (AIMD: it grows on fast
    answers, halves on timeouts, 429s and lost connections)."""
    initial_concurrency: int | None = None
    """Requests in flight at the start; None = 2 for an endpoint on this machine (one local server computes every
    answer; more would only queue inside it and time out), else `concurrency`."""
    down_after: int = 5
    """Consecutive attempts that cannot connect after which the endpoint counts as down (LLMEndpointDownError)."""
    context_length: int | None = None
    """The model's context length in tokens (prompt + completion); None = ask the server (vLLM /v1/models,
    llama-server /props) or learn it from its first overflow refusal."""
    tokenizer_gguf: str | None = None
    """A GGUF file whose vocabulary counts prompt tokens in this process (the served model's file: exact, and never
    queued behind the server's running answer); None = the server's tokenize route, else an estimate."""
    structured_output: str = "auto"
    """How a request's JSON schema is sent: auto (detected per endpoint: json_schema, then json_object, then none),
    json_schema (OpenAI/vLLM), json_object (llama-cpp-python), format (Ollama's native field) or none."""
    samples_per_request: bool = True
    """Several samples of one prompt come from one request (the API's `n`: the prompt is sent and billed once); an
    endpoint that refuses `n` gets one request per sample from then on, one that returns fewer choices gets the
    rest asked one by one."""
    max_reasks: int = 2
    """How many times a malformed answer is sent back with its parse error before giving up."""
    backoff_base_s: float = 1.0
    """First retry delay; doubles per retry, with seeded jitter, up to backoff_max_s."""
    backoff_max_s: float = 30.0
    """Upper bound of the exponential backoff (a server's Retry-After is honoured even when larger)."""
    seed: int = 0
    """Seed of the backoff jitter, so retry timing is reproducible."""
    price_in_per_1k: float | None = None
    """USD per 1k prompt tokens; None = unpriced (cost reported as 0.0)."""
    price_out_per_1k: float | None = None
    """USD per 1k completion tokens; None = unpriced (cost reported as 0.0)."""

    def __post_init__(self) -> None:
        """Reject settings that cannot work, with a message that says which field to fix."""
        if not self.model:
            raise LLMNotConfiguredError(
                "LLMConfig.model is empty: pass --llm-model or set WORKBENCH_LLM_MODEL"
            )
        checks = {
            "timeout_s": self.timeout_s > 0,
            "max_retries": self.max_retries >= 0,
            "concurrency": self.concurrency >= 1,
            "max_reasks": self.max_reasks >= 0,
            "max_tokens": self.max_tokens >= 1,
            "backoff_base_s": self.backoff_base_s >= 0,
            "backoff_max_s": self.backoff_max_s >= self.backoff_base_s,
            "initial_concurrency": self.initial_concurrency is None or self.initial_concurrency >= 1,
            "down_after": self.down_after >= 1,
            "context_length": self.context_length is None or self.context_length >= 1,
            "structured_output": self.structured_output
            in ("auto", "json_schema", "json_object", "format", "none"),
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid LLMConfig field(s) {', '.join(bad)}: {self!r}")

    @property
    def uses_public_openai(self) -> bool:
        """True when requests go to api.openai.com (where a real key is required)."""
        return self.base_url is None or self.base_url.rstrip("/") == OPENAI_DEFAULT_BASE_URL

    @property
    def start_concurrency(self) -> int:
        """Requests in flight at the start (see initial_concurrency)."""
        from sae_workbench.llm.endpoint import is_local_url

        if self.initial_concurrency is not None:
            return min(self.initial_concurrency, self.concurrency)
        return min(2, self.concurrency) if is_local_url(self.base_url) else self.concurrency

    def params(self) -> dict[str, Any]:
        """The non-secret settings to record as provenance of an LLM-made result."""
        return {
            "model": self.model,
            "base_url": self.base_url,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    def with_overrides(self, **changes: Any) -> LLMConfig:
        """A copy with some fields changed (convenience over dataclasses.replace)."""
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> LLMConfig:
        """Build a config from WORKBENCH_LLM_* / OPENAI_* variables; raise LLMNotConfiguredError when unusable."""
        status = endpoint_status(env=env, **overrides)
        if status.config is None:
            raise LLMNotConfiguredError(status.notice)
        return status.config


@dataclass(frozen=True)
class EndpointStatus:
    """Whether an LLM endpoint is usable, and the notice to show when it is not."""

    config: LLMConfig | None
    """The resolved config, or None when no endpoint is configured."""
    notice: str
    """One line for the user: what is used, or why the offline lexical explainer is used instead."""

    @property
    def configured(self) -> bool:
        """True when an LLM endpoint can be called."""
        return self.config is not None


def read_api_key(config: LLMConfig, env: Mapping[str, str] | None = None) -> str | None:
    """Return the key from the config's env var (or a placeholder for keyless local servers); None if unusable."""
    environ = os.environ if env is None else env
    key = environ.get(config.api_key_env, "").strip()
    if key:
        return key
    return None if config.uses_public_openai else NO_KEY_PLACEHOLDER


def endpoint_status(
    model: str | None = None,
    base_url: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> EndpointStatus:
    """Resolve the endpoint from arguments, then WORKBENCH_LLM_MODEL / WORKBENCH_LLM_BASE_URL / OPENAI_BASE_URL and
    the other WORKBENCH_LLM_* variables (ENV_FIELDS) for the settings not given in `overrides` (None = not given).

    Never raises for a missing endpoint: callers fall back to the lexical explainer and show `notice`.
    """
    environ = os.environ if env is None else env
    overrides = {k: v for k, v in overrides.items() if v is not None}
    for var, (name, parse) in ENV_FIELDS.items():
        raw = environ.get(var, "").strip()
        if name not in overrides and raw:
            try:
                overrides[name] = parse(raw)
            except ValueError:
                raise ValueError(f"${var}={raw!r} is not a valid {parse.__name__}") from None
    model = model or environ.get("WORKBENCH_LLM_MODEL") or None
    base_url = base_url or environ.get("WORKBENCH_LLM_BASE_URL") or environ.get("OPENAI_BASE_URL") or None
    fallback = "the offline lexical explainer (activation statistics, not an LLM) is used instead"
    if not model:
        return EndpointStatus(
            None, f"No LLM endpoint configured (set --llm-model or WORKBENCH_LLM_MODEL); {fallback}."
        )
    config = LLMConfig(model=model, base_url=base_url, **overrides)
    if read_api_key(config, environ) is None:
        return EndpointStatus(
            None,
            f"LLM model {model!r} targets the public OpenAI API but ${config.api_key_env} is not set "
            f"(set it, or pass --llm-base-url for a local server); {fallback}.",
        )
    where = config.base_url or OPENAI_DEFAULT_BASE_URL
    return EndpointStatus(config, f"Using LLM {model!r} at {where}.")


def config_provenance(config: LLMConfig) -> dict[str, Any]:
    """`LLMClient.provenance` before any request: what a result that made no LLM call (a dead feature) records, the
    same on every backend and whatever earlier features taught a client."""
    forced = config.structured_output
    return {
        **config.params(),
        "structured_output": forced if forced != "auto" else None,
        "context_length": config.context_length,
        "context_source": "config" if config.context_length is not None else None,
        "token_counter": None,
    }
