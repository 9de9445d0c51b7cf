"""The tree search's LLM proposer: roots from the one-shot structured prompt, revisions continuing each branch's
conversation (`explainers.prompts.tree`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from sae_workbench.examples.rules import Rule
from sae_workbench.explainers.fit import fewer_records, first_that_fits
from sae_workbench.explainers.tree.presets import TreeConfig
from sae_workbench.explainers.tree.search import TreeNode
from sae_workbench.explainers.tree.splits import Split


class LLMProposer:
    """Proposes roots with the one-shot structured prompt (few-shot when configured) and revisions by continuing the
    branch's conversation (`explainers.prompts.tree.revision_messages`)."""

    def __init__(self, client: Any, config: TreeConfig, tag: str = "") -> None:
        """Use `client` (an LLMClient); usage is accounted under `tag`."""
        self.client = client
        self.config = config
        self.tag = tag
        self.trims: list[dict[str, int]] = []
        """What each prompt trimmed to fit the context (`explainers.fit`), in order; empty when nothing was."""

    async def roots(self, train: Split, n: int, global_max: float) -> list[tuple[Rule, ...]]:
        """`n` samples of the one-shot structured prompt at the roots' temperature, from the train positives."""
        from sae_workbench.examples.rules import parse_rules
        from sae_workbench.explainers.prompts.oneshot import rules_schema, structured_messages
        from sae_workbench.llm.client import LLMMalformedOutputError, LLMRequest
        from sae_workbench.llm.jsonparse import parse_json_strict

        cfg = self.config

        def request(kept: Sequence[Any]) -> LLMRequest:
            messages = structured_messages(kept, global_max, cfg.rule_cap, few_shot=cfg.root_few_shot)
            return LLMRequest(messages, tag=self.tag, temperature=cfg.roots_temperature,
                              schema=rules_schema(cfg.rule_cap), schema_name="rules")  # fmt: skip

        base, trimmed = await first_that_fits(self.client, fewer_records(list(train.positives), request))
        self._note(trimmed)
        reqs = [replace(base, sample=i) for i in range(n)]
        results = await self.client.parse_samples_settled(
            reqs, lambda t: parse_rules(parse_json_strict(t), cfg.rule_cap)
        )
        failed = [r for r in results if isinstance(r, LLMMalformedOutputError)]
        if results and len(failed) == len(results):  # no root at all: this feature fails, not the job
            raise failed[-1]
        return [r.value for r in results if not isinstance(r, LLMMalformedOutputError)]

    async def children(
        self, branch: Sequence[TreeNode], train: Split, n: int, global_max: float
    ) -> list[tuple[str, tuple[Rule, ...]]]:
        """`n` samples continuing the branch's conversation (every train record, every earlier explanation and its
        feedback)."""
        from sae_workbench.explainers.prompts.tree import (
            Turn,
            parse_revision,
            revision_messages,
            revision_schema,
        )
        from sae_workbench.llm.client import LLMMalformedOutputError, LLMRequest

        cap = self.config.rule_cap
        turns = [Turn(b.improvement, b.rules, b.train_score, b.feedback) for b in branch]
        records = list(train.records)

        def request(kept_turns: Sequence[Turn], kept: Sequence[Any]) -> LLMRequest:
            return LLMRequest(revision_messages(kept, global_max, kept_turns, cap), tag=self.tag,
                              temperature=self.config.temperature,
                              schema=revision_schema(cap), schema_name="revision")  # fmt: skip

        def candidates() -> Iterator[tuple[LLMRequest, dict[str, int]]]:
            # documented order (explainers.fit): the middle turns oldest first, then records from the end
            for dropped in range(max(1, len(turns) - 1)):
                kept_turns = [turns[0], *turns[1 + dropped :]] if dropped else turns
                yield request(kept_turns, records), ({"turns_dropped": dropped} if dropped else {})
            kept_turns = [turns[0], turns[-1]] if len(turns) > 1 else turns
            for req, trimmed in fewer_records(records[:-1], lambda kept: request(kept_turns, kept)):
                yield req, {**trimmed, "records_dropped": trimmed.get("records_dropped", 0) + 1,
                            "turns_dropped": max(0, len(turns) - 2)}  # fmt: skip

        base, trimmed = await first_that_fits(self.client, candidates())
        self._note(trimmed)
        reqs = [replace(base, sample=i) for i in range(n)]
        results = await self.client.parse_samples_settled(reqs, lambda t: parse_revision(t, cap))
        return [r.value for r in results if not isinstance(r, LLMMalformedOutputError)]

    def _note(self, trimmed: dict[str, int]) -> None:
        """Remember what a prompt left out to fit (`trims`, stored with the explanation)."""
        if trimmed:
            self.trims.append(trimmed)
