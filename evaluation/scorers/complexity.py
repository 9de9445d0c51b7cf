"""Rule complexity (tree paper, Ma et al. NeurIPS 2025): an LLM rates each rule of a structured explanation 0..5
(abstract concepts and specific required context are more complex than token lists).

    workbench score --store S --sae ID --scorer complexity --llm-model gpt-4o-mini
    workbench score --store S --sae ID --scorer complexity --llm-model M --llm-base-url http://localhost:8000/v1

`ComplexityScorer` rates every stored explanation that has rules (one call per explanation, all its rules at once);
the score job stores per-rule ratings with their mean and max as a `complexity` score (negative source ''). There is no offline
rating: without an LLM endpoint it raises `LLMNotConfiguredError`. An explanation without rules is recorded as
`no_rules`, unparseable rules as `unscorable_explanation`, an answer still malformed after the client's re-asks as
`llm_malformed_output`; the batch goes on, and a rerun skips what is stored under the same key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from sae_workbench.evaluation.scorers.base import (
    ScoreBackends,
    ScoreConfig,
    ScoreOutcome,
    ScorerDefaults,
    TestRecords,
)
from sae_workbench.evaluation.scorers.prompts.complexity import (
    COMPLEXITY_PROMPT_VERSION,
    complexity_messages,
    ratings_schema,
)
from sae_workbench.examples.rules import parse_rules
from sae_workbench.llm.client import LLMClient, LLMMalformedOutputError, LLMRequest
from sae_workbench.llm.config import LLMNotConfiguredError
from sae_workbench.llm.jsonparse import as_int_list, parse_json_strict
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord

COMPLEXITY_SCORER_VERSION = "complexity-llm-v1"
# Tree paper: ratings are integers 0..5.
MAX_RATING = 5


def _parse_ratings(n: int):
    """A parser accepting exactly `n` integers in 0..5 (ValueError → re-ask)."""

    def parse(text: str) -> list[int]:
        return as_int_list(parse_json_strict(text), length=n, lo=0, hi=MAX_RATING)

    return parse


async def rate_complexity(client: LLMClient, rules: Sequence[str], tag: str = "complexity") -> list[int]:
    """An LLM's 0..5 complexity rating of each rule (tree paper)."""
    if not rules:
        return []
    parsed = await client.complete_parsed(
        LLMRequest(
            complexity_messages(rules), tag=tag, schema=ratings_schema(len(rules)), schema_name="ratings"
        ),
        _parse_ratings(len(rules)),
    )
    return parsed.value


def require_client(client: LLMClient | None) -> LLMClient:
    """The client, or LLMNotConfiguredError saying how to configure one (there is no offline rating)."""
    if client is None:
        raise LLMNotConfiguredError(
            "the complexity scorer asks an LLM to rate each rule 0..5 (tree paper) and has no offline fallback: "
            "pass --llm-model (and --llm-base-url for a local OpenAI-compatible server)"
        )
    return client


class ComplexityScorer(ScorerDefaults):
    """An LLM's 0..5 rating of each rule of an explanation (tree paper); one call per explanation, in order."""

    name: ClassVar[str] = "complexity"
    version: ClassVar[str] = COMPLEXITY_SCORER_VERSION
    headline: ClassVar[str] = "mean"
    uses_test_set: ClassVar[bool] = False
    uses_negatives: ClassVar[bool] = False

    def __init__(self, client: LLMClient) -> None:
        """Rate with `client`."""
        self.client = client

    @classmethod
    def from_backends(cls, config: ScoreConfig, backends: ScoreBackends) -> ComplexityScorer:
        """Needs the backends' LLM client (there is no offline rating)."""
        return cls(require_client(backends.llm_client))

    def backend(self) -> str:
        """The rating model."""
        return f"llm:{self.client.config.model}"

    def prompt_version(self) -> str:
        """The rating prompt's version."""
        return COMPLEXITY_PROMPT_VERSION

    async def score(self, explanation: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
        """Rate the explanation's rules (a recorded status when there is nothing to rate or the LLM fails)."""
        rules = explanation.rules
        if rules in (None, [], ""):
            return ScoreOutcome.failed(Status.NO_RULES)
        try:
            parsed = parse_rules(rules, rule_cap=len(rules) if isinstance(rules, list) else MAX_RATING)
        except ValueError as err:
            return ScoreOutcome.failed(
                Status.UNSCORABLE_EXPLANATION, error=f"the explanation's rules cannot be parsed: {err}"
            )
        texts = [r.activates_on for r in parsed]
        try:
            ratings = await rate_complexity(self.client, texts)
        except LLMMalformedOutputError as err:
            return ScoreOutcome.failed(Status.LLM_MALFORMED_OUTPUT, error=str(err), n_rules=len(texts))
        metrics = {"mean": float(np.mean(ratings)), "max": int(max(ratings)), "n_rules": len(texts)}
        return ScoreOutcome(Status.OK, metrics, self.headline, {"rules": texts, "ratings": ratings})
