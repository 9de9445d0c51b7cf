"""Polysemanticity of features, two ways.

- PRISM (Kopf et al. NeurIPS 2025, arXiv 2506.15538): embed a feature's k descriptions; score = mean pairwise cosine
  over pairs i<j (lower = more distinct concepts = more polysemantic). Baseline: the same for k random descriptions
  drawn from other features. The paper reports e.g. GPT-2 small SAE .458 vs .335 random.
- Tree paper (Ma et al. NeurIPS 2025): explain with rule caps r = 1..5; for each r take the best test score over
  caps ≤ r over the best over all caps; polysemanticity = smallest r reaching ≥ 0.9. Features whose best score is
  ≤ 0 or NaN are skipped (None). Per-layer means come with a t confidence interval. `evaluation.reproductions.rule_cap_sweep`
  runs it (`workbench polysemanticity-sweep`): the explain job at each cap, the score job's simulation scorer on
  each explanation's test third, then the measure per feature and the mean over the SAE's features.
- Complexity (tree paper): an LLM rates each rule 0..5 — `evaluation.scorers.complexity` (`workbench score --scorer
  complexity`); `rate_complexity` is re-exported here.

`PolysemanticityScorer` (`workbench score --scorer polysemanticity`) scores every stored PRISM explanation: its
descriptions are `extra["clusters"][i]["description"]`; the random baseline draws from the descriptions of the
other features' explanations in the same run. Both numbers are stored per feature; dead features and
explanations with fewer than two descriptions are recorded with a status.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from sae_workbench.evaluation.scorers.base import (
    Detail,
    ScoreBackends,
    ScoreConfig,
    ScoreOutcome,
    ScorerDefaults,
    TestRecords,
)
from sae_workbench.evaluation.scorers.complexity import COMPLEXITY_PROMPT_VERSION, rate_complexity
from sae_workbench.evaluation.scorers.metrics import MeanCI, t_confidence_interval
from sae_workbench.explainers.prism import cluster_descriptions
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord

__all__ = [
    "COMPLEXITY_PROMPT_VERSION",
    "POLYSEMANTICITY_THRESHOLD",
    "PolysemanticityScorer",
    "PrismPolysemanticity",
    "mean_pairwise_cosine",
    "prism_polysemanticity",
    "rate_complexity",
    "tree_polysemanticity",
    "tree_polysemanticity_summary",
]

# Tree paper: the smallest rule cap whose best score reaches 90% of the best over all caps.
POLYSEMANTICITY_THRESHOLD = 0.9
POLYSEMANTICITY_SCORER_VERSION = "polysemanticity-prism-v1"


def mean_pairwise_cosine(embeddings_KD: np.ndarray) -> float:
    """Mean cosine similarity over pairs i<j of the rows (NaN with fewer than 2 rows)."""
    x = np.asarray(embeddings_KD, dtype=np.float64)
    k = x.shape[0]
    if k < 2:
        return math.nan
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.where(norms == 0, 1.0, norms)
    sims_KK = x @ x.T
    iu = np.triu_indices(k, 1)
    return float(sims_KK[iu].mean())


@dataclass(frozen=True)
class PrismPolysemanticity:
    """PRISM polysemanticity of one feature."""

    similarity: float
    """Mean pairwise cosine of the feature's descriptions (lower = more polysemantic)."""
    random_baseline: float
    """The same for as many random descriptions of other features (mean over `n_draws` draws)."""
    n_descriptions: int
    """Descriptions of the feature."""


def prism_polysemanticity(
    descriptions_KD: np.ndarray, others_ND: np.ndarray, seed: int, n_draws: int = 10
) -> PrismPolysemanticity:
    """Similarity of a feature's description embeddings vs `n_draws` random k-subsets of other features' ones."""
    k = int(np.asarray(descriptions_KD).shape[0])
    sim = mean_pairwise_cosine(descriptions_KD)
    others = np.asarray(others_ND)
    if k < 2 or others.shape[0] < k:
        return PrismPolysemanticity(sim, math.nan, k)
    rng = np.random.default_rng(seed)
    draws = [
        mean_pairwise_cosine(others[rng.choice(others.shape[0], size=k, replace=False)])
        for _ in range(n_draws)
    ]
    return PrismPolysemanticity(sim, float(np.mean(draws)), k)


def tree_polysemanticity(best_score_by_cap: Mapping[int, float]) -> int | None:
    """Smallest rule cap r whose best score over caps ≤ r is ≥ 0.9 × the best over all caps (None: skip feature)."""
    caps = sorted(best_score_by_cap)
    finite = [best_score_by_cap[c] for c in caps if not math.isnan(best_score_by_cap[c])]
    if not finite:
        return None
    best = max(finite)
    if best <= 0:
        return None
    running = -math.inf
    for cap in caps:
        v = best_score_by_cap[cap]
        if not math.isnan(v):
            running = max(running, v)
        if running / best >= POLYSEMANTICITY_THRESHOLD:
            return cap
    return caps[-1]  # unreachable: the cap holding the best score always qualifies


def tree_polysemanticity_summary(values: Sequence[int | None], confidence: float = 0.95) -> MeanCI:
    """Mean polysemanticity with a t CI over the features that were not skipped (tree paper: per layer; ref's
    figure draws 80% CIs, `paper_figs/polysemanticity_figs.py`)."""
    return t_confidence_interval([float(v) for v in values if v is not None], confidence)


class PolysemanticityScorer(ScorerDefaults):
    """PRISM polysemanticity of each PRISM explanation: its descriptions' mean pairwise cosine, next to the same for
    as many random descriptions of other features (the pool: every description of the run's explanations)."""

    name: ClassVar[str] = "polysemanticity"
    version: ClassVar[str] = POLYSEMANTICITY_SCORER_VERSION
    headline: ClassVar[str] = "similarity"
    default_explainers: ClassVar[tuple[str, ...]] = ("prism",)
    uses_test_set: ClassVar[bool] = False
    uses_negatives: ClassVar[bool] = False

    def __init__(self, embed: Callable[[list[str]], np.ndarray], embedding_model: str, seed: int = 0,
                 n_draws: int = 10) -> None:  # fmt: skip
        """Embed descriptions with `embed` (recorded as `embedding_model`); `seed` draws the random baseline."""
        self.embed = embed
        self.embedding_model = embedding_model
        self.seed = seed
        self.n_draws = n_draws
        self._vectors = np.zeros((0, 0))
        self._row_of: dict[str, int] = {}
        self._pool_rows = np.zeros(0, np.int64)
        self._pool_feature = np.zeros(0, np.int64)

    @classmethod
    def from_backends(cls, config: ScoreConfig, backends: ScoreBackends) -> PolysemanticityScorer:
        """The backends' embedder (all-MiniLM-L6-v2 by default; `workbench score --embedding-model` names another,
        e.g. the paper's gte-Qwen2-1.5B-instruct)."""
        embed = backends.embed()
        return cls(lambda texts: np.asarray(embed(texts)), backends.embedder_name(), config.seed)

    def backend(self) -> str:
        """The embedding model."""
        return self.embedding_model

    def key_params(self) -> dict[str, Any]:
        """The baseline's draws."""
        return {"seed": self.seed, "n_draws": self.n_draws}

    async def prepare(self, explanations: Sequence[ExplanationRecord]) -> None:
        """Embed every description of the run's explanations once (the baseline pool)."""
        rows = [(e.feature, cluster_descriptions(e.extra)) for e in explanations]
        unique = sorted({d for _, ds in rows for d in ds})
        self._vectors = np.asarray(self.embed(unique), dtype=np.float64) if unique else np.zeros((0, 0))
        self._row_of = {d: i for i, d in enumerate(unique)}
        self._pool_rows = np.array([self._row_of[d] for _, ds in rows for d in ds], np.int64)
        self._pool_feature = np.array([f for f, ds in rows for _ in ds], np.int64)

    async def score(self, explanation: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
        """Similarity of the explanation's descriptions vs the random baseline."""
        descs = cluster_descriptions(explanation.extra)
        if len(descs) < 2:
            return ScoreOutcome.failed(Status.TOO_FEW_DESCRIPTIONS, n_descriptions=len(descs))
        others = self._pool_feature != explanation.feature
        pool = self._pool_rows[others]
        own = self._vectors[[self._row_of[d] for d in descs]]
        result = prism_polysemanticity(own, self._vectors[pool], self.seed, self.n_draws)
        metrics = {
            "similarity": result.similarity,
            "random_baseline": result.random_baseline,  # NaN (stored as null) without other features' descriptions
            "n_descriptions": result.n_descriptions,
            "baseline_pool_descriptions": len(pool),
            "baseline_pool_features": len(np.unique(self._pool_feature[others])),
        }
        # The embedder of this score, and the one PRISM clustered the explanation's texts with (the reference uses
        # gte-Qwen2-1.5B-instruct for both).
        details: dict[str, Detail] = {
            "embedding_model": self.embedding_model,
            "explanation_embedding_model": explanation.extra.get("embedding_model"),
        }
        return ScoreOutcome(Status.OK, metrics, self.headline, details)
