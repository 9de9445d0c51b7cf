"""A toy explainer in one file (the registry test adds it with one line): the most frequent peak token of the
feature's train positives, as a one-rule structured explanation."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sae_workbench.examples.records import norm
from sae_workbench.examples.rules import Rule
from sae_workbench.examples.testsets import SplitConfig
from sae_workbench.explainers.base import ExplainConfig, ExplainContext, Explanation, FeatureReader
from sae_workbench.store import Store


@dataclass(frozen=True)
class ToyInputs:
    """Train positives and the token at each one's peak."""

    ids: list[int]
    """Window ids."""
    peak_tokens: list[str]
    """Normalised token at each window's peak."""


@dataclass(frozen=True)
class ToyExplainer:
    """Names the commonest peak token."""

    name: ClassVar[str] = "toy"
    requires_llm: ClassVar[bool] = False
    split: SplitConfig = field(default_factory=SplitConfig)

    @classmethod
    def from_config(cls, config: ExplainConfig) -> ToyExplainer:
        """Only the split."""
        return cls(config.split())

    def version(self, llm: bool) -> str:
        """Code version."""
        return "toy-v1"

    def prompt_version(self, llm: bool) -> str:
        """No prompt."""
        return ""

    def sampling(self) -> dict[str, Any]:
        """The split."""
        return {"split": self.split.params()}

    def prepare(self, store: Store, sae_id: str) -> None:
        """Nothing."""

    def load(self, reader: FeatureReader) -> ToyInputs:
        """The train positives' peak tokens."""
        ids = list(reader.split(self.split).train.positives)
        records = reader.records(ids, None)
        return ToyInputs(ids, [norm(r.tokens[int(r.acts.argmax())]) for r in records])

    async def explain(self, inputs: ToyInputs, ctx: ExplainContext) -> Explanation:
        """One rule on the commonest peak token."""
        token, _ = Counter(inputs.peak_tokens).most_common(1)[0]
        rule = Rule(json.dumps(token), 5)
        return Explanation(f"fires on {json.dumps(token)}", (rule,), inputs.ids, [])
