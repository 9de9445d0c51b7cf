"""The lexical rule language: how rule text names tokens, and quoting, parsing and matching it.

Rule text (quoted JSON strings; a token matches a quoted string when they are equal after stripping the token's
surrounding whitespace — case-sensitive, because case matters in code: "None" is not "none"):
    "York"               fires on the token "York" (or " York"), not on "york"
    "York" after "New"   fires on "York" when the token right before it is "New"
    "dog" or "cat"       alternatives
    "\\n"                 fires on a newline token: whitespace-only tokens are matched as they are and shown escaped
                         (JSON escapes, plus \\uXXXX for other whitespace: four spaces of indentation read
                         "\\u0020\\u0020\\u0020\\u0020"), never as an empty ""
Parenthesised parts are comments. Text without quotes is matched word by word (content words ≥ 3 letters),
case-insensitively: free text names words, not exact tokens.

Used by the lexical explainer and simulator (`explainers.lexical`, `explainers.lexical_simulator`), the tree
explainer's offline rule editor, the manual explainer and CoSy's concept texts.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sae_workbench.examples.records import Record, key_code, norm

_QUOTED_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_PAREN_RE = re.compile(r"\([^()]*\)")
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")
_STOPWORDS = frozenset(
    "the and for with that this from are was were token tokens word words fires activates activation on in of "
    "after before when text any its it".split()
)


def quote_token(token: str) -> str:
    """A token as rule text: a JSON string (case kept; newline and tab escaped) whose other invisible whitespace is
    written as \\uXXXX (spaces too when the token is only whitespace: `"\\u0020\\u0020"`, which HTML cannot
    collapse), so a whitespace-only token is always visible and reads back with `json.loads`."""
    quoted = json.dumps(token, ensure_ascii=False)
    only_space = token.isspace()
    return "".join(f"\\u{ord(c):04x}" if c.isspace() and (only_space or c != " ") else c for c in quoted)


def _unquote(quoted: str) -> str:
    """A quoted string's content: JSON-decoded (raw control characters allowed), else the text between the quotes
    (free text from an LLM or several joined descriptions may quote loosely; never an error)."""
    try:
        value = json.loads(quoted, strict=False)
    except ValueError:
        return quoted[1:-1]
    return value if isinstance(value, str) else quoted[1:-1]


@dataclass(frozen=True)
class ParsedRule:
    """What a rule's text names: exact (quoted) target tokens, or case-insensitive content words, and contexts."""

    targets: tuple[str, ...]
    """Quoted target tokens (`norm` form, case kept), matched exactly."""
    words: tuple[str, ...]
    """Lower-cased content words of unquoted text (only when nothing is quoted), matched case-insensitively."""
    contexts: tuple[str, ...]
    """Quoted left-context tokens (`norm` form), matched exactly; empty: any context."""


def parse_rule(text: str) -> ParsedRule:
    """Split a rule's text into exact quoted targets (before ' after '), contexts (after it), or content words."""
    body = _PAREN_RE.sub(" ", text)
    head, sep, tail = body.partition(" after ")
    targets = [norm(_unquote(q)) for q in _QUOTED_RE.findall(head)]
    contexts = [norm(_unquote(q)) for q in _QUOTED_RE.findall(tail)] if sep else []
    words = [] if targets else [w.lower() for w in _WORD_RE.findall(head) if w.lower() not in _STOPWORDS]
    return ParsedRule(
        tuple(t for t in targets if t), tuple(w for w in words if w), tuple(c for c in contexts if c)
    )


def parse_rule_text(text: str) -> tuple[list[str], list[str]]:
    """(targets, contexts) named by a rule's text: quoted strings before/after ' after ', or content words."""
    parsed = parse_rule(text)
    return [*parsed.targets, *parsed.words], list(parsed.contexts)


def match_rule_text(text: str, tokens: Sequence[str]) -> np.ndarray:
    """(T,) bool: tokens the rule text matches (target token, right after a context token when one is named)."""
    parsed = parse_rule(text)
    keys = [norm(t) for t in tokens]
    tset, wset, cset = set(parsed.targets), set(parsed.words), set(parsed.contexts)
    out = np.zeros(len(keys), dtype=bool)
    for i, k in enumerate(keys):
        if k and (k in tset or k.lower() in wset) and (not cset or (i > 0 and keys[i - 1] in cset)):
            out[i] = True
    return out


@functools.lru_cache(maxsize=4096)
def _rule_codes(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Key codes of a rule text's exact targets, case-folded words and contexts (None: no context named). Codes are
    assigned here when new, so a record seen later with such a token gets the same code."""
    parsed = parse_rule(text)

    def codes(keys: Sequence[str]) -> np.ndarray:
        return np.asarray([key_code(k) for k in keys if k], dtype=np.int64)

    return codes(parsed.targets), codes(parsed.words), (codes(parsed.contexts) if parsed.contexts else None)


def _isin(codes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """codes ∈ wanted; a few comparisons beat np.isin for the one to three tokens a rule usually names."""
    if wanted.size > 8:
        return np.isin(codes, wanted)
    out = np.zeros(codes.shape, dtype=bool)
    for w in wanted.tolist():
        out |= codes == w
    return out


def match_codes(text: str, codes: np.ndarray, folded: np.ndarray, left: np.ndarray) -> np.ndarray:
    """Rule matches over token key codes (exact and case-folded), given each token's left neighbour's exact code (0
    where there is none)."""
    targets, words, contexts = _rule_codes(text)
    hit = _isin(codes, targets)
    if words.size:
        hit |= _isin(folded, words)
    if contexts is not None and hit.any():
        hit &= _isin(left, contexts)
    return hit


def left_codes(codes: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each token's left neighbour's code within its record (0 for the first token of a record)."""
    left = np.zeros_like(codes)
    left[1:] = codes[:-1]
    left[starts[starts < codes.size]] = 0
    return left


def match_rule_record(text: str, record: Record) -> np.ndarray:
    """`match_rule_text` on a record, over its cached token key codes (no per-token string work)."""
    codes = record.key_codes
    return match_codes(text, codes, record.fold_codes, left_codes(codes, np.zeros(1, dtype=np.int64)))


__all__ = [
    "ParsedRule",
    "left_codes",
    "match_codes",
    "match_rule_record",
    "match_rule_text",
    "parse_rule",
    "parse_rule_text",
    "quote_token",
]
