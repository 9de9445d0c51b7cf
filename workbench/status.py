"""The outcome of explaining or scoring one feature: one vocabulary for every explainer, scorer, the store and the app.

    from sae_workbench.status import Status
    Status.DEAD == "dead"          # a StrEnum: stored as its plain string in the `status` columns

Explanations use OK and DEAD; scores use OK, DEAD and the failure statuses (each a recorded outcome, the batch goes on).
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
    UNSCORABLE_EXPLANATION = "unscorable_explanation"
    """The explanation is empty or its rules cannot be parsed."""
    GENERATOR_FAILED = "generator_failed"
    """CoSy's text generator gave no usable texts."""
    LLM_MALFORMED_OUTPUT = "llm_malformed_output"
    """The LLM's answer stayed malformed after the client's re-asks."""
    NO_RULES = "no_rules"
    """The explanation has no rules to rate (complexity)."""
    TOO_FEW_DESCRIPTIONS = "too_few_descriptions"
    """Fewer than two descriptions (PRISM polysemanticity needs a pair)."""

    @property
    def failed(self) -> bool:
        """A recorded failure (not ok, not dead)."""
        return self not in (Status.OK, Status.DEAD)
