"""The offline lexical explainer and simulator: rules from activation statistics, predictions by matching.

This is a baseline built from counting, not an LLM, and it is named "lexical" everywhere it appears.

Explainer: over a set of records (top examples plus background windows), every token and every (left context,
token) pair is a candidate. Its precision is the fraction of its occurrences where the feature is active, its lift
is its mean activation over the mean activation of all tokens. Rules are chosen greedily by the activation mass they
cover (times precision) until `rule_cap` rules or the remaining mass is small; a token rule whose active
occurrences mostly follow one left token, and that is much more precise there, is narrowed to that context.

Rule text (quoted JSON strings, matched case-insensitively after stripping spaces):
    "york"               fires on the token "York"
    "york" after "new"   fires on "York" when the token right before it is "New"
    "dog" or "cat"       alternatives
Parenthesised parts are comments. Text without quotes is matched word by word (content words ≥ 3 letters).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from explainers.records import MAX_LEVEL, Record, global_max_of
from explainers.rules import DEFAULT_RULE_CAP, Rule, rules_to_text

LEXICAL_VERSION = "lexical-v1"
_QUOTED_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_PAREN_RE = re.compile(r"\([^()]*\)")
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")
_STOPWORDS = frozenset(
    "the and for with that this from are was were token tokens word words fires activates activation on in of "
    "after before when text any its it".split()
)


def norm(token: str) -> str:
    """Matching form of a token: stripped of surrounding whitespace and lower-cased."""
    return token.strip().lower()


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


@dataclass
class _Stat:
    """Occurrence counts of one candidate."""

    occ: int = 0
    active: int = 0
    mass: float = 0.0
    hits: list[tuple[int, int]] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.active / self.occ if self.occ else 0.0

    @property
    def mean(self) -> float:
        return self.mass / self.occ if self.occ else 0.0


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
        target = json.dumps(self.token, ensure_ascii=False)
        return (
            target
            if self.context is None
            else f"{target} after {json.dumps(self.context, ensure_ascii=False)}"
        )

    def strength(self, global_max: float) -> int:
        """Expected activation on an occurrence on the 0..5 scale (at least 1)."""
        if global_max <= 0 or not self.occurrences:
            return 1
        return int(np.clip(round(MAX_LEVEL * self.mass / self.occurrences / global_max), 1, MAX_LEVEL))


class LexicalStats:
    """Candidate statistics of one feature over a set of records."""

    def __init__(self, records: Sequence[Record]) -> None:
        """Count every token and (left token, token) pair of `records`."""
        self.records = list(records)
        self._uni: dict[str, _Stat] = defaultdict(_Stat)
        self._bi: dict[tuple[str, str], _Stat] = defaultdict(_Stat)
        total_mass, total_tokens = 0.0, 0
        for ri, rec in enumerate(self.records):
            keys = [norm(t) for t in rec.tokens]
            acts = rec.acts.tolist()
            total_mass += float(sum(acts))
            total_tokens += len(keys)
            for i, (k, a) in enumerate(zip(keys, acts, strict=True)):
                if not k:
                    continue
                stats = [self._uni[k]]
                if i > 0 and keys[i - 1]:
                    stats.append(self._bi[(keys[i - 1], k)])
                for s in stats:
                    s.occ += 1
                    if a > 0:
                        s.active += 1
                        s.mass += a
                        s.hits.append((ri, i))
        self.total_mass = total_mass
        self.mean_act = total_mass / total_tokens if total_tokens else 0.0

    def candidate(self, token: str, context: str | None = None) -> Candidate:
        """Statistics of one (normalised) token, optionally after a context token."""
        s = self._uni.get(token) if context is None else self._bi.get((context, token))
        s = s or _Stat()
        lift = s.mean / self.mean_act if self.mean_act > 0 else 0.0
        return Candidate(token, context, s.occ, s.active, s.mass, lift)

    def hits(self, token: str, context: str | None = None) -> list[tuple[int, int]]:
        """(record, position) of the candidate's active occurrences."""
        s = self._uni.get(token) if context is None else self._bi.get((context, token))
        return list(s.hits) if s else []

    def candidates(self, config: LexicalConfig) -> list[Candidate]:
        """Every token and context candidate meeting the support and precision floors, by lift."""
        out = []
        for k, s in self._uni.items():
            if s.active >= config.min_count and s.precision >= config.min_precision:
                out.append(self.candidate(k))
        for (c, k), s in self._bi.items():
            if s.active >= config.min_count and s.precision >= config.min_precision:
                out.append(self.candidate(k, c))
        out.sort(key=lambda c: (-c.lift, -c.mass, c.token, c.context or ""))
        return out

    def typical_context(self, token: str) -> tuple[str, float] | None:
        """The most common left token among the token's active occurrences and its share."""
        ctx = Counter()
        for ri, i in self.hits(token):
            if i > 0:
                ctx[norm(self.records[ri].tokens[i - 1])] += 1
        if not ctx:
            return None
        best, n = ctx.most_common(1)[0]
        return best, n / max(1, len(self.hits(token)))


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
    covered: set[tuple[int, int]] = set()
    acts = [r.acts for r in stats.records]
    chosen: list[Candidate] = []
    while len(chosen) < config.rule_cap and pool:
        best, best_gain = None, 0.0
        for cand in pool:
            new = sum(
                float(acts[ri][i]) for ri, i in stats.hits(cand.token, cand.context) if (ri, i) not in covered
            )
            gain = new * cand.precision
            if gain > best_gain:
                best, best_gain = cand, gain
        if best is None or best_gain < config.min_gain * stats.total_mass:
            break
        if best.context is None:
            best = _narrow(stats, best, config)
        chosen.append(best)
        covered.update(stats.hits(best.token, best.context))
        pool = [c for c in pool if (c.token, c.context) != (best.token, best.context)]
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
                note += f", usually after {json.dumps(typical[0], ensure_ascii=False)}"
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
    covered = {h for c in chosen for h in stats.hits(c.token, c.context)}
    mass = sum(float(stats.records[ri].acts[i]) for ri, i in covered)
    coverage = mass / stats.total_mass if stats.total_mass > 0 else 0.0
    return LexicalExplanation(rules, render_text(rules, stats), coverage)


def _unquote(quoted: str) -> str:
    """A quoted string's content: JSON-decoded (raw control characters allowed), else the text between the quotes
    (free text from an LLM or several joined descriptions may quote loosely; never an error)."""
    try:
        value = json.loads(quoted, strict=False)
    except ValueError:
        return quoted[1:-1]
    return value if isinstance(value, str) else quoted[1:-1]


def parse_rule_text(text: str) -> tuple[list[str], list[str]]:
    """(targets, contexts) named by a rule's text: quoted strings before/after ' after ', or content words."""
    body = _PAREN_RE.sub(" ", text)
    head, sep, tail = body.partition(" after ")
    targets = [norm(_unquote(q)) for q in _QUOTED_RE.findall(head)]
    contexts = [norm(_unquote(q)) for q in _QUOTED_RE.findall(tail)] if sep else []
    if not targets:
        targets = [w.lower() for w in _WORD_RE.findall(head) if w.lower() not in _STOPWORDS]
    return [t for t in targets if t], [c for c in contexts if c]


def match_rule_text(text: str, tokens: Sequence[str]) -> np.ndarray:
    """(T,) bool: tokens the rule text matches (target token, right after a context token when one is named)."""
    targets, contexts = parse_rule_text(text)
    keys = [norm(t) for t in tokens]
    tset, cset = set(targets), set(contexts)
    out = np.zeros(len(keys), dtype=bool)
    for i, k in enumerate(keys):
        if k and k in tset and (not cset or (i > 0 and keys[i - 1] in cset)):
            out[i] = True
    return out


class LexicalSimulator:
    """Predicts 5 on tokens an explanation's quoted tokens (or content words) match and 0 elsewhere."""

    name = "lexical"

    async def simulate(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """One (T,) prediction array (0 or 5) per record."""
        return self.simulate_sync(explanation, records)

    def simulate_sync(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """Synchronous form of `simulate` (it does no I/O)."""
        clauses = [c for c in explanation.split(";") if c.strip()]
        out = []
        for rec in records:
            hit = np.zeros(len(rec), dtype=bool)
            for clause in clauses:
                hit |= match_rule_text(clause, rec.tokens)
            out.append(hit.astype(np.float64) * MAX_LEVEL)
        return out


def simulate_rules_sync(rules: Sequence[Rule], records: Sequence[Record]) -> list[np.ndarray]:
    """Lexical structured simulation without an event loop: max over rules of match × strength."""
    sim = LexicalSimulator()
    out = [np.zeros(len(r), dtype=np.float64) for r in records]
    for rule in rules:
        for i, p in enumerate(sim.simulate_sync(rule.activates_on, records)):
            out[i] = np.maximum(out[i], p * (rule.strength / MAX_LEVEL))
    return out


__all__ = [
    "LEXICAL_VERSION",
    "Candidate",
    "LexicalConfig",
    "LexicalExplanation",
    "LexicalSimulator",
    "LexicalStats",
    "lexical_explain",
    "match_rule_text",
    "parse_rule_text",
    "rules_to_text",
    "simulate_rules_sync",
]
