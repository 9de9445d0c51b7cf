"""Polysemanticity of features, two ways.

- PRISM (Kopf et al. NeurIPS 2025, arXiv 2506.15538): embed a feature's k descriptions; score = mean pairwise cosine
  over pairs i<j (lower = more distinct concepts = more polysemantic). Baseline: the same for k random descriptions
  drawn from other features. The paper reports e.g. GPT-2 small SAE .458 vs .335 random.
- Tree paper (Ma et al. NeurIPS 2025): explain with rule caps r = 1..5; for each r take the best test score over
  caps ≤ r over the best over all caps; polysemanticity = smallest r reaching ≥ 0.9. Features whose best score is
  ≤ 0 or NaN are skipped (None). Per-layer means come with a t confidence interval.
- Complexity (tree paper): an LLM rates each rule 0..5 (`rate_complexity`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evaluation.prompts.complexity import COMPLEXITY_PROMPT_VERSION, complexity_messages
from evaluation.scoring import MeanCI, t_confidence_interval
from explainers.jsonparse import as_int_list, parse_json_strict
from explainers.llm import LLMClient, LLMRequest

__all__ = [
    "COMPLEXITY_PROMPT_VERSION",
    "POLYSEMANTICITY_THRESHOLD",
    "PrismPolysemanticity",
    "mean_pairwise_cosine",
    "prism_polysemanticity",
    "rate_complexity",
    "tree_polysemanticity",
    "tree_polysemanticity_summary",
]

# Tree paper: the smallest rule cap whose best score reaches 90% of the best over all caps.
POLYSEMANTICITY_THRESHOLD = 0.9


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


def tree_polysemanticity_summary(values: Sequence[int | None]) -> MeanCI:
    """Mean polysemanticity with a 95% t CI over the features that were not skipped (tree paper: per layer)."""
    return t_confidence_interval([float(v) for v in values if v is not None])


def _parse_ratings(n: int):
    """A parser accepting exactly `n` integers in 0..5 (ValueError → re-ask)."""

    def parse(text: str) -> list[int]:
        return as_int_list(parse_json_strict(text), length=n, lo=0, hi=5)

    return parse


async def rate_complexity(client: LLMClient, rules: Sequence[str], tag: str = "complexity") -> list[int]:
    """An LLM's 0..5 complexity rating of each rule (tree paper)."""
    if not rules:
        return []
    parsed = await client.complete_parsed(
        LLMRequest(complexity_messages(rules), tag=tag), _parse_ratings(len(rules))
    )
    return parsed.value
