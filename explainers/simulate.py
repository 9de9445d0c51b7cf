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
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from sae_workbench.examples.records import MAX_LEVEL, Record, discretise
from sae_workbench.examples.rules import Rule

if TYPE_CHECKING:
    from sae_workbench.llm.client import LLMClient

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
        self._flat: dict[tuple[str, tuple[tuple[str, ...], ...]], np.ndarray] = {}

    async def simulate(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """The inner simulator's predictions, computed once per (explanation, record tokens)."""
        key = (explanation, tuple(r.tokens for r in records))
        hit = self._memo.get(key)
        if hit is None:
            hit = asyncio.ensure_future(self.inner.simulate(explanation, records))
            self._memo[key] = hit
        # No shield: every caller belongs to the same search, so a cancelled caller means a cancelled search.
        return await hit

    async def simulate_flat(self, explanation: str, records: Sequence[Record]) -> np.ndarray:
        """`simulate`'s predictions concatenated over the records (float64), also computed once."""
        key = (explanation, tuple(r.tokens for r in records))
        flat = self._flat.get(key)
        if flat is None:
            flat = self._flat[key] = _concat(await self.simulate(explanation, records))
        return flat


def pooled_correlation(pred: Sequence[np.ndarray], true: Sequence[np.ndarray]) -> float:
    """Pearson correlation over all tokens of all records pooled together.

    NaN when the true activations' variance is < 1e-10 (spec). 0.0 when the predictions are constant: an
    explanation that predicts the same value everywhere carries no information about where the feature fires.
    """
    if len(pred) != len(true):
        raise ValueError(f"{len(pred)} predicted records but {len(true)} true records")
    if not pred:
        return math.nan
    p, t = _concat(pred), _concat(true)
    if p.shape != t.shape:
        raise ValueError(f"{p.size} predicted tokens but {t.size} true tokens")
    return PooledTruth(t, np.asarray([t.size], dtype=np.int64)).correlation(p)


class PooledTruth:
    """True activations of records, concatenated, with everything pooled correlations against them reuse.

    A tree search scores dozens of predictions against the same records: the truth's centred values, its sum of
    squares and its per-record sums for the leave-one-out scores are computed once here instead of per prediction.
    """

    def __init__(self, t: np.ndarray, sizes: np.ndarray) -> None:
        """`t`: float64 true activations of the records, concatenated; `sizes`: tokens per record."""
        self.t = np.asarray(t, dtype=np.float64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        n = self.t.size
        self.tc = self.t - (np.add.reduce(self.t) / n if n else 0.0)
        self.sst = float(np.add.reduce(self.tc * self.tc))
        # Spec: NaN when the true variance is < 1e-10.
        self.informative = n > 0 and self.sst / n >= MIN_TRUE_VARIANCE
        self._loo: tuple[np.ndarray, ...] | None = None

    def correlation(self, p: np.ndarray) -> float:
        """Pooled Pearson correlation of predictions `p` with the truth: NaN when the truth is constant, 0.0 when
        the predictions are (they carry no information)."""
        if not self.informative:
            return math.nan
        pc = p - np.add.reduce(p) / p.size
        ssp = float(pc @ pc)
        if ssp == 0.0:
            return 0.0
        return float(pc @ self.tc) / math.sqrt(ssp * self.sst)

    def worst(self, p: np.ndarray, base: float | None = None) -> int:
        """`worst_record_index` of concatenated predictions (`base`: their `correlation`, if already known)."""
        base = self.correlation(p) if base is None else base
        loo = self._leave_one_out(p)
        gains = np.where(np.isnan(loo), -np.inf, loo - (0.0 if math.isnan(base) else base))
        return int(np.argmax(gains)) if np.isfinite(gains).any() else 0

    def _truth_sums(self) -> tuple[np.ndarray, ...]:
        """Segment ids, record starts, tokens outside each record, and the truth's leave-one-out sums."""
        if self._loo is None:
            sizes, n_rec = self.sizes, self.sizes.size
            seg = np.repeat(np.arange(n_rec), sizes)
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            b = np.bincount(seg, self.tc, n_rec)
            d = np.bincount(seg, self.tc * self.tc, n_rec)
            m = (self.t.size - sizes).astype(np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                sb = b.sum() - b
                ss_t = np.maximum((d.sum() - d) - sb * sb / m, 0.0)
            undefined = (m == 0) | ~(ss_t / np.where(m > 0, m, 1.0) >= MIN_TRUE_VARIANCE)
            self._loo = (seg, starts, m, sb, ss_t, undefined)
        return self._loo

    def _leave_one_out(self, p: np.ndarray) -> np.ndarray:
        """Per record, the pooled correlation of all other records (the rules of `correlation`), from per-record
        sums of deviations from the overall means: one pass instead of one concatenation per record."""
        seg, starts, m, sb, ss_t, undefined = self._truth_sums()
        n_rec = self.sizes.size
        dp = p - np.add.reduce(p) / p.size
        a, c = np.bincount(seg, dp, n_rec), np.bincount(seg, dp * dp, n_rec)
        e = np.bincount(seg, dp * self.tc, n_rec)
        with np.errstate(divide="ignore", invalid="ignore"):
            sa = a.sum() - a
            ss_p = np.maximum((c.sum() - c) - sa * sa / m, 0.0)
            cov = (e.sum() - e) - sa * sb / m
            corr = cov / np.sqrt(ss_p * ss_t)
        out = np.clip(corr, -1.0, 1.0)
        out[_rest_is_constant(p, self.sizes, starts)] = 0.0  # constant predictions carry no information
        out[undefined] = math.nan
        return out


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


async def simulate_rules_flat(
    simulator: Simulator, rules: Sequence[Rule], records: Sequence[Record]
) -> np.ndarray:
    """`simulate_rules` concatenated over the records: one array operation per rule instead of one per record."""
    flat = getattr(simulator, "simulate_flat", None)
    if flat is not None:
        per_rule = await asyncio.gather(*(flat(rule.activates_on, records) for rule in rules))
    else:
        per_rule = [
            _concat(p)
            for p in await asyncio.gather(*(simulator.simulate(r.activates_on, records) for r in rules))
        ]
    out = np.zeros(sum(len(r) for r in records), dtype=np.float64)
    for rule, pred in zip(rules, per_rule, strict=True):
        if pred.shape != out.shape:
            raise ValueError(f"{pred.size} predicted tokens but {out.size} tokens in the records")
        np.maximum(out, pred * (rule.strength / MAX_LEVEL), out=out)
    return out


def _concat(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Arrays flattened and joined as one float64 array."""
    if not arrays:
        return np.zeros(0, dtype=np.float64)
    return np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in arrays])


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
    p, t = _concat(pred), _concat([r.acts for r in records])
    if p.shape != t.shape:
        raise ValueError(f"{p.size} predicted tokens but {t.size} true tokens")
    return PooledTruth(t, np.asarray([np.asarray(x).size for x in pred], dtype=np.int64)).worst(p)


def _rest_is_constant(p: np.ndarray, sizes: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per record, whether the predictions of all other records take a single value."""
    n_rec = sizes.size
    lo, hi = np.full(n_rec, np.inf), np.full(n_rec, -np.inf)
    nonempty = sizes > 0
    lo[nonempty], hi[nonempty] = (
        np.minimum.reduceat(p, starts[nonempty]),
        np.maximum.reduceat(p, starts[nonempty]),
    )
    if np.count_nonzero(hi > lo) >= 2:  # two records vary inside: whichever is left out, the other remains
        return np.zeros(n_rec, dtype=bool)
    # min / max over the other records: prefix and suffix running extremes
    pre_lo = np.concatenate(([np.inf], np.minimum.accumulate(lo)[:-1]))
    suf_lo = np.concatenate((np.minimum.accumulate(lo[::-1])[::-1][1:], [np.inf]))
    pre_hi = np.concatenate(([-np.inf], np.maximum.accumulate(hi)[:-1]))
    suf_hi = np.concatenate((np.maximum.accumulate(hi[::-1])[::-1][1:], [-np.inf]))
    return np.maximum(pre_hi, suf_hi) <= np.minimum(pre_lo, suf_lo)


class TokenFeedback(NamedTuple):
    """One token of the feedback record (a named tuple: a feedback record is built per scored tree node)."""

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
    verdicts = np.where(
        predicted > actual, "too high", np.where(predicted < actual, "too low", "ok")
    ).tolist()
    return [
        TokenFeedback(tok, p, a, v)
        for tok, p, a, v in zip(record.tokens, predicted.tolist(), actual.tolist(), verdicts, strict=True)
    ]


class LLMSimulator:
    """Asks an LLM for every token's activation (0..5) as strict JSON; malformed answers are re-asked by the client."""

    def __init__(self, client: LLMClient, tag: str = "") -> None:
        """Use `client`; usage is accounted under `tag` (e.g. "feature:7")."""
        from sae_workbench.explainers.prompts.simulate import PROMPT_VERSION

        self.client = client
        self.tag = tag
        self.name = f"llm:{client.config.model}"
        self.prompt_version = PROMPT_VERSION

    async def simulate(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """One (T,) prediction array per record: the records go out in chunks whose answer fits the completion
        budget (`explainers.fit.answer_chunks`), run concurrently; a chunk whose prompt does not fit the context is
        halved, down to one record (`LLMContextOverflowError` when even that does not fit)."""
        import asyncio

        from sae_workbench.explainers.fit import answer_chunks

        if not records:
            return []
        chunks = answer_chunks([len(r) for r in records], self.client.config.max_tokens)
        parts = await asyncio.gather(
            *(self._simulate_fitting(explanation, records[c.start : c.stop]) for c in chunks)
        )
        return [row for part in parts for row in part]

    async def _simulate_fitting(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """Predictions for `records` from one call, or from two halves when the prompt does not fit."""
        from sae_workbench.explainers.prompts.simulate import (
            parse_predictions,
            predictions_schema,
            simulate_prompt,
        )
        from sae_workbench.llm.client import LLMContextOverflowError, LLMRequest, chat

        system, user = simulate_prompt(explanation, records)
        # Simulation is deterministic (temperature 0): the same explanation always gets the same prediction.
        request = LLMRequest(chat(user, system), tag=self.tag, temperature=0.0, schema=predictions_schema(records),
                             schema_name="predictions")  # fmt: skip
        try:
            await self.client.check_fit(request)
        except LLMContextOverflowError:
            if len(records) < 2:
                raise
            half = len(records) // 2
            head = await self._simulate_fitting(explanation, records[:half])
            return head + await self._simulate_fitting(explanation, records[half:])
        parsed = await self.client.complete_parsed(request, lambda text: parse_predictions(text, records))
        return [np.asarray(row, dtype=np.float64) for row in parsed.value]
