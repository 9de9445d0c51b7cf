"""The tree search's LLM proposer: roots from the one-shot structured prompt, revisions continuing each branch's
conversation (`explainers.prompts.tree`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sae_workbench.examples.rules import Rule
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

    async def roots(self, train: Split, n: int, global_max: float) -> list[tuple[Rule, ...]]:
        """`n` samples of the one-shot structured prompt at the roots' temperature, from the train positives."""
        from sae_workbench.examples.rules import parse_rules
        from sae_workbench.explainers.prompts.oneshot import structured_messages
        from sae_workbench.llm.client import LLMMalformedOutputError, LLMRequest
        from sae_workbench.llm.jsonparse import parse_json_strict

        cfg = self.config
        messages = structured_messages(train.positives, global_max, cfg.rule_cap, few_shot=cfg.root_few_shot)
        reqs = [
            LLMRequest(messages, tag=self.tag, temperature=cfg.roots_temperature, sample=i) for i in range(n)
        ]
        results = await self.client.parse_samples_settled(
            reqs, lambda t: parse_rules(parse_json_strict(t), cfg.rule_cap)
        )
        return [r.value for r in results if not isinstance(r, LLMMalformedOutputError)]

    async def children(
        self, branch: Sequence[TreeNode], train: Split, n: int, global_max: float
    ) -> list[tuple[str, tuple[Rule, ...]]]:
        """`n` samples continuing the branch's conversation (every train record, every earlier explanation and its
        feedback)."""
        from sae_workbench.explainers.prompts.tree import Turn, parse_revision, revision_messages
        from sae_workbench.llm.client import LLMMalformedOutputError, LLMRequest

        cap = self.config.rule_cap
        turns = [Turn(b.improvement, b.rules, b.train_score, b.feedback) for b in branch]
        messages = revision_messages(train.records, global_max, turns, cap)
        reqs = [
            LLMRequest(messages, tag=self.tag, temperature=self.config.temperature, sample=i)
            for i in range(n)
        ]
        results = await self.client.parse_samples_settled(reqs, lambda t: parse_revision(t, cap))
        return [r.value for r in results if not isinstance(r, LLMMalformedOutputError)]
