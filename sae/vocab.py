"""Display strings of a tokenizer's vocabulary (token id → its decoded text), decoded once per tokenizer: the
windows' token strings and the logit-lens tokens both read them."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

# Vocabulary display strings are computed once per tokenizer (id → decoded single token). Keyed by the tokenizer
# object itself, weakly: an entry goes when its tokenizer does, so a new tokenizer never reuses a dead one's id().
_VOCAB_STRINGS: weakref.WeakKeyDictionary[Any, np.ndarray] = weakref.WeakKeyDictionary()


def vocab_strings(tokenizer: Any) -> np.ndarray:
    """Display string of every token id (object array), decoded once per tokenizer."""
    strings = _VOCAB_STRINGS.get(tokenizer)
    if strings is None or len(strings) != len(tokenizer):  # added tokens change the vocabulary
        strings = np.array(tokenizer.batch_decode([[i] for i in range(len(tokenizer))]), dtype=object)
        _VOCAB_STRINGS[tokenizer] = strings
    return strings
