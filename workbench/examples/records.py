"""Records: a short token window with one feature's activation on every token (tree paper, Ma et al. 2025).

A record drops the window's BOS position, as the paper does ("100k windows of 32 tokens, BOS dropped"). Activations
shown to an LLM are discretised as floor(5·x / global max) clipped to 0..5 (the paper's display scale).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Display scale of the tree paper and of OpenAI's automated-interpretability: integer activations 0..5.
MAX_LEVEL = 5


def norm(token: str) -> str:
    """Matching form of a token: surrounding whitespace stripped, case kept; a whitespace-only token stays as it is.

    Case is kept because it matters in code (`None`, `True`, `self`): a quoted rule token matches exactly (see
    `examples.rule_language`). Stripping merges the with- and without-space variants of a word (" York", "York"). A
    whitespace-only token ("\n", "    ") keeps its characters, so a feature firing on newlines or indentation can
    be named.
    """
    return token.strip() or token


def fold(token: str) -> str:
    """Case-insensitive matching form of a token (`norm`, lower-cased): for unquoted words of free text."""
    return norm(token).lower()


# Every normalised token string seen in this process gets a small integer (0 is the empty string), so rules match and
# statistics count over integer arrays. Bounded by the tokenizer's vocabulary.
_KEY_CODES: dict[str, int] = {"": 0}
_KEY_WORDS: list[str] = [""]


_KEY_LOCK = threading.Lock()


def key_code(key: str) -> int:
    """The integer of a normalised token string (assigned on first sight; thread-safe)."""
    code = _KEY_CODES.get(key)
    if code is None:
        with _KEY_LOCK:
            code = _KEY_CODES.get(key)
            if code is None:
                _KEY_WORDS.append(key)
                code = _KEY_CODES[key] = len(_KEY_WORDS) - 1
    return code


def known_key_code(key: str) -> int | None:
    """The integer of a normalised token string, or None if no record has had it."""
    return _KEY_CODES.get(key)


def key_word(code: int) -> str:
    """The normalised token string of an integer from `key_code`."""
    return _KEY_WORDS[code]


def n_key_codes() -> int:
    """How many key codes exist so far (codes are 0 … n−1)."""
    return len(_KEY_WORDS)


@dataclass(frozen=True)
class Record:
    """One window's tokens and the feature's per-token activations (BOS dropped)."""

    window_id: int
    """The store's window id this record was cut from."""
    tokens: tuple[str, ...]
    """Per-token display strings, in order (T of them)."""
    acts: np.ndarray
    """(T,) float32 activations of the feature on each token (0 where inactive)."""

    def __post_init__(self) -> None:
        """Check that tokens and activations line up."""
        if len(self.tokens) != int(self.acts.shape[0]):
            raise ValueError(
                f"record {self.window_id}: {len(self.tokens)} tokens but {self.acts.shape[0]} activations"
            )

    @property
    def max_act(self) -> float:
        """The record's score: its maximum activation (paper: window score = max activation)."""
        return float(self.acts.max()) if self.acts.size else 0.0

    def __len__(self) -> int:
        """Number of tokens."""
        return len(self.tokens)

    @functools.cached_property
    def tokens_json(self) -> str:
        """The tokens as a JSON array (non-ASCII kept), as simulation prompts show them (built once per record)."""
        return json.dumps(list(self.tokens), ensure_ascii=False)

    @functools.cached_property
    def key_codes(self) -> np.ndarray:
        """(T,) int64 `key_code` of each token's normalised form (computed once per record)."""
        return np.fromiter((key_code(norm(t)) for t in self.tokens), dtype=np.int64, count=len(self.tokens))

    @functools.cached_property
    def fold_codes(self) -> np.ndarray:
        """(T,) int64 `key_code` of each token's case-folded form (`fold`; computed once per record)."""
        return np.fromiter((key_code(fold(t)) for t in self.tokens), dtype=np.int64, count=len(self.tokens))


def discretise(acts: np.ndarray, global_max: float) -> np.ndarray:
    """floor(5·x / global_max) clipped to 0..5, as int64 (all zeros when global_max ≤ 0)."""
    if global_max <= 0:
        return np.zeros(acts.shape, dtype=np.int64)
    return np.clip(np.floor(MAX_LEVEL * acts / global_max), 0, MAX_LEVEL).astype(np.int64)


def global_max_of(records: Sequence[Record]) -> float:
    """The largest activation over a set of records (0.0 for none)."""
    return max((r.max_act for r in records), default=0.0)


def crop_record(record: Record, length: int | None, lead: int = 8) -> Record:
    """Cut a record to `length` tokens that contain its peak, keeping as much left context as possible.

    Activations depend only on earlier tokens, so the crop ends `lead` tokens after the peak (or at the record's
    end) and keeps the left context. `length=None` returns the record unchanged.
    """
    n = len(record)
    if length is None or n <= length:
        return record
    start = crop_start(record.acts, length, lead)
    end = start + length
    return Record(record.window_id, record.tokens[start:end], record.acts[start:end].copy())


def crop_start(acts: np.ndarray, length: int | None, lead: int = 8) -> int:
    """Where `crop_record` starts the crop of a record with these per-token activations (0: its first tokens)."""
    n = len(acts)
    if length is None or n <= length:
        return 0
    peak = int(np.argmax(acts)) if n and float(acts.max()) > 0 else 0
    return min(n, max(length, peak + 1 + lead)) - length


def make_record(
    window_id: int,
    token_strings: Sequence[str],
    positions: Sequence[int] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    mask: Sequence[bool] | np.ndarray | None = None,
    drop_bos: bool = True,
) -> Record:
    """Build a record from a window's token strings and the feature's sparse (position, value) activations.

    Positions index the full window (BOS at 0). Positions whose mask is False (padding, BOS) are dropped, as is
    position 0 when `drop_bos`.
    """
    n = len(token_strings)
    acts = np.zeros(n, dtype=np.float32)
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size:
        acts[pos] = np.asarray(values, dtype=np.float32)
    keep = np.ones(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).copy()
    if drop_bos and n:
        keep[0] = False
    idx = np.flatnonzero(keep)
    return Record(int(window_id), tuple(token_strings[int(i)] for i in idx), acts[idx])


def format_record(record: Record, global_max: float) -> str:
    """Render a record as token<TAB>value lines, values discretised to 0..5 (tree paper's prompt format)."""
    levels = discretise(record.acts, global_max)
    return "\n".join(f"{tok}\t{int(v)}" for tok, v in zip(record.tokens, levels, strict=True))


def format_record_nonzero(record: Record, global_max: float) -> str:
    """Only the token<TAB>value lines whose discretised value is non-zero."""
    levels = discretise(record.acts, global_max)
    return "\n".join(f"{tok}\t{int(v)}" for tok, v in zip(record.tokens, levels, strict=True) if v > 0)


def nonzero_fraction(records: Sequence[Record], global_max: float) -> float:
    """Fraction of all tokens whose discretised value is non-zero."""
    total = sum(len(r) for r in records)
    if total == 0:
        return 0.0
    return sum(int(np.count_nonzero(discretise(r.acts, global_max))) for r in records) / total
