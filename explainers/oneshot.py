"""One-shot LLM explainer: a structured explanation (rules) and a free-text sentence from top examples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sae_workbench.examples.records import Record
from sae_workbench.examples.rules import DEFAULT_RULE_CAP, Rule, parse_rules
from sae_workbench.explainers.prompts import oneshot as prompt

if TYPE_CHECKING:
    from sae_workbench.llm.client import LLMClient, LLMRequest

ONESHOT_VERSION = "oneshot-v1"


@dataclass(frozen=True)
class OneShotExplanation:
    """Both forms of a one-shot explanation."""

    rules: tuple[Rule, ...]
    """Structured rules."""
    text: str
    """One free-text sentence."""


def structured_request(
    records: Sequence[Record],
    global_max: float,
    rule_cap: int,
    *,
    tag: str,
    temperature: float | None,
    sample: int,
) -> LLMRequest:
    """The request for one structured explanation (distinct `sample` values give distinct samples)."""
    from sae_workbench.llm.client import LLMRequest, chat

    system, user = prompt.structured_prompt(records, global_max, rule_cap)
    return LLMRequest(chat(user, system), tag=tag, temperature=temperature, sample=sample)


async def explain_structured(
    client: LLMClient,
    records: Sequence[Record],
    global_max: float,
    rule_cap: int = DEFAULT_RULE_CAP,
    *,
    tag: str = "",
    temperature: float | None = None,
    sample: int = 0,
) -> tuple[Rule, ...]:
    """Ask for rules; the answer must be a JSON array of {activates_on, strength} (re-asked when malformed)."""
    from sae_workbench.llm.jsonparse import parse_json_strict

    req = structured_request(records, global_max, rule_cap, tag=tag, temperature=temperature, sample=sample)
    parsed = await client.complete_parsed(req, lambda t: parse_rules(parse_json_strict(t), rule_cap))
    return parsed.value


async def explain_freetext(
    client: LLMClient, records: Sequence[Record], global_max: float, *, tag: str = ""
) -> str:
    """Ask for one sentence explaining the feature."""
    from sae_workbench.llm.client import LLMRequest, chat

    system, user = prompt.freetext_prompt(records, global_max)
    parsed = await client.complete_parsed(LLMRequest(chat(user, system), tag=tag), prompt.parse_freetext)
    return parsed.value


async def explain_oneshot(
    client: LLMClient,
    records: Sequence[Record],
    global_max: float,
    rule_cap: int = DEFAULT_RULE_CAP,
    *,
    tag: str = "",
) -> OneShotExplanation:
    """Structured and free-text explanations of the same records (two LLM calls, run concurrently)."""
    import asyncio

    rules, text = await asyncio.gather(
        explain_structured(client, records, global_max, rule_cap, tag=tag),
        explain_freetext(client, records, global_max, tag=tag),
    )
    return OneShotExplanation(rules, text)
