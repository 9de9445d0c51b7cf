"""Embedding scorer (delphi's embedding scorer, Paulo et al. 2024): rank activating vs non-activating windows by the
cosine similarity of their text to the explanation; the score is the AUROC (0.5 = chance, 1 = every activating
window ranks above every non-activating one). Offline default embedder: all-MiniLM-L6-v2.

    auc = embedding_auroc(embed_texts, "Python function definitions", positive_texts, negative_texts)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sae_workbench.evaluation.scoring import auroc

EMBEDDING_SCORER_VERSION = "embedding-v1"

# Maps texts to (N, D) embeddings (normalised or not: similarities are cosines either way).
Embedder = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class EmbeddingScore:
    """Embedding-scorer metrics of one explanation."""

    auroc: float
    """AUROC of similarity-to-explanation for positives (1) vs negatives (0); higher is better."""
    mean_similarity_positive: float
    """Mean cosine of the positive windows to the explanation."""
    mean_similarity_negative: float
    """Mean cosine of the negative windows to the explanation."""
    n_positive: int
    """Positive windows."""
    n_negative: int
    """Negative windows."""

    def to_dict(self) -> dict[str, float | int]:
        """Plain dict for the store's metrics JSON."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _normalise(x_ND: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    x = np.asarray(x_ND, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def embedding_score(
    explanation_D: np.ndarray, positives_ND: np.ndarray, negatives_MD: np.ndarray
) -> EmbeddingScore:
    """Pure scoring from precomputed embeddings."""
    q = _normalise(np.asarray(explanation_D).reshape(1, -1))[0]
    sim_pos = _normalise(positives_ND) @ q if len(positives_ND) else np.zeros(0)
    sim_neg = _normalise(negatives_MD) @ q if len(negatives_MD) else np.zeros(0)
    labels = np.r_[np.ones(len(sim_pos), dtype=bool), np.zeros(len(sim_neg), dtype=bool)]
    return EmbeddingScore(
        auroc=auroc(np.r_[sim_pos, sim_neg], labels),
        mean_similarity_positive=float(sim_pos.mean()) if len(sim_pos) else float("nan"),
        mean_similarity_negative=float(sim_neg.mean()) if len(sim_neg) else float("nan"),
        n_positive=len(sim_pos),
        n_negative=len(sim_neg),
    )


def embedding_auroc(
    embed: Embedder, explanation: str, positive_texts: Sequence[str], negative_texts: Sequence[str]
) -> EmbeddingScore:
    """Embed the explanation and the windows' texts with `embed`, then score."""
    vectors = embed([explanation, *positive_texts, *negative_texts])
    n_pos = len(positive_texts)
    return embedding_score(vectors[0], vectors[1 : 1 + n_pos], vectors[1 + n_pos :])


def default_embedder() -> Embedder:
    """The workbench's window embedder (all-MiniLM-L6-v2, offline), as used for close negatives."""
    from sae_workbench.embeddings import embed_texts

    return embed_texts
