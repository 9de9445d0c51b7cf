"""Simulation and the simulation score (tree paper, Ma et al. 2025; OpenAI automated-interpretability).

A simulator predicts each token's activation on the 0..5 scale from an explanation. Structured explanations are
simulated one rule at a time with the rule's `activates_on` as the explanation, scaled by strength/5, and the
prediction per token is the MAX over rules. The score is the Pearson correlation between predicted and true
activations pooled over all tokens of all records (not averaged per record); NaN when the true variance < 1e-10.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from explainers.records import MAX_LEVEL, Record, discretise
from explainers.rules import Rule

if TYPE_CHECKING:
    from explainers.llm import LLMClient

# Spec: the score is undefined (NaN) when the true activations are (numerically) constant.
MIN_TRUE_VARIANCE = 1e-10


class Simulator(Protocol):
    """Predicts per-token activations (0..5) of records from a free-text explanation."""

    name: str
    """'lexical' or 'llm:<model>' — recorded as provenance."""

    async def simulate(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """One (T,) float array of predictions in 0..5 per record."""
        ...


class MemoSimulator:
    """Wraps a deterministic simulator so each (explanation, records) pair is simulated once per instance.

    Simulation is a function of the explanation and the records' tokens (the LLM simulator runs at temperature 0,
    the lexical one is pure), so a repeat is answered from memory instead of a new call; in the tree search
    children keep most of their parent's rules, and the roots are often identical. Concurrent requests for the
    same pair share one in-flight call. Callers must not modify the returned arrays.
    """

    def __init__(self, inner: Simulator) -> None:
        """Memoise `inner`; provenance keeps its name."""
        self.inner = inner
        self.name = inner.name
        self._memo: dict[tuple[str, tuple[tuple[str, ...], ...]], asyncio.Future[list[np.ndarray]]] = {}

    async def simulate(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """The inner simulator's predictions, computed once per (explanation, record tokens)."""
        key = (explanation, tuple(r.tokens for r in records))
        hit = self._memo.get(key)
        if hit is None:
            hit = asyncio.ensure_future(self.inner.simulate(explanation, records))
            self._memo[key] = hit
        # No shield: every caller belongs to the same search, so a cancelled caller means a cancelled search.
        return await hit


def pooled_correlation(pred: Sequence[np.ndarray], true: Sequence[np.ndarray]) -> float:
    """Pearson correlation over all tokens of all records pooled together.

    NaN when the true activations' variance is < 1e-10 (spec). 0.0 when the predictions are constant: an
    explanation that predicts the same value everywhere carries no information about where the feature fires.
    """
    if len(pred) != len(true):
        raise ValueError(f"{len(pred)} predicted records but {len(true)} true records")
    if not pred:
        return math.nan
    p = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in pred])
    t = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in true])
    if p.shape != t.shape:
        raise ValueError(f"{p.size} predicted tokens but {t.size} true tokens")
    return _pooled_flat(p, t)


def _pooled_flat(p: np.ndarray, t: np.ndarray) -> float:
    """pooled_correlation of already concatenated float64 predictions and true activations."""
    if t.size == 0 or t.var() < MIN_TRUE_VARIANCE:
        return math.nan
    if p.var() == 0.0:
        return 0.0
    pc, tc = p - p.mean(), t - t.mean()
    return float((pc @ tc) / math.sqrt(float(pc @ pc) * float(tc @ tc)))


async def simulate_rules(
    simulator: Simulator, rules: Sequence[Rule], records: Sequence[Record]
) -> list[np.ndarray]:
    """Predict per token the max over rules of (rule simulated alone) × strength/5."""
    out = [np.zeros(len(r), dtype=np.float64) for r in records]
    # Rules are simulated independently (spec), so their calls can run concurrently.
    per_rule = await asyncio.gather(*(simulator.simulate(rule.activates_on, records) for rule in rules))
    for rule, preds in zip(rules, per_rule, strict=True):
        for i, p in enumerate(preds):
            out[i] = np.maximum(out[i], np.asarray(p, dtype=np.float64) * (rule.strength / MAX_LEVEL))
    return out


def score_records(pred: Sequence[np.ndarray], records: Sequence[Record]) -> float:
    """Pooled correlation of predictions against the records' true activations."""
    return pooled_correlation(pred, [r.acts for r in records])


def worst_record_index(pred: Sequence[np.ndarray], records: Sequence[Record]) -> int:
    """The record whose removal would raise the pooled correlation most (spec: the tree's feedback record).

    NaN leave-one-out scores never win; ties go to the earliest record.
    """
    if not records:
        raise ValueError("no records")
    if len(pred) != len(records):
        raise ValueError(f"{len(pred)} predicted records but {len(records)} true records")
    # Concatenate once and cut each record out by its offsets: the same arrays, in the same order, as
    # pooled_correlation over the list without record i (so the same floating-point result), without
    # re-concatenating every record per candidate.
    p = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in pred])
    t = np.concatenate([np.asarray(r.acts, dtype=np.float64).ravel() for r in records])
    if p.shape != t.shape:
        raise ValueError(f"{p.size} predicted tokens but {t.size} true tokens")
    ends = np.cumsum([np.asarray(x).size for x in pred])
    base = _pooled_flat(p, t)
    best_i, best_gain = 0, -math.inf
    start = 0
    for i, end in enumerate(ends.tolist()):
        loo = _pooled_flat(np.concatenate((p[:start], p[end:])), np.concatenate((t[:start], t[end:])))
        start = end
        if math.isnan(loo):
            continue
        gain = loo - (0.0 if math.isnan(base) else base)
        if gain > best_gain:
            best_i, best_gain = i, gain
    return best_i


@dataclass(frozen=True)
class TokenFeedback:
    """One token of the feedback record."""

    token: str
    """The token's display string."""
    predicted: int
    """Predicted activation, rounded to 0..5."""
    actual: int
    """True activation discretised to 0..5."""
    verdict: str
    """'too high', 'too low' or 'ok'."""


def token_feedback(pred: np.ndarray, record: Record, global_max: float) -> list[TokenFeedback]:
    """Per-token (predicted, actual, verdict) with both on the 0..5 scale; 'ok' when they agree after rounding."""
    actual = discretise(record.acts, global_max)
    predicted = np.clip(np.rint(np.asarray(pred, dtype=np.float64)), 0, MAX_LEVEL).astype(np.int64)
    out = []
    for tok, p, a in zip(record.tokens, predicted, actual, strict=True):
        verdict = "too high" if p > a else "too low" if p < a else "ok"
        out.append(TokenFeedback(tok, int(p), int(a), verdict))
    return out


class LLMSimulator:
    """Asks an LLM for every token's activation (0..5) as strict JSON; malformed answers are re-asked by the client."""

    def __init__(self, client: LLMClient, tag: str = "") -> None:
        """Use `client`; usage is accounted under `tag` (e.g. "feature:7")."""
        self.client = client
        self.tag = tag
        self.name = f"llm:{client.config.model}"

    async def simulate(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """One (T,) prediction array per record, from one LLM call for all records."""
        from explainers.llm import LLMRequest, chat
        from explainers.prompts.simulate import parse_predictions, simulate_prompt

        if not records:
            return []
        system, user = simulate_prompt(explanation, records)
        # Simulation is deterministic (temperature 0): the same explanation always gets the same prediction.
        parsed = await self.client.complete_parsed(
            LLMRequest(chat(user, system), tag=self.tag, temperature=0.0),
            lambda text: parse_predictions(text, records),
        )
        return [np.asarray(row, dtype=np.float64) for row in parsed.value]
