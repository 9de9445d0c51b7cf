"""What the query layer hands to pages: frozen, picklable view records (numpy arrays, plain lists and dicts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sae_workbench.store.rows import (
    EvalRecord,
    ExplanationRecord,
    FeatureStats,
    IndexProgress,
    SAERecord,
    ScoreRecord,
)


@dataclass(frozen=True)
class SAESummary:
    """One SAE of the store with the counts the Overview shows."""

    record: SAERecord
    """The registered SAE (id, model, hook, shape, cfg, metrics)."""
    progress: IndexProgress | None
    """Indexing state (None: never indexed)."""
    n_activation_rows: int
    """Stored sparse activation rows (query table)."""
    n_features_active: int
    """Features with at least one stored activation (rows of feature_stats)."""
    n_dense: int
    """Features whose density exceeds `dense_threshold`."""
    dense_threshold: float
    """Density above which a feature counts as dense."""
    log10_density: np.ndarray
    """(n_features_active,) float64 log10 density of each active feature."""
    n_explanations: int
    """Explanations stored for this SAE."""
    n_scores: int
    """Scores stored for this SAE's explanations."""
    evals: list[EvalRecord]
    """SAE-level evaluations (absorption, core metrics…), oldest first."""

    @property
    def n_dead(self) -> int:
        """Features never active over the indexed tokens."""
        return self.record.d_sae - self.n_features_active


@dataclass(frozen=True)
class ExampleView:
    """A window with one feature's per-token activations, ready to render."""

    window_id: int
    """The window."""
    token_strings: list[str]
    """Per-position display strings (BOS included)."""
    values: np.ndarray
    """(T,) float32 activation of the feature at each position."""
    mask: np.ndarray
    """(T,) bool — True where the position counts (False: BOS/special, shown greyed)."""
    max_value: float
    """The window's peak activation."""
    max_position: int
    """Position of the peak."""
    quantile: int | None = None
    """Quantile bin (0 = highest) for quantile-binned examples."""
    source: str = ""
    """Document the window comes from."""


@dataclass(frozen=True)
class ScoredExplanation:
    """An explanation with all its scores."""

    explanation: ExplanationRecord
    """The explanation and its provenance."""
    scores: list[ScoreRecord]
    """Its scores, oldest first."""


@dataclass(frozen=True)
class NegativeSample:
    """A stored sample of non-activating (or example) windows, with the windows themselves."""

    source: str
    """Sampling source (RANDOM, RANDOM_NEGATIVE, SIMILAR, SIMILAR_NEGATIVE, TOP, …)."""
    seed: int
    """Seed it was drawn with."""
    config: dict[str, Any]
    """Sampling parameters."""
    examples: list[ExampleView]
    """Its windows (with this feature's activations, normally zero)."""


@dataclass(frozen=True)
class FeatureDashboard:
    """Everything the Feature page shows about one feature."""

    sae: SAERecord
    """The SAE."""
    feature: int
    """Feature index."""
    corpus: str
    """Corpus the SAE was indexed over."""
    n_tokens: int
    """Counted tokens indexed (density denominator)."""
    stats: FeatureStats
    """Density, histogram, quantiles, logit lens, neighbours."""
    top: list[ExampleView]
    """Top-activating windows."""
    quantiles: list[ExampleView]
    """Quantile-binned windows (bin 0 = highest)."""
    explanations: list[ScoredExplanation]
    """Every explanation of the feature with its scores."""
    samples: list[NegativeSample]
    """Stored samples (negatives used in scoring and explaining)."""
    absorption: list[dict[str, Any]] = field(default_factory=list)
    """Absorption eval entries mentioning this feature (per-letter main feature or absorber)."""
    absorption_evals: int = 0
    """How many absorption evals the SAE has (0: none run)."""


@dataclass(frozen=True)
class ExplanationHit:
    """A search result: an explanation and its similarity to the query."""

    sae_id: str
    """The SAE."""
    feature: int
    """Feature index."""
    explainer: str
    """Explainer name."""
    text: str
    """The explanation."""
    similarity: float
    """Cosine similarity of the query and the explanation (MiniLM embeddings)."""
    explanation_id: int
    """Explanation row id."""


@dataclass(frozen=True)
class TokenFeatureHit:
    """A feature that fires on a token, aggregated over the token's occurrences in the indexed corpus."""

    feature: int
    """Feature index."""
    n_fires: int
    """Occurrences of the token on which the feature is active."""
    n_occurrences: int
    """Occurrences of the token among indexed windows."""
    mean_value: float
    """Mean activation over the occurrences where it fires."""
    max_value: float
    """Largest activation on the token."""


@dataclass(frozen=True)
class PlaygroundResult:
    """Per-token SAE features for a typed text."""

    token_strings: list[str]
    """Display strings of the tokens (BOS first)."""
    acts_TF: np.ndarray
    """(T, d_sae) float32 feature activations (dense; texts are short)."""
    skip_positions: list[int]
    """Positions not counted (BOS), shown greyed."""
