"""One-shot explanation prompts: structured rules (tree paper's format) and one free-text sentence."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from sae_workbench.examples.records import MAX_LEVEL, Record
from sae_workbench.explainers.prompts.examples import format_examples

PROMPT_VERSION = "oneshot-v1"
FEW_SHOT_VERSION = "fewshot-v1"
"""Version of the few-shot examples below (recorded next to PROMPT_VERSION when they are sent)."""

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

STRENGTHS = list(range(MAX_LEVEL + 1))
"""The strengths a rule may have (0..5, the prompt's activation scale)."""
FREETEXT_MAX_TOKENS = 96
"""Completion budget of the free-text sentence: one sentence; a small model otherwise rambles to the job's budget."""


def rules_schema(rule_cap: int) -> dict[str, object]:
    """JSON schema of the structured answer (sent with the prompt, in the form the endpoint accepts): an array of
    1..`rule_cap` rules {activates_on: non-empty string, strength: 0..5}, every property required, nothing else. Its
    root is an array, as the prompt asks; an endpoint whose strict mode wants an object root refuses it, and the
    client falls back to the next structured-output form."""
    rule = {
        "type": "object",
        "properties": {
            "activates_on": {"type": "string", "minLength": 1},
            "strength": {"type": "integer", "enum": STRENGTHS},
        },
        "required": ["activates_on", "strength"],
        "additionalProperties": False,
    }
    return {"type": "array", "items": rule, "minItems": 1, "maxItems": int(rule_cap)}


FREETEXT_TASK = "Explain in one sentence what the feature activates on. Reply with the explanation only, without a preamble."


def _example(*pairs: tuple[str, int]) -> Record:
    """A few-shot record from (token, level 0..5) pairs (shown against a peak of 5, so levels show as given)."""
    return Record(-1, tuple(t for t, _ in pairs), np.array([v for _, v in pairs], dtype=np.float32))


# Our own worked examples for the roots' few-shot prompt. The tree paper's one-shot roots are sampled with 5 few-shot
# examples (ref `OneShotExplainerParams`, `RecordExampleSet.ORIGINAL`); the reference's texts are not copied here.
FEW_SHOT: tuple[tuple[tuple[Record, ...], tuple[tuple[str, int], ...]], ...] = (
    (
        (
            _example((" She", 0), (" did", 0), (" not", 4), (" want", 0), (" to", 0), (" leave", 0)),
            _example((" They", 0), (" could", 0), ("n't", 5), (" find", 0), (" the", 0), (" key", 0)),
            _example((" It", 0), (" is", 0), (" not", 3), (" the", 0), (" same", 0)),
        ),
        (('"not" or "n\'t" negating a verb', 4),),
    ),
    (
        (
            _example(("print", 0), ("(", 0), ("x", 0), (")", 4), (" #", 0)),
            _example((" return", 0), (" len", 0), ("(", 0), ("items", 0), (")", 5)),
        ),
        (('")" closing a function call in code', 4),),
    ),
    (
        (
            _example((" founded", 0), (" in", 0), (" 1987", 5), (",", 0), (" the", 0)),
            _example((" In", 0), (" 2004", 4), (",", 0), (" she", 0), (" moved", 0)),
            _example((" the", 0), (" 1987", 1), (" model", 0)),
        ),
        (('a year after "in"', 5), ("a year used as a modifier", 1)),
    ),
    (
        (
            _example((" on", 0), (" March", 5), (" 3", 1), (",", 0), (" 2010", 0)),
            _example((" every", 0), (" July", 4), (" and", 0), (" August", 4)),
        ),
        (("names of months", 4), ("a day number right after a month name", 1)),
    ),
    (
        (
            _example((" Dr", 0), (".", 0), (" Watson", 5), (" said", 0)),
            _example(
                (" Mrs", 0), (".", 0), (" Hudson", 4), (" and", 0), (" Mr", 0), (".", 0), (" Holmes", 4)
            ),
        ),
        (('a surname after a title such as "Dr.", "Mr." or "Mrs."', 4),),
    ),
)


def few_shot_messages(rule_cap: int) -> list[dict[str, str]]:
    """The few-shot examples as earlier (user, assistant) turns, answers cut to `rule_cap` rules."""
    out: list[dict[str, str]] = []
    for records, rules in FEW_SHOT:
        answer = [{"activates_on": text, "strength": level} for text, level in rules[:rule_cap]]
        user = format_examples(records, float(MAX_LEVEL)) + "\n\n" + STRUCTURED_TASK.format(rule_cap=rule_cap)
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": json.dumps(answer)}]
    return out


def structured_messages(
    records: Sequence[Record], global_max: float, rule_cap: int, few_shot: bool = False
) -> tuple[dict[str, str], ...]:
    """The structured prompt as chat messages, after the few-shot turns when `few_shot`."""
    system, user = structured_prompt(records, global_max, rule_cap)
    shots = few_shot_messages(rule_cap) if few_shot else []
    return ({"role": "system", "content": system}, *shots, {"role": "user", "content": user})


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
