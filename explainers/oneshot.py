"""One-shot LLM explainer: a structured explanation (rules) and a free-text sentence from top examples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sae_workbench import defaults
from sae_workbench.examples.records import Record
from sae_workbench.examples.rules import DEFAULT_RULE_CAP, Rule, parse_rules
from sae_workbench.examples.testsets import SplitConfig, prepare_split
from sae_workbench.explainers.base import (
    ExplainConfig,
    ExplainContext,
    ExplainJobError,
    Explanation,
    FeatureReader,
    no_method_options,
)
from sae_workbench.explainers.prompts import oneshot as prompt
from sae_workbench.store import Store

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
    return LLMRequest(chat(user, system), tag=tag, temperature=temperature, sample=sample,
                      schema=prompt.rules_schema(rule_cap), schema_name="rules")  # fmt: skip


async def fitting_records(
    client: LLMClient, records: Sequence[Record], global_max: float, rule_cap: int, *, tag: str = ""
) -> tuple[Sequence[Record], dict[str, int]]:
    """The records whose structured prompt (the longer of the two) fits the context: all of them, else the fewest
    dropped from the end (`explainers.fit`), and what was dropped."""
    from sae_workbench.explainers.fit import fewer_records, first_that_fits

    def request(kept: Sequence[Record]) -> LLMRequest:
        return structured_request(kept, global_max, rule_cap, tag=tag, temperature=None, sample=0)

    _, trimmed = await first_that_fits(client, fewer_records(list(records), request))
    return records[: len(records) - trimmed.get("records_dropped", 0)], trimmed


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
    req = LLMRequest(chat(user, system), tag=tag, max_tokens=prompt.FREETEXT_MAX_TOKENS)
    parsed = await client.complete_parsed(req, prompt.parse_freetext)
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


@dataclass(frozen=True)
class OneShotInputs:
    """The split's train positives and their records."""

    positive_ids: list[int]
    """Window ids shown."""
    records: list[Record]
    """Their records, cropped around each peak."""


@dataclass(frozen=True)
class OneShotExplainer:
    """One LLM call for rules and one for a sentence, from the split's train positives (as ref's one-shot, which
    sees the same 10 train positives as the tree; fidelity audit §0 #1)."""

    name: ClassVar[str] = "oneshot"
    requires_llm: ClassVar[bool] = True
    split: SplitConfig = field(default_factory=SplitConfig)
    """The shared split."""
    record_len: int | None = defaults.RECORD_LEN
    """Tokens per record (tree paper: 32)."""
    rule_cap: int = DEFAULT_RULE_CAP
    """Most rules (tree paper: 5)."""

    @classmethod
    def from_config(cls, config: ExplainConfig) -> OneShotExplainer:
        """Build from the run's options."""
        no_method_options(config, cls.name)
        return cls(config.split(), config.record_len, config.rule_cap)

    def version(self, llm: bool) -> str:
        """Code version."""
        if not llm:
            raise ExplainJobError("the one-shot explainer has no offline variant")
        return ONESHOT_VERSION

    def prompt_version(self, llm: bool) -> str:
        """Version of its prompts."""
        return prompt.PROMPT_VERSION

    def sampling(self) -> dict[str, Any]:
        """Provenance of what it reads."""
        return {"examples": "SPLIT_TRAIN", "record_len": self.record_len, "rule_cap": self.rule_cap,
                "split": self.split.params()}  # fmt: skip

    def prepare(self, store: Store, sae_id: str) -> None:
        """Embed the corpus once when the split's negatives are SIMILAR ones."""
        prepare_split(store, sae_id, self.split)

    def load(self, reader: FeatureReader) -> OneShotInputs:
        """The train positives' records."""
        pos = list(reader.split(self.split).train.positives)
        return OneShotInputs(pos, reader.records(pos, self.record_len))

    async def explain(self, inputs: OneShotInputs, ctx: ExplainContext) -> Explanation:
        """Rules and a sentence from the same records."""
        if ctx.client is None:
            raise ExplainJobError("the one-shot explainer needs an LLM client")
        records, trimmed = await fitting_records(
            ctx.client, inputs.records, ctx.peak, self.rule_cap, tag=ctx.tag
        )
        out = await explain_oneshot(ctx.client, records, ctx.peak, self.rule_cap, tag=ctx.tag)
        shown = inputs.positive_ids[: len(records)]
        return Explanation(out.text, out.rules, shown, [], {"prompt_trims": [trimmed]} if trimmed else {})
