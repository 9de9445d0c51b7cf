"""Hand-written explanations ("hypotheses"): a researcher's own text and/or rules for a feature, stored as explainer
`manual` and scored like any other explanation (`workbench score --explainer manual`).

    hyp = parse_hypothesis("fires on the LORD in the KJV", [('"LORD"', 5), ('"Lord"', 4)])
    stored = store_hypothesis(store, sae_id, feature, hyp, author="ada", source="cli")   # -> StoredHypothesis

This is not an `Explainer` (explainers/base.py is for generated explanations): nothing is read or shown, so the
explanation's example and negative ids are empty and the scorer's test windows (the feature's shared split) need no
replacement. The config key hashes (SAE, feature, text, rules), so submitting the same hypothesis again returns the
stored row instead of adding a copy; who submitted it, when, and from where (cli | app) are kept in `extra`.
Rules use the lexical rule syntax (`examples.rule_language`: quoted tokens match exactly, case kept) and are validated
with `examples.rules.parse_rules`.
"""

from __future__ import annotations

import getpass
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from sae_workbench.errors import WorkbenchError
from sae_workbench.examples.rules import DEFAULT_RULE_CAP, Rule, parse_rules, rules_to_text
from sae_workbench.llm.jsonparse import JSONParseError
from sae_workbench.store import ExplanationRecord, Store

MANUAL_EXPLAINER = "manual"
MANUAL_VERSION = "manual-v1"
# A hypothesis's default rule strength when none is given: the top of the 0..5 display scale (tree paper).
DEFAULT_STRENGTH = 5

Source = Literal["cli", "app"]


class HypothesisError(WorkbenchError):
    """A hand-written explanation is empty, its rules are malformed, or its feature does not exist."""


@dataclass(frozen=True)
class Hypothesis:
    """A validated hand-written explanation."""

    text: str
    """Free text (the rules rendered as text when only rules were given)."""
    rules: tuple[Rule, ...]
    """Structured rules (may be empty: a free-text hypothesis)."""


@dataclass(frozen=True)
class StoredHypothesis:
    """Where a hypothesis went in the store."""

    explanation_id: int
    """The explanation row."""
    config_key: str
    """Its key (the same hypothesis always has the same key)."""
    created: bool
    """False when the same hypothesis was already stored (nothing was added)."""


def parse_hypothesis(text: str, rules: Sequence[tuple[str, int]] = ()) -> Hypothesis:
    """Validate free text and (activates_on, strength) rules; HypothesisError if both are empty or a rule is bad."""
    parsed: tuple[Rule, ...] = ()
    if rules:
        if len(rules) > DEFAULT_RULE_CAP:
            raise HypothesisError(f"{len(rules)} rules given; at most {DEFAULT_RULE_CAP} per explanation")
        try:
            parsed = parse_rules([{"activates_on": a, "strength": s} for a, s in rules], DEFAULT_RULE_CAP)
        except JSONParseError as err:
            raise HypothesisError(f"bad rule: {err}") from err
    text = text.strip()
    if not text and not parsed:
        raise HypothesisError("give the hypothesis as text, as rules, or both")
    return Hypothesis(text or rules_to_text(parsed), parsed)


def parse_rule_lines(lines: str) -> list[tuple[str, int]]:
    """Rules typed one per line as `RULE` or `RULE | STRENGTH` (e.g. `"LORD" after "the" | 4`; default strength 5)."""
    out: list[tuple[str, int]] = []
    for n, line in enumerate(lines.splitlines(), start=1):
        if not line.strip():
            continue
        head, sep, tail = line.rpartition("|")
        if sep and tail.strip().lstrip("-").isdigit():
            out.append((head.strip(), int(tail.strip())))
        elif sep and not tail.strip():
            raise HypothesisError(
                f"line {n}: nothing after '|'; write `RULE | STRENGTH` with a strength 0..5"
            )
        else:
            out.append((line.strip(), DEFAULT_STRENGTH))
    return out


def hypothesis_key(sae_id: str, feature: int, hypothesis: Hypothesis) -> str:
    """Stable key of (SAE, feature, text, rules): re-submitting the same hypothesis finds the stored row."""
    blob = json.dumps(
        {"sae": sae_id, "feature": int(feature), "explainer": MANUAL_EXPLAINER, "version": MANUAL_VERSION,
         "text": hypothesis.text, "rules": [r.to_dict() for r in hypothesis.rules]},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    )  # fmt: skip
    return f"manual:{hashlib.sha256(blob.encode()).hexdigest()}"


def default_author() -> str:
    """The submitting user's login name ('' when the system does not say)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def store_hypothesis(
    store: Store,
    sae_id: str,
    feature: int,
    hypothesis: Hypothesis,
    *,
    author: str,
    source: Source,
    shown_ids: Sequence[int] = (),
) -> StoredHypothesis:
    """Store a hypothesis as a `manual` explanation of (SAE, feature), with provenance; idempotent per hypothesis.
    `shown_ids`: the windows its author was shown (the feature page's, or what `--seen` names), recorded as
    `extra["shown_ids"]` so scoring holds them (and their documents) out of the test windows."""
    d_sae = store.get_sae(sae_id).d_sae  # UnknownSAEError for an unregistered SAE
    if not 0 <= int(feature) < d_sae:
        raise HypothesisError(f"feature {feature} is out of range: SAE {sae_id} has features 0…{d_sae - 1}")
    key = hypothesis_key(sae_id, feature, hypothesis)
    existed = store.has_explanation(key)
    provenance = {"author": author, "source": source, "submitted_at": datetime.now(UTC).isoformat()}
    shown = sorted({int(i) for i in shown_ids})
    if shown:
        progress = store.index_progress(sae_id)
        if progress is not None:
            store.get_windows(
                progress.corpus, shown
            )  # an id the store does not hold fails here, before the write
    record = ExplanationRecord(
        sae_id=sae_id, feature=int(feature), explainer=MANUAL_EXPLAINER, explainer_version=MANUAL_VERSION,
        prompt_version="", llm_model="", llm_params={}, sampling={"source": "manual"}, example_ids=[],
        negative_ids=[], text=hypothesis.text, config_key=key,
        rules=[r.to_dict() for r in hypothesis.rules] or None, extra={"provenance": provenance, "shown_ids": shown},
    )  # fmt: skip
    return StoredHypothesis(store.add_explanation(record), key, not existed)


__all__ = [
    "DEFAULT_STRENGTH",
    "MANUAL_EXPLAINER",
    "MANUAL_VERSION",
    "Hypothesis",
    "HypothesisError",
    "StoredHypothesis",
    "default_author",
    "hypothesis_key",
    "parse_hypothesis",
    "parse_rule_lines",
    "store_hypothesis",
]
