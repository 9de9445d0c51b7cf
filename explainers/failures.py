"""One feature's LLM failure as a recorded outcome: the explain job (local and Ray) and the score job turn an error
that only this feature's request caused (`llm.errors.FEATURE_ERRORS`: a malformed answer after the re-asks, a request
refused or too long for the context, a timeout after the retries) into a stored row with a retryable `Status` and the
reason, and go on; an error no other feature can escape (`JOB_FATAL_ERRORS`: a wrong key, an endpoint down for good)
still stops the job.

    try:
        out = await explainer.explain(data, ctx)
    except FEATURE_ERRORS as err:
        out = failed_explanation(err)            # Explanation("", None, [], [], {"failure": {...}})
"""

from __future__ import annotations

from typing import Any

from sae_workbench.explainers.base import Explanation
from sae_workbench.llm.errors import (
    LLMContextOverflowError,
    LLMMalformedOutputError,
    LLMRequestError,
)
from sae_workbench.status import Status

PROVENANCE_KEY = "_llm_provenance"
"""The key under which a Ray worker hands its LLM client's provenance to the driver (popped before storing)."""
FAILURE_KEY = "failure"
"""The key of `Explanation.extra` that carries a failed feature's status and reason."""


def llm_failure_status(err: BaseException) -> Status:
    """The retryable status of one feature's LLM failure."""
    if isinstance(err, LLMMalformedOutputError):
        return Status.LLM_MALFORMED_OUTPUT
    if isinstance(err, LLMContextOverflowError):
        return Status.LLM_CONTEXT_OVERFLOW
    if isinstance(err, LLMRequestError):
        return Status.LLM_REQUEST_REFUSED
    return Status.LLM_UNAVAILABLE


def failure_info(err: BaseException) -> dict[str, Any]:
    """The stored reason of a failure: its status, error type and message (no secret reaches an LLM error text)."""
    info: dict[str, Any] = {"status": llm_failure_status(err).value, "error": type(err).__name__,
                            "reason": str(err)[:2000]}  # fmt: skip
    if isinstance(err, LLMMalformedOutputError):
        info["truncated"] = bool(getattr(err, "truncated", False))
    return info


def failed_explanation(err: BaseException) -> Explanation:
    """The explanation stored for a feature whose LLM calls failed: empty, with the failure in `extra`."""
    return Explanation("", None, [], [], {FAILURE_KEY: failure_info(err)})


def explanation_status(out: Explanation) -> Status:
    """OK, or the failure status an explanation carries (`failed_explanation`)."""
    failure = out.extra.get(FAILURE_KEY)
    return Status(failure["status"]) if isinstance(failure, dict) else Status.OK
