"""Simulation scorer (tree paper, Ma et al. NeurIPS 2025; OpenAI automated-interpretability).

A simulator predicts every token's activation (0..5) from the explanation; the score is the Pearson correlation
between predictions and true activations pooled over all tokens of the test records (top positives + negatives of
one source). Structured explanations are simulated rule by rule, scaled by strength/5, max over rules
(`explainers.simulate.simulate_rules`). False positives = tokens on negative records predicted > 1.

Simulators: `explainers.simulate.LLMSimulator` (any OpenAI-compatible chat model; per-token digits as a strictly
parsed JSON array, re-exported here) or the offline lexical simulator of `explainers.lexical_simulator` (a documented baseline, never presented as an LLM).

    score = asyncio.run(score_simulation(simulator, explanation, positives, negatives))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.scorers.base import (
    ScoreBackends,
    ScoreConfig,
    ScoreOutcome,
    ScorerDefaults,
    TestRecords,
)
from sae_workbench.evaluation.scorers.metrics import per_record_pearson
from sae_workbench.examples.records import Record
from sae_workbench.examples.rules import Rule

# The LLM simulator is the explainers' one (explainers/prompts/simulate.py), so tree search and scoring agree.
from sae_workbench.explainers.lexical_simulator import LexicalSimulator
from sae_workbench.explainers.simulate import LLMSimulator, Simulator, pooled_correlation, simulate_rules
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord

SIMULATION_SCORER_VERSION = "simulation-v1"

__all__ = [
    "SIMULATION_SCORER_VERSION",
    "LLMSimulator",
    "ScorableExplanation",
    "SimulationScore",
    "SimulationScorer",
    "UnscorableExplanationError",
    "scorable_explanation",
    "score_simulation",
    "simulate_explanation",
    "simulation_score",
]

# Tree-explainer spec: a token on a negative record counts as a false positive when its prediction exceeds 1.
FALSE_POSITIVE_LEVEL = 1.0


class UnscorableExplanationError(WorkbenchError):
    """An explanation is empty or its rules cannot be parsed; the runner records it instead of scoring it."""


@dataclass(frozen=True)
class ScorableExplanation:
    """What a scorer needs of an explanation: free text, and the structured rules when there are any."""

    text: str
    """Free-text form (the rules rendered as text for structured explanations)."""
    rules: tuple[Rule, ...] = ()
    """Structured rules; empty for a free-text explanation."""


def scorable_explanation(text: str, rules: Any = None) -> ScorableExplanation:
    """Validate a stored explanation (text + optional rules JSON); UnscorableExplanationError if empty/malformed."""
    from sae_workbench.examples.rules import parse_rules

    parsed: tuple[Rule, ...] = ()
    if rules not in (None, [], ""):
        try:
            parsed = parse_rules(rules, rule_cap=len(rules) if isinstance(rules, list) else 5)
        except ValueError as err:
            raise UnscorableExplanationError(f"the explanation's rules cannot be parsed: {err}") from err
    if not parsed and not (text or "").strip():
        raise UnscorableExplanationError("the explanation is empty; re-run the explainer for this feature")
    shown = (text or "").strip() or "; ".join(r.activates_on for r in parsed)
    return ScorableExplanation(shown, parsed)


async def simulate_explanation(
    simulator: Simulator, explanation: ScorableExplanation, records: Sequence[Record]
) -> list[np.ndarray]:
    """Per-record predictions in 0..5: per rule (max, scaled by strength/5) when structured, else from the text."""
    if explanation.rules:
        return await simulate_rules(simulator, explanation.rules, records)
    preds = await simulator.simulate(explanation.text, records)
    return [np.asarray(p, dtype=np.float64) for p in preds]


@dataclass(frozen=True)
class SimulationScore:
    """Simulation metrics of one explanation on one set of test records."""

    pearson: float
    """Pooled Pearson correlation over all tokens (the score; higher is better; NaN if truth is constant)."""
    pearson_per_record: float
    """Mean of per-record correlations (for comparison only; ignores between-record differences)."""
    pearson_positives: float
    """Pooled correlation over the positive records alone (what the score would be without negatives)."""
    false_positive_tokens: int
    """Tokens on negative records predicted > 1 (lower is better)."""
    negative_tokens: int
    """Tokens on negative records."""
    n_positive_records: int
    """Positive test records."""
    n_negative_records: int
    """Negative test records."""

    def to_dict(self) -> dict[str, float | int]:
        """Plain dict for the store's metrics JSON."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def simulation_score(
    pred_positive: Sequence[np.ndarray],
    positives: Sequence[Record],
    pred_negative: Sequence[np.ndarray],
    negatives: Sequence[Record],
) -> SimulationScore:
    """Pure scoring of given predictions against the records' true activations."""
    pred = [*pred_positive, *pred_negative]
    true = [r.acts for r in (*positives, *negatives)]
    fp = sum(int(np.sum(np.asarray(p) > FALSE_POSITIVE_LEVEL)) for p in pred_negative)
    return SimulationScore(
        pearson=pooled_correlation(pred, true),
        pearson_per_record=per_record_pearson(pred, true),
        pearson_positives=pooled_correlation(list(pred_positive), [r.acts for r in positives]),
        false_positive_tokens=fp,
        negative_tokens=sum(len(r) for r in negatives),
        n_positive_records=len(positives),
        n_negative_records=len(negatives),
    )


async def score_simulation(
    simulator: Simulator,
    explanation: ScorableExplanation,
    positives: Sequence[Record],
    negatives: Sequence[Record],
) -> SimulationScore:
    """Simulate the explanation on positives + negatives and score it."""
    preds = await simulate_explanation(simulator, explanation, [*positives, *negatives])
    return simulation_score(preds[: len(positives)], positives, preds[len(positives) :], negatives)


class SimulationScorer(ScorerDefaults):
    """Pooled Pearson correlation of simulated and true activations on the test records (tree paper)."""

    name: ClassVar[str] = "simulation"
    version: ClassVar[str] = SIMULATION_SCORER_VERSION
    headline: ClassVar[str] = "pearson"
    uses_test_set: ClassVar[bool] = True
    uses_negatives: ClassVar[bool] = True

    def __init__(self, simulator: Simulator) -> None:
        """Score with `simulator` (an LLM's, or the lexical one offline)."""
        self.simulator = simulator

    @classmethod
    def from_backends(cls, config: ScoreConfig, backends: ScoreBackends) -> SimulationScorer:
        """The backends' simulator (the lexical one when none is given)."""
        return cls(backends.simulator or LexicalSimulator())

    def backend(self) -> str:
        """The simulator's name."""
        return self.simulator.name

    def prompt_version(self) -> str:
        """The simulator's prompt version ('' offline)."""
        return str(getattr(self.simulator, "prompt_version", ""))

    async def score(self, explanation: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
        """Simulate on the test positives and negatives and correlate."""
        assert tests is not None
        scorable = scorable_explanation(explanation.text, explanation.rules)
        result = await score_simulation(self.simulator, scorable, tests.positives, tests.negatives)
        return ScoreOutcome(Status.OK, result.to_dict(), self.headline)
