"""Structured explanations: a list of rules {"activates_on": str, "strength": 0..5} (tree paper, Ma et al. 2025).

One concept per rule; `rule_cap` (paper default 5) truncates extra rules. Parsing is strict: an LLM answer that is not
a list of such objects raises `JSONParseError`, whose message can be sent back in a re-ask.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sae_workbench.llm.jsonparse import JSONParseError, JSONValue

# Paper default: at most 5 rules per explanation.
DEFAULT_RULE_CAP = 5


@dataclass(frozen=True)
class Rule:
    """One concept the feature activates on, with how strongly (0..5)."""

    activates_on: str
    """What the feature fires on, in words (lexical rules quote tokens: '" York" after " New"')."""
    strength: int
    """Typical activation on it, on the 0..5 display scale."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"activates_on": self.activates_on, "strength": self.strength}


def parse_rules(value: JSONValue, rule_cap: int = DEFAULT_RULE_CAP) -> tuple[Rule, ...]:
    """Validate a parsed JSON value as a non-empty list of rules; keep the first `rule_cap`."""
    if not isinstance(value, list):
        raise JSONParseError(f"expected a JSON array of rules, got {type(value).__name__}")
    if not value:
        raise JSONParseError("the array of rules is empty; give at least one rule")
    rules: list[Rule] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or "activates_on" not in item or "strength" not in item:
            raise JSONParseError(f'rule {i} must be an object with keys "activates_on" and "strength"')
        entry = cast(dict[str, object], item)
        text, strength = entry["activates_on"], entry["strength"]
        if not isinstance(text, str) or not text.strip():
            raise JSONParseError(f'rule {i}: "activates_on" must be a non-empty string')
        if isinstance(strength, bool) or not isinstance(strength, int) or not 0 <= strength <= 5:
            raise JSONParseError(f'rule {i}: "strength" must be an integer 0..5, got {strength!r}')
        rules.append(Rule(text.strip(), strength))
    return tuple(rules[:rule_cap])


def rules_to_json(rules: Sequence[Rule]) -> str:
    """Compact JSON array of rules (the form prompts show and the store keeps)."""
    return json.dumps([r.to_dict() for r in rules], ensure_ascii=False)


def rules_to_text(rules: Sequence[Rule]) -> str:
    """A free-text rendering: one clause per rule, strongest first."""
    ordered = sorted(rules, key=lambda r: -r.strength)
    return "; ".join(f"{r.activates_on} (strength {r.strength})" for r in ordered)
