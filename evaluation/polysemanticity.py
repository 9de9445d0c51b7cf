"""Polysemanticity of features, two ways.

- PRISM (Kopf et al. NeurIPS 2025, arXiv 2506.15538): embed a feature's k descriptions; score = mean pairwise cosine
  over pairs i<j (lower = more distinct concepts = more polysemantic). Baseline: the same for k random descriptions
  drawn from other features. The paper reports e.g. GPT-2 small SAE .458 vs .335 random.
- Tree paper (Ma et al. NeurIPS 2025): explain with rule caps r = 1..5; for each r take the best test score over
  caps ≤ r over the best over all caps; polysemanticity = smallest r reaching ≥ 0.9. Features whose best score is
  ≤ 0 or NaN are skipped (None). Per-layer means come with a t confidence interval.
- Complexity (tree paper): an LLM rates each rule 0..5 — `evaluation.complexity` (`workbench score --scorer
  complexity`); `rate_complexity` is re-exported here.

`run_prism_polysemanticity` (`workbench score --scorer polysemanticity`) scores every stored PRISM explanation: its
descriptions are `extra["clusters"][i]["description"]`; the random baseline draws from the descriptions of the
other features' explanations of the same explainer. Both numbers are stored per feature; dead features and
explanations with fewer than two descriptions are recorded with a status.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sae_workbench.evaluation.complexity import COMPLEXITY_PROMPT_VERSION, rate_complexity
from sae_workbench.evaluation.results import ScoreJobResult
from sae_workbench.evaluation.scoring import MeanCI, t_confidence_interval
from sae_workbench.explainers.prism import cluster_descriptions
from sae_workbench.store import ScoreRecord, Store

__all__ = [
    "COMPLEXITY_PROMPT_VERSION",
    "POLYSEMANTICITY_THRESHOLD",
    "PrismPolysemanticity",
    "mean_pairwise_cosine",
    "prism_polysemanticity",
    "rate_complexity",
    "run_prism_polysemanticity",
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


def tree_polysemanticity_summary(values: Sequence[int | None]) -> MeanCI:
    """Mean polysemanticity with a 95% t CI over the features that were not skipped (tree paper: per layer)."""
    return t_confidence_interval([float(v) for v in values if v is not None])


def _prism_key(explanation_id: int, seed: int, n_draws: int, embedding_model: str) -> str:
    """Score key of one explanation's PRISM polysemanticity (resumable runs skip it)."""
    payload = {"explanation_id": explanation_id, "version": POLYSEMANTICITY_SCORER_VERSION, "seed": seed,
               "n_draws": n_draws, "embedding_model": embedding_model}  # fmt: skip
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def run_prism_polysemanticity(
    store: Store,
    sae_id: str,
    embed: Callable[[list[str]], np.ndarray],
    *,
    embedding_model: str,
    explainer: str | None = "prism",
    features: Sequence[int] | None = None,
    seed: int = 0,
    n_draws: int = 10,
    progress: bool = True,
) -> ScoreJobResult:
    """Store PRISM polysemanticity (descriptions' mean pairwise cosine and its random baseline) per explanation.

    Only explanations that carry clusters (PRISM) are scored; `explainer=None` means "prism". The baseline pool is
    every description of the other features' explanations by the same explainer.
    """
    t0 = time.perf_counter()
    rows = [e for e in store.explanations(sae_id=sae_id, explainer=explainer or "prism") if e.id is not None]
    wanted = None if features is None else {int(f) for f in features}
    done = {
        str(s.provenance.get("score_key"))
        for s in store.scores(sae_id=sae_id, scorer="polysemanticity")
        if s.provenance.get("score_key")
    }
    todo = [e for e in rows if wanted is None or e.feature in wanted]
    pending = [e for e in todo if _prism_key(int(e.id or 0), seed, n_draws, embedding_model) not in done]
    descriptions = {int(e.id or 0): cluster_descriptions(e.extra) for e in rows}
    unique = sorted({d for ds in descriptions.values() for d in ds}) if pending else []
    vectors = np.asarray(embed(unique), dtype=np.float64) if unique else np.zeros((0, 0))
    row_of = {d: i for i, d in enumerate(unique)}
    # Baseline pool as arrays: the embedding row and the feature of every stored description.
    pool_rows = np.array(
        [row_of[d] for e in rows for d in descriptions[int(e.id or 0)]] if unique else [], int
    )
    pool_feature = np.array(
        [e.feature for e in rows for _ in descriptions[int(e.id or 0)]] if unique else [], int
    )
    scored = failed = dead = 0
    for e in tqdm(pending, desc="score polysemanticity", disable=not progress):
        started = time.perf_counter()
        eid = int(e.id or 0)
        descs = descriptions[eid]
        pool = pool_rows[pool_feature != e.feature]
        if e.extra.get("status") == "dead":
            metrics: dict[str, Any] = {"status": "dead", "reason": str(e.extra.get("reason", "dead feature"))}
            dead += 1
        elif len(descs) < 2:
            metrics = {"status": "too_few_descriptions", "n_descriptions": len(descs)}
            failed += 1
        else:
            result = prism_polysemanticity(vectors[[row_of[d] for d in descs]], vectors[pool], seed, n_draws)
            baseline = None if math.isnan(result.random_baseline) else result.random_baseline
            metrics = {
                "status": "ok",
                "similarity": result.similarity,
                "random_baseline": baseline,
                "n_descriptions": result.n_descriptions,
            }
            scored += 1
        store.add_score(
            ScoreRecord(
                explanation_id=eid,
                scorer="polysemanticity",
                scorer_version=POLYSEMANTICITY_SCORER_VERSION,
                negative_source="",
                metrics=metrics,
                provenance={
                    "score_key": _prism_key(eid, seed, n_draws, embedding_model),
                    "method": "prism",
                    "backend": embedding_model,
                    "embedding_model": embedding_model,
                    "seed": seed,
                    "n_draws": n_draws,
                    "baseline_pool_descriptions": len(pool),
                    "baseline_pool_features": len(np.unique(pool_feature[pool_feature != e.feature])),
                    "seconds": time.perf_counter() - started,
                },
            )
        )
    skipped = len(todo) - len(pending)
    return ScoreJobResult(scored, skipped, failed, time.perf_counter() - t0, dead)
