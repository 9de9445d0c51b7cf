"""The outcome of explaining or scoring one feature: one vocabulary for every explainer, scorer, the store and the app.

    from sae_workbench.status import Status
    Status.DEAD == "dead"          # a StrEnum: stored as its plain string in the `status` columns

Explanations use OK, DEAD and the LLM failures; scores use OK, DEAD and every failure status (each a recorded outcome,
the batch goes on). An LLM failure (`retryable`) is stored with its reason but does not count as done: a rerun of the
same command asks the model again and replaces the failed row.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """What happened to one feature's explanation or one explanation's score."""

    OK = "ok"
    """Explained, or scored with metrics."""
    DEAD = "dead"
    """The feature never fired in the indexed corpus: stored with empty text, never scored."""
    NO_ACTIVATIONS = "no_activations"
    """No positive test record could be drawn (nothing above the threshold)."""
    NO_NEGATIVES = "no_negatives"
    """No negative test record was left (every drawn negative fired, or shared a document with, adjoined or repeated a
    window the explainer was shown: too few documents): a scorer whose metric contrasts the two classes cannot score."""
    UNSCORABLE_EXPLANATION = "unscorable_explanation"
    """The explanation is empty or its rules cannot be parsed."""
    GENERATOR_FAILED = "generator_failed"
    """CoSy's text generator gave no usable texts."""
    LLM_MALFORMED_OUTPUT = "llm_malformed_output"
    """The LLM's answer stayed malformed after the client's re-asks."""
    LLM_CONTEXT_OVERFLOW = "llm_context_overflow"
    """The prompt did not fit the model's context even after trimming, or the server refused it as too long."""
    LLM_REQUEST_REFUSED = "llm_request_refused"
    """The endpoint refused the request (HTTP 4xx other than auth: bad format, bad parameter)."""
    LLM_UNAVAILABLE = "llm_unavailable"
    """The endpoint did not answer in time (timeouts, 5xx, lost connections) after the client's retries."""
    NO_RULES = "no_rules"
    """The explanation has no rules to rate (complexity)."""
    TOO_FEW_DESCRIPTIONS = "too_few_descriptions"
    """Fewer than two descriptions (PRISM polysemanticity needs a pair)."""

    @property
    def failed(self) -> bool:
        """A recorded failure (not ok, not dead)."""
        return self not in (Status.OK, Status.DEAD)

    @property
    def retryable(self) -> bool:
        """An LLM failure: stored with its reason, but a rerun tries this feature again (not skipped as done)."""
        return self in RETRYABLE


RETRYABLE = frozenset(
    {
        Status.LLM_MALFORMED_OUTPUT,
        Status.LLM_CONTEXT_OVERFLOW,
        Status.LLM_REQUEST_REFUSED,
        Status.LLM_UNAVAILABLE,
    }
)
"""The statuses a rerun retries (the LLM failures)."""
RETRYABLE_VALUES: tuple[str, ...] = tuple(sorted(s.value for s in RETRYABLE))
"""The retryable statuses as a `status` column stores them (for SQL filters)."""
