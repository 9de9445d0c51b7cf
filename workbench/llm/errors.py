"""The LLM client's typed errors, and which of them should stop a job rather than fail one feature.

    try:
        parsed = await llm.complete_parsed(request, parse)
    except JOB_FATAL_ERRORS:
        raise                      # bad key, endpoint down for good: stop the job and say so
    except FEATURE_ERRORS as err:
        record_failure(feature, reason=f"{type(err).__name__}: {err}")   # this feature fails; the job goes on

Every message says what went wrong and what to do; none contains the API key.
"""

from __future__ import annotations

from collections.abc import Sequence

from sae_workbench.errors import WorkbenchError
from sae_workbench.llm.config import LLMNotConfiguredError


class LLMError(WorkbenchError):
    """Base class of LLM client errors."""


class LLMAuthError(LLMError):
    """The endpoint rejected the API key (HTTP 401/403); retrying cannot help."""


class LLMUnavailableError(LLMError):
    """The endpoint kept failing (429, 5xx, timeouts, connection errors) after every retry of one request."""


class LLMTimeoutError(LLMUnavailableError):
    """The last attempts of one request timed out (the endpoint is up but too slow for the timeout)."""


class LLMEndpointDownError(LLMError):
    """Several consecutive attempts could not even connect: the endpoint is down, and the job should stop.

    Not an LLMUnavailableError on purpose: a job that fails a feature on LLMUnavailableError must not mistake a dead
    server for one slow answer. A later request tries again once (so a restarted server is picked up)."""


class LLMRequestError(LLMError):
    """The endpoint rejected the request itself (HTTP 4xx other than 401/403/429), e.g. an unknown model."""


class LLMFormatRefusedError(LLMRequestError):
    """The endpoint refused the structured-output form the request carried (e.g. llama-cpp-python answers the
    OpenAI `json_schema` form with HTTP 500). Never retried as an outage; with `structured_output="auto"` the client
    tries the next form instead."""


class LLMContextOverflowError(LLMRequestError):
    """The prompt plus the completion budget does not fit the model's context (checked before sending, or the
    server's own refusal). Retrying the same request cannot help: trim the prompt or lower max_tokens."""

    def __init__(
        self, message: str, *, prompt_tokens: int | None, max_tokens: int, context_length: int | None
    ) -> None:
        """Keep the numbers so a caller can trim by the right amount."""
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.context_length = context_length

    @property
    def excess_tokens(self) -> int | None:
        """Tokens to remove from the prompt (or the budget) to fit; None when a number is unknown."""
        if self.prompt_tokens is None or self.context_length is None:
            return None
        return self.prompt_tokens + self.max_tokens - self.context_length


class LLMMalformedOutputError(LLMError):
    """The model's answers could not be parsed, even after re-asking with the parse error."""

    def __init__(
        self, message: str, *, last_text: str, errors: Sequence[str], truncated: bool = False
    ) -> None:
        """Keep the last raw answer and every parse error for inspection."""
        super().__init__(message)
        self.last_text = last_text
        self.errors = list(errors)
        self.truncated = truncated


class LLMServerError(LLMError):
    """The embedded local LLM server (`workbench llm serve`) could not be started."""


class LLMServerNotInstalledError(LLMServerError):
    """llama-cpp-python (with its [server] extra) is not installed in this environment."""


class LLMModelFileError(LLMServerError):
    """The GGUF model file is missing or unreadable."""


class LLMServerStartError(LLMServerError):
    """The server process exited, or did not answer its health check before the deadline."""


JOB_FATAL_ERRORS: tuple[type[WorkbenchError], ...] = (
    LLMAuthError,
    LLMEndpointDownError,
    LLMNotConfiguredError,
)
"""Errors after which no later feature can succeed: catch these first and stop the job."""

FEATURE_ERRORS: tuple[type[LLMError], ...] = (LLMMalformedOutputError, LLMRequestError, LLMUnavailableError)
"""Errors that fail one feature (stored with its reason, retried on the next run); the job goes on."""
