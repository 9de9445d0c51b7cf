"""A toy scorer in one file (the registry test adds it with one line): the fraction of test positives whose peak
token the explanation quotes, minus the fraction of test negatives containing it anywhere."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from sae_workbench.evaluation.scorers.base import (
    ScoreBackends,
    ScoreConfig,
    ScoreOutcome,
    ScorerDefaults,
    TestRecords,
)
from sae_workbench.examples.records import fold
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord


class ToyScorer(ScorerDefaults):
    """Quoted-token hit rate on the test third."""

    name: ClassVar[str] = "toy"
    version: ClassVar[str] = "toy-scorer-v1"
    headline: ClassVar[str] = "hit_rate"
    uses_test_set: ClassVar[bool] = True
    uses_negatives: ClassVar[bool] = True

    @classmethod
    def from_backends(cls, config: ScoreConfig, backends: ScoreBackends) -> ToyScorer:
        """Needs nothing."""
        return cls()

    def backend(self) -> str:
        """String matching."""
        return "toy-match"

    def key_params(self) -> dict[str, Any]:
        """Nothing."""
        return {}

    async def prepare(self, explanations: Sequence[ExplanationRecord]) -> None:
        """Nothing."""

    async def score(self, explanation: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
        """Hit rate on positives minus false-alarm rate on negatives."""
        assert tests is not None
        # the toy ignores case
        quoted = {fold(json.loads(r["activates_on"])) for r in explanation.rules or []}
        hits = [fold(r.tokens[int(r.acts.argmax())]) in quoted for r in tests.positives]
        alarms = [any(fold(t) in quoted for t in r.tokens) for r in tests.negatives]
        rate = sum(hits) / len(hits) - (sum(alarms) / len(alarms) if alarms else 0.0)
        return ScoreOutcome(Status.OK, {"hit_rate": rate, "n_positives": len(hits)}, self.headline)
