"""Embedding scorer (delphi's embedding scorer, Paulo et al. 2024): rank activating vs non-activating windows by the
cosine similarity of their text to the explanation; the score is the AUROC (0.5 = chance, 1 = every activating
window ranks above every non-activating one). Offline default embedder: all-MiniLM-L6-v2.

What is embedded is a crop of `EMBED_CROP` tokens either side of each record's peak activation (a record that does
not fire: around its middle), not the whole record: a whole window is mostly context the feature ignores, and on a
planted keyword feature under close negatives the whole-window AUROC of the correct explanation fell below chance
(0.12-0.22 on 31-token records) while the crop gave 0.92 (README, "Embedding scorer").

Circularity: close negatives (SIMILAR, SIMILAR_NEGATIVE) are ranked with the same all-MiniLM-L6-v2 that scores here
(no second offline embedder is available); such scores are marked circular.

    auc = embedding_auroc(embed_texts, "Python function definitions", positive_texts, negative_texts)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from sae_workbench.evaluation.scorers.base import (
    Embedder,
    ScoreBackends,
    ScoreConfig,
    ScoreOutcome,
    ScorerDefaults,
    TestRecords,
)
from sae_workbench.evaluation.scorers.metrics import auroc
from sae_workbench.evaluation.scorers.simulation import scorable_explanation
from sae_workbench.examples.records import Record
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord

EMBEDDING_SCORER_VERSION = "embedding-v2"
EMBED_CROP = 4
"""Tokens either side of a record's peak activation that are embedded (a 9-token crop)."""


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


def record_crop(record: Record, crop: int | None = EMBED_CROP) -> str:
    """The record's text within `crop` tokens of its peak activation (the middle if it never fires); whole if None."""
    if crop is None:
        return "".join(record.tokens)
    centre = int(np.argmax(record.acts)) if record.max_act > 0 else len(record.tokens) // 2
    return "".join(record.tokens[max(0, centre - crop) : centre + crop + 1])


def default_embedder() -> Embedder:
    """The workbench's window embedder (all-MiniLM-L6-v2, offline), as used for close negatives."""
    from sae_workbench.embeddings import embed_texts

    return embed_texts


class EmbeddingScorer(ScorerDefaults):
    """AUROC of the test windows' embedding similarity to the explanation, positives vs negatives."""

    name: ClassVar[str] = "embedding"
    version: ClassVar[str] = EMBEDDING_SCORER_VERSION
    headline: ClassVar[str] = "auroc"
    uses_test_set: ClassVar[bool] = True
    uses_negatives: ClassVar[bool] = True
    needs_negatives: ClassVar[bool] = True  # AUROC needs both classes

    def __init__(self, embed: Embedder, embedder_name: str, crop: int | None = EMBED_CROP) -> None:
        """Embed with `embed` (recorded as `embedder_name`) each record's `crop` around its peak (None: whole)."""
        self.embed = embed
        self.embedder_name = embedder_name
        self.crop = crop

    def key_params(self) -> dict[str, Any]:
        """The crop width embedded."""
        return {"embed_crop": self.crop}

    @classmethod
    def from_backends(cls, config: ScoreConfig, backends: ScoreBackends) -> EmbeddingScorer:
        """The backends' (memoised) embedder."""
        name = backends.embedder_name()  # before embed(): it memoises the default as an unnamed function
        return cls(backends.embed(), name)

    def backend(self) -> str:
        """The embedding model."""
        return self.embedder_name

    async def score(self, explanation: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
        """Embed the explanation and the test windows' texts, then score."""
        assert tests is not None
        scorable = scorable_explanation(explanation.text, explanation.rules)
        pos = [record_crop(r, self.crop) for r in tests.positives]
        neg = [record_crop(r, self.crop) for r in tests.negatives]
        result = embedding_auroc(self.embed, scorable.text, pos, neg)
        metrics = dict(result.to_dict())
        # Circular (issue 33 item 4): close negatives were ranked by this same embedding model, so it is judged on
        # negatives it chose as closest to the positives. Recorded per score and shown by the report.
        picked_by = str(tests.provenance.get("embedding_model") or "")
        metrics["circular"] = float(
            bool(picked_by) and picked_by.split("/")[-1] == self.embedder_name.split("/")[-1]
        )
        return ScoreOutcome(Status.OK, metrics, self.headline)
