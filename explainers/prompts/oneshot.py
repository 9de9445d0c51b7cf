"""One-shot explanation prompts: structured rules (tree paper's format) and one free-text sentence."""

from __future__ import annotations

from collections.abc import Sequence

from sae_workbench.examples.records import Record
from sae_workbench.explainers.prompts.examples import format_examples

PROMPT_VERSION = "oneshot-v1"

SYSTEM = (
    "You are studying one feature of a sparse autoencoder trained on a language model's activations. "
    "You are shown texts where the feature activates. Each text lists its tokens one per line as "
    "token<TAB>activation, with activations scaled to integers 0..5 (0 = not active, 5 = the feature's "
    "strongest activation). A token's activation depends only on that token and the tokens before it."
)

STRUCTURED_TASK = (
    "Explain what the feature activates on as a JSON array of at most {rule_cap} rules, one concept per rule:\n"
    '[{{"activates_on": "<what it fires on, with any context it needs>", "strength": <integer 0..5, its '
    "typical activation>}}]\n"
    "Reply with the JSON array only."
)

FREETEXT_TASK = "Explain in one sentence what the feature activates on. Reply with the explanation only, without a preamble."


def structured_prompt(records: Sequence[Record], global_max: float, rule_cap: int) -> tuple[str, str]:
    """(system, user) asking for structured rules from the records."""
    user = format_examples(records, global_max) + "\n\n" + STRUCTURED_TASK.format(rule_cap=rule_cap)
    return SYSTEM, user


def freetext_prompt(records: Sequence[Record], global_max: float) -> tuple[str, str]:
    """(system, user) asking for a one-sentence explanation from the records."""
    return SYSTEM, format_examples(records, global_max) + "\n\n" + FREETEXT_TASK


def parse_freetext(text: str) -> str:
    """Accept a non-empty one-paragraph answer (ValueError otherwise, so the client re-asks)."""
    answer = text.strip()
    if not answer:
        raise ValueError("the answer is empty; reply with one sentence")
    if answer.startswith(("[", "{")):
        raise ValueError("reply with a sentence in plain words, not JSON")
    return " ".join(answer.split())
