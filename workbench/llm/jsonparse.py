"""Strict JSON extraction from LLM answers.

An LLM answer is accepted only when it holds well-formed JSON where the caller expects it; anything else raises
`JSONParseError` (a `ValueError`), whose message is short and specific enough to send back to the model in a re-ask.
Nothing here guesses: no trailing-comma repair, no single quotes, no NaN/Infinity.

    >>> extract_json('IMPROVEMENT: add a rule\\nNEW EXPLANATION: [{"activates_on": "dog", "strength": 5}]',
    ...              after="NEW EXPLANATION:")
    [{'activates_on': 'dog', 'strength': 5}]
"""

from __future__ import annotations

import json
import re
from typing import Any

from sae_workbench.errors import WorkbenchError

JSONValue = dict[str, Any] | list[Any] | str | int | float | bool | None

# One fenced block: ```json ... ``` or ``` ... ``` (models wrap JSON in fences even when told not to).
_FENCE_RE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(?P<body>.*?)\n?```$", re.DOTALL)


class JSONParseError(WorkbenchError, ValueError):
    """An LLM answer did not contain the JSON the caller asked for; the message says what was wrong."""


def _reject_constant(name: str) -> Any:
    """Refuse NaN/Infinity, which Python's json accepts but JSON does not."""
    raise JSONParseError(f"{name} is not valid JSON; use a number")


def _loads(text: str) -> JSONValue:
    """Parse a complete JSON document, raising JSONParseError with the position of the problem."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise JSONParseError(f"invalid JSON: {err.msg} at line {err.lineno} column {err.colno}") from None


def strip_fence(text: str) -> str:
    """Remove surrounding whitespace and one enclosing Markdown code fence, if any."""
    stripped = text.strip()
    match = _FENCE_RE.match(stripped)
    return match.group("body").strip() if match else stripped


def parse_json_strict(text: str) -> JSONValue:
    """Parse an answer that must be exactly one JSON document (optionally inside one code fence)."""
    body = strip_fence(text)
    if not body:
        raise JSONParseError("the answer is empty; reply with JSON only")
    return _loads(body)


def extract_json(text: str, *, after: str | None = None) -> JSONValue:
    """Return the first JSON object or array in `text` (after the marker `after`, if given).

    Raises JSONParseError when the marker is missing, when no object/array starts there, or when the first
    '{' or '[' after the marker does not begin a well-formed JSON value.
    """
    start = 0
    if after is not None:
        idx = text.find(after)
        if idx < 0:
            raise JSONParseError(f"the answer has no {after!r} marker")
        start = idx + len(after)
    rest = strip_fence(text[start:])
    match = re.search(r"[\[{]", rest)
    if match is None:
        raise JSONParseError("no JSON object or array found in the answer")
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    try:
        value, _end = decoder.raw_decode(rest, match.start())
    except json.JSONDecodeError as err:
        raise JSONParseError(f"invalid JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    return value


def as_object(value: JSONValue, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Check that a parsed value is a JSON object holding every key in `required`."""
    if not isinstance(value, dict):
        raise JSONParseError(f"expected a JSON object, got {type(value).__name__}")
    missing = [k for k in required if k not in value]
    if missing:
        raise JSONParseError(f"the JSON object is missing key(s): {', '.join(missing)}")
    return value


def as_list(value: JSONValue, *, length: int | None = None) -> list[Any]:
    """Check that a parsed value is a JSON array (of exactly `length` items when given)."""
    if not isinstance(value, list):
        raise JSONParseError(f"expected a JSON array, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise JSONParseError(f"expected exactly {length} items, got {len(value)}")
    return value


def as_int_list(
    value: JSONValue, *, length: int | None = None, lo: int | None = None, hi: int | None = None
) -> list[int]:
    """Check that a parsed value is an array of integers, optionally of a given length and within [lo, hi]."""
    items = as_list(value, length=length)
    # Fast path for well-formed answers (`type(...) is int` excludes bool); the loop below names the bad item.
    if all(type(x) is int for x in items) and (
        not items or ((lo is None or min(items) >= lo) and (hi is None or max(items) <= hi))
    ):
        return list(items)
    out: list[int] = []
    for i, item in enumerate(items):
        # bool is an int subclass in Python but not an integer answer.
        if isinstance(item, bool) or not isinstance(item, int):
            raise JSONParseError(f"item {i} is {item!r}, expected an integer")
        if (lo is not None and item < lo) or (hi is not None and item > hi):
            raise JSONParseError(f"item {i} is {item}, expected an integer in [{lo}, {hi}]")
        out.append(item)
    return out


def as_str_list(value: JSONValue, *, length: int | None = None) -> list[str]:
    """Check that a parsed value is an array of strings (of exactly `length` items when given)."""
    items = as_list(value, length=length)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise JSONParseError(f"item {i} is {item!r}, expected a string")
    return [str(x) for x in items]
