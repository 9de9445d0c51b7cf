"""The offline lexical explainer: rules from activation statistics (a baseline built from counting, not an LLM).

It is named "lexical" everywhere it appears.

Explainer: over a set of records (top examples plus background windows), every token and every (left context,
token) pair is a candidate. Its precision is the fraction of its occurrences where the feature is active, its lift
is its mean activation over the mean activation of all tokens. Rules are chosen greedily by the activation mass they
cover (times precision) until `rule_cap` rules or the remaining mass is small; a token rule whose active
occurrences mostly follow one left token, and that is much more precise there, is narrowed to that context.

Its rules are written in the lexical rule language (`examples.rule_language`); the matching simulator is
`explainers.lexical_simulator`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from sae_workbench.examples.records import (
    MAX_LEVEL,
    Record,
    global_max_of,
    key_word,
    known_key_code,
    n_key_codes,
)
from sae_workbench.examples.rule_language import left_codes, parse_rule_text, quote_token
from sae_workbench.examples.rules import DEFAULT_RULE_CAP, Rule
from sae_workbench.examples.sampling import quantile_examples, random_negatives
from sae_workbench.examples.testsets import SplitConfig, prepare_split
from sae_workbench.explainers.base import (
    ExplainConfig,
    ExplainContext,
    Explanation,
    FeatureReader,
    no_method_options,
)
from sae_workbench.store import Store

# v2: rules keep case and whitespace-only tokens (v1 lower-cased every token and could not name whitespace).
LEXICAL_VERSION = "lexical-v2"


@dataclass(frozen=True)
class LexicalConfig:
    """Settings of the lexical explainer."""

    rule_cap: int = DEFAULT_RULE_CAP
    """Most rules per explanation (tree paper default 5)."""
    min_count: int = 2
    """Fewest active occurrences a candidate needs."""
    min_precision: float = 0.3
    """Fewest fraction of a candidate's occurrences that must be active."""
    min_gain: float = 0.03
    """Stop adding rules when the next one covers less than this fraction of the activation mass."""
    narrow_share: float = 0.8
    """A token rule is narrowed to a left context holding at least this share of its active occurrences…"""
    narrow_precision_gain: float = 0.2
    """…when the context raises its precision by at least this much."""


@dataclass(frozen=True)
class Candidate:
    """A token (optionally with its left context) and its activation statistics over the records."""

    token: str
    """Normalised token."""
    context: str | None
    """Normalised left-neighbour token, or None."""
    occurrences: int
    """Times it occurs in the records."""
    active: int
    """Times the feature is active on it."""
    mass: float
    """Sum of the feature's activation on it."""
    lift: float
    """Mean activation on it over the mean activation on all tokens."""

    @property
    def precision(self) -> float:
        """Fraction of its occurrences that are active."""
        return self.active / self.occurrences if self.occurrences else 0.0

    def rule_text(self) -> str:
        """The rule's activates_on string."""
        target = quote_token(self.token)
        return target if self.context is None else f"{target} after {quote_token(self.context)}"

    def strength(self, global_max: float) -> int:
        """Expected activation on an occurrence on the 0..5 scale (at least 1)."""
        if global_max <= 0 or not self.occurrences:
            return 1
        return int(np.clip(round(MAX_LEVEL * self.mass / self.occurrences / global_max), 1, MAX_LEVEL))


class LexicalStats:
    """Candidate statistics of one feature over a set of records.

    Tokens are counted as arrays: every token of every record gets an integer key (its normalised string) and every
    (left token, token) pair a pair key; occurrences, active occurrences and activation mass are bincounts over
    those keys. A candidate's active occurrences are flat token positions (`hit_positions`).
    """

    def __init__(self, records: Sequence[Record]) -> None:
        """Count every token and (left token, token) pair of `records`."""
        self.records = list(records)
        starts = np.cumsum([0] + [len(r) for r in self.records])
        self._starts = starts.astype(np.int64)
        keys = (
            np.concatenate([r.key_codes for r in self.records])
            if self.records
            else np.zeros(0, dtype=np.int64)
        )
        self._size = n_key_codes()  # codes of these records are all below this
        n = len(keys)
        acts = (
            np.concatenate([r.acts for r in self.records]).astype(np.float64)
            if n
            else np.zeros(0, dtype=np.float64)
        )
        self._acts = acts
        key = self._key = keys
        prev = self._prev = left_codes(keys, self._starts[:-1])  # 0 where a record has no left token
        active = acts > 0
        self._active = active
        self.total_mass = float(acts.sum())
        self.mean_act = self.total_mass / n if n else 0.0
        size = self._size
        valid = key > 0
        self._uni_occ = np.bincount(key[valid], minlength=size)
        self._uni_active = np.bincount(key[valid & active], minlength=size)
        self._uni_mass = np.bincount(key[valid & active], weights=acts[valid & active], minlength=size)
        pair_ok = valid & (prev > 0)
        codes = prev[pair_ok] * size + key[pair_ok]
        self._pair_codes, inverse = np.unique(codes, return_inverse=True)
        act_pair = active[pair_ok]
        self._bi_occ = np.bincount(inverse, minlength=len(self._pair_codes))
        self._bi_active = np.bincount(inverse[act_pair], minlength=len(self._pair_codes))
        self._bi_mass = np.bincount(
            inverse[act_pair], weights=acts[pair_ok][act_pair], minlength=len(self._pair_codes)
        )

    def _code(self, token: str) -> int:
        """The key code of a normalised token if these records can contain it, else 0."""
        code = known_key_code(token)
        return code if code is not None and code < self._size else 0

    def _counts(self, token: str, context: str | None) -> tuple[int, int, float]:
        """(occurrences, active occurrences, activation mass) of a candidate; zeros when it never occurs."""
        k = self._code(token)
        if k == 0:
            return 0, 0, 0.0
        if context is None:
            return int(self._uni_occ[k]), int(self._uni_active[k]), float(self._uni_mass[k])
        c = self._code(context)
        code = c * self._size + k
        j = int(np.searchsorted(self._pair_codes, code))
        if c == 0 or j >= len(self._pair_codes) or self._pair_codes[j] != code:
            return 0, 0, 0.0
        return int(self._bi_occ[j]), int(self._bi_active[j]), float(self._bi_mass[j])

    def _make(self, token: str, context: str | None, occ: int, active: int, mass: float) -> Candidate:
        """A Candidate from its counts."""
        lift = mass / occ / self.mean_act if occ and self.mean_act > 0 else 0.0
        return Candidate(token, context, occ, active, mass, lift)

    def candidate(self, token: str, context: str | None = None) -> Candidate:
        """Statistics of one (normalised) token, optionally after a context token."""
        return self._make(token, context, *self._counts(token, context))

    def hit_positions(self, token: str, context: str | None = None) -> np.ndarray:
        """Flat token positions (over all records, in order) of the candidate's active occurrences."""
        k = self._code(token)
        if k == 0:
            return np.zeros(0, dtype=np.int64)
        sel = self._active & (self._key == k)
        if context is not None:
            c = self._code(context)
            if c == 0:
                return np.zeros(0, dtype=np.int64)
            sel &= self._prev == c
        return np.flatnonzero(sel)

    def hits(self, token: str, context: str | None = None) -> list[tuple[int, int]]:
        """(record, position) of the candidate's active occurrences."""
        flat = self.hit_positions(token, context)
        rec = np.searchsorted(self._starts, flat, side="right") - 1
        return [(int(r), int(f - self._starts[r])) for r, f in zip(rec, flat, strict=True)]

    def activation(self, positions: np.ndarray) -> float:
        """Total activation at flat token positions."""
        return float(self._acts[positions].sum())

    def candidates(self, config: LexicalConfig) -> list[Candidate]:
        """Every token and context candidate meeting the support and precision floors, by lift."""
        out = []
        size = self._size
        for occ, act, mass, ids, pairs in (
            (self._uni_occ, self._uni_active, self._uni_mass, np.arange(size), False),
            (self._bi_occ, self._bi_active, self._bi_mass, self._pair_codes, True),
        ):
            precision = np.divide(act, occ, out=np.zeros(len(occ)), where=occ > 0)
            for j in np.flatnonzero((act >= config.min_count) & (precision >= config.min_precision)):
                code = int(ids[j])
                token, context = (
                    (key_word(code % size), key_word(code // size)) if pairs else (key_word(code), None)
                )
                out.append(self._make(token, context, int(occ[j]), int(act[j]), float(mass[j])))
        out.sort(key=lambda c: (-c.lift, -c.mass, c.token, c.context or ""))
        return out

    def typical_context(self, token: str) -> tuple[str, float] | None:
        """The most common left token among the token's active occurrences and its share."""
        flat = self.hit_positions(token)
        if not flat.size:
            return None
        left = self._prev[flat]
        starts = np.searchsorted(self._starts, flat, side="right") - 1
        has_left = (flat > self._starts[starts]) & (left > 0)  # position 0 of a record has no left token
        ctx = Counter(key_word(int(k)) for k in left[has_left])
        if not ctx:
            return None
        best, n = ctx.most_common(1)[0]
        return best, n / max(1, flat.size)


@dataclass(frozen=True)
class LexicalExplanation:
    """The lexical explainer's output."""

    rules: tuple[Rule, ...]
    """Structured rules."""
    text: str
    """Free-text rendering, labelled as lexical."""
    coverage: float
    """Fraction of the records' activation mass on tokens the rules match."""


def _narrow(stats: LexicalStats, cand: Candidate, config: LexicalConfig) -> Candidate:
    """Narrow a token candidate to its dominant left context when that is much more precise."""
    typical = stats.typical_context(cand.token)
    if typical is None:
        return cand
    ctx, share = typical
    narrowed = stats.candidate(cand.token, ctx)
    if share >= config.narrow_share and narrowed.precision >= cand.precision + config.narrow_precision_gain:
        return narrowed
    return cand


def select_candidates(stats: LexicalStats, config: LexicalConfig) -> list[Candidate]:
    """Greedy choice of candidates by newly covered activation mass × precision."""
    if stats.total_mass <= 0:
        return []
    pool = stats.candidates(config)
    hits = [stats.hit_positions(c.token, c.context) for c in pool]
    remaining = stats._acts.copy()  # activation not yet covered by a chosen rule
    chosen: list[Candidate] = []
    while len(chosen) < config.rule_cap and pool:
        best, best_gain = -1, 0.0
        for j, cand in enumerate(pool):
            gain = float(remaining[hits[j]].sum()) * cand.precision
            if gain > best_gain:
                best, best_gain = j, gain
        if best < 0 or best_gain < config.min_gain * stats.total_mass:
            break
        pick = pool[best]
        if pick.context is None:
            pick = _narrow(stats, pick, config)
        chosen.append(pick)
        remaining[stats.hit_positions(pick.token, pick.context)] = 0.0
        keep = [j for j, c in enumerate(pool) if (c.token, c.context) != (pick.token, pick.context)]
        pool, hits = [pool[j] for j in keep], [hits[j] for j in keep]
    return chosen


def render_text(rules: Sequence[Rule], stats: LexicalStats | None = None) -> str:
    """Free-text rendering, naming the method; adds each token rule's typical left context when one dominates."""
    if not rules:
        return (
            "Lexical explainer (activation statistics, not an LLM): no token reliably activates this feature."
        )
    parts = []
    for r in sorted(rules, key=lambda r: -r.strength):
        note = f"strength {r.strength}"
        targets, contexts = parse_rule_text(r.activates_on)
        if stats is not None and not contexts and len(targets) == 1:
            typical = stats.typical_context(targets[0])
            if typical is not None and typical[1] >= 0.5:
                note += f", usually after {quote_token(typical[0])}"
        parts.append(f"{r.activates_on} ({note})")
    return "Lexical explainer (activation statistics, not an LLM): fires on " + "; ".join(parts) + "."


def lexical_explain(
    records: Sequence[Record], config: LexicalConfig = LexicalConfig(), global_max: float | None = None
) -> LexicalExplanation:
    """Explain a feature from records (top examples plus background windows) by activation statistics."""
    stats = LexicalStats(records)
    gmax = global_max if global_max is not None else global_max_of(records)
    chosen = select_candidates(stats, config)
    rules = tuple(Rule(c.rule_text(), c.strength(gmax)) for c in chosen)
    covered = np.unique(np.concatenate([stats.hit_positions(c.token, c.context) for c in chosen] or [[]]))
    mass = stats.activation(covered.astype(np.int64))
    coverage = mass / stats.total_mass if stats.total_mass > 0 else 0.0
    return LexicalExplanation(rules, render_text(rules, stats), coverage)


@dataclass(frozen=True)
class LexicalInputs:
    """What the lexical explainer reads for one feature."""

    positive_ids: list[int]
    """The split's train positives, then a per-quantile sample of the other activating windows."""
    background_ids: list[int]
    """The split's train negatives, then random non-activating windows."""
    records: list[Record]
    """Records of both, whole windows."""


@dataclass(frozen=True)
class LexicalExplainer:
    """Offline explainer: rules from the activation statistics of a feature's train windows (not an LLM).

    Its inputs are the split's train third (as every explainer's, `examples.testsets`) widened by a per-quantile
    sample of the feature's other activating windows (so weaker triggers are counted too) and random non-activating
    background; neither ever includes a window of the split's valid, test or spare part.
    """

    name: ClassVar[str] = "lexical"
    requires_llm: ClassVar[bool] = False
    split: SplitConfig = field(default_factory=SplitConfig)
    """The shared split."""
    config: LexicalConfig = field(default_factory=LexicalConfig)
    """Rule selection."""
    n_quantiles: int = 10
    """Activation quantile bins of the widening sample (delphi-style)."""
    per_quantile: int = 3
    """Windows drawn per bin."""
    n_background: int = 50
    """Random non-activating windows contrasted with the positives."""

    @classmethod
    def from_config(cls, config: ExplainConfig) -> LexicalExplainer:
        """Build from the run's options."""
        no_method_options(config, cls.name)
        return cls(config.split(), LexicalConfig(rule_cap=config.rule_cap))

    def version(self, llm: bool) -> str:
        """Code version (the same with or without an LLM: it never calls one)."""
        return LEXICAL_VERSION

    def prompt_version(self, llm: bool) -> str:
        """No prompt."""
        return ""

    def sampling(self) -> dict[str, Any]:
        """Provenance of what it reads."""
        return {"examples": "SPLIT_TRAIN+QUANTILE", "n_quantiles": self.n_quantiles,
                "per_quantile": self.per_quantile, "background": "SPLIT_TRAIN+RANDOM_NEGATIVE",
                "n_background": self.n_background, "split": self.split.params()}  # fmt: skip

    def prepare(self, store: Store, sae_id: str) -> None:
        """Embed the corpus once when the split's negatives are SIMILAR ones."""
        prepare_split(store, sae_id, self.split)

    def load(self, reader: FeatureReader) -> LexicalInputs:
        """The split's train windows plus the quantile sample and background, never a held-out window."""
        split = reader.split(self.split)
        held = set(split.valid.ids + split.test.ids + split.spare.ids)
        quant = quantile_examples(
            reader.store,
            reader.sae_id,
            reader.feature,
            self.n_quantiles,
            self.per_quantile,
            seed=self.split.seed,
        )
        pos = list(
            dict.fromkeys([*split.train.positives, *(e.window_id for e in quant if e.window_id not in held)])
        )
        # seed + 1: its own stream, so the background is not the RANDOM_NEGATIVE split's draw (the same windows in
        # the same order would leave a RANDOM_NEGATIVE scorer few unseen test negatives)
        drawn = random_negatives(
            reader.store,
            reader.sae_id,
            reader.feature,
            self.n_background + len(held),
            seed=self.split.seed + 1,
        )
        extra = [i for i in drawn if i not in held and i not in split.train.negatives][: self.n_background]
        bg = [*split.train.negatives, *extra]
        return LexicalInputs(pos, bg, reader.records(pos + bg, None))

    async def explain(self, inputs: LexicalInputs, ctx: ExplainContext) -> Explanation:
        """Lexical rules from the positives contrasted with the background."""
        out = lexical_explain(inputs.records, self.config, ctx.peak)
        return Explanation(
            out.text, out.rules, inputs.positive_ids, inputs.background_ids,
            {"coverage": out.coverage, "method": "lexical"},
        )  # fmt: skip


__all__ = [
    "LEXICAL_VERSION",
    "Candidate",
    "LexicalConfig",
    "LexicalExplainer",
    "LexicalExplanation",
    "LexicalStats",
    "lexical_explain",
    "select_candidates",
]
