"""Typed rows the store returns and accepts (frozen dataclasses; arrays are numpy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from sae_workbench.status import Status


@dataclass(frozen=True)
class SAERecord:
    """A registered SAE."""

    sae_id: str
    """Content hash of the SAE's weights + hook + model name (sae.io.compute_sae_id)."""
    model: str
    """Subject model name as given to workbench.models.load_model."""
    hook: str
    """TransformerLens hook the SAE reads, e.g. blocks.3.hook_resid_post."""
    d_in: int
    """Input width (the hook's d_model)."""
    d_sae: int
    """Number of features."""
    cfg: dict[str, Any]
    """The SAE's config (sae-lens cfg dict plus where it was loaded from)."""
    metrics: dict[str, Any]
    """Quality metrics (explained variance, L0, dead fraction, …)."""
    created_at: datetime
    """When it was registered."""


@dataclass(frozen=True)
class Window:
    """A token window of a corpus."""

    corpus: str
    """Corpus name (Corpus.name)."""
    window_id: int
    """Position of the window in the corpus's deterministic window sequence."""
    tokens: np.ndarray
    """(T,) int32 token ids; position 0 is BOS."""
    text: str
    """Decoded text without BOS."""
    token_strings: list[str]
    """Per-token display strings, one per position (BOS included)."""
    source: str
    """Document the window starts in."""
    offset: int
    """Token offset of the first text token inside that document."""
    mask: np.ndarray
    """(T,) bool — True where the position counts for statistics."""


@dataclass(frozen=True)
class IndexProgress:
    """How far indexing an SAE over a corpus has got."""

    sae_id: str
    """The SAE."""
    corpus: str
    """Corpus indexed."""
    context_size: int
    """Tokens per window (BOS included)."""
    top_k: int | None
    """Features kept per token (None: every non-zero)."""
    next_window: int
    """First window id not yet indexed; windows [0, next_window) are done."""
    n_tokens: int
    """Counted (mask True) tokens indexed so far — the density denominator."""
    finalized: bool
    """Whether staged activations were sorted into the query table and statistics computed."""
    config: dict[str, Any]
    """Indexing settings (model, hook, batch size, BOS id, mask policy…)."""


@dataclass(frozen=True)
class FeatureStats:
    """Dashboard statistics of one feature."""

    sae_id: str
    """The SAE."""
    feature: int
    """Feature index."""
    n_active: int
    """Counted tokens where the feature is stored as active."""
    n_windows_active: int
    """Windows with at least one active token."""
    density: float
    """n_active / counted tokens indexed."""
    max_value: float
    """Largest activation."""
    mean_value: float
    """Mean activation over active tokens."""
    quantile_levels: list[float]
    """Levels of `quantiles` (e.g. 0.1 … 0.99)."""
    quantiles: list[float]
    """Activation quantiles over active tokens at `quantile_levels`."""
    hist_edges: list[float]
    """Histogram bin edges (n_bins + 1) over [0, max]."""
    hist_counts: list[int]
    """Active tokens per bin."""
    logit_top_tokens: list[str] = field(default_factory=list[str])
    """Tokens the decoder row promotes most (decoder row × unembedding)."""
    logit_top_values: list[float] = field(default_factory=list[float])
    """Their logit-lens values."""
    logit_bottom_tokens: list[str] = field(default_factory=list[str])
    """Tokens it suppresses most."""
    logit_bottom_values: list[float] = field(default_factory=list[float])
    """Their logit-lens values."""
    decoder_neighbours: list[int] = field(default_factory=list[int])
    """Features with the most similar decoder direction."""
    decoder_cosines: list[float] = field(default_factory=list[float])
    """Their cosine similarities."""
    cooc_neighbours: list[int] = field(default_factory=list[int])
    """Features most often active on the same tokens."""
    cooc_jaccard: list[float] = field(default_factory=list[float])
    """Their Jaccard indices over active tokens."""


@dataclass(frozen=True)
class Example:
    """A window where a feature is active, summarised by its peak."""

    window_id: int
    """The window."""
    max_value: float
    """Largest activation of the feature in the window."""
    max_position: int
    """Position of that activation."""
    quantile: int | None = None
    """Quantile bin (0 = highest activations) for quantile samples; None otherwise."""


@dataclass(frozen=True)
class WindowMaxima:
    """Per-window maximum activation of one feature, over windows where it is active."""

    window_ids: np.ndarray
    """(N,) int64."""
    values: np.ndarray
    """(N,) float32, same order."""
    positions: np.ndarray
    """(N,) int64 — position of each window's maximum."""

    def by_peak(self) -> np.ndarray:
        """Indices ordered by maximum, highest first (ties by window id)."""
        return np.lexsort((self.window_ids, -self.values))

    def top(self, k: int) -> list[Example]:
        """The `k` windows with the highest maximum (ties by window id): Store.top_examples without a query."""
        order = self.by_peak()[: max(k, 0)]
        return [
            Example(int(self.window_ids[i]), float(self.values[i]), int(self.positions[i])) for i in order
        ]


@dataclass(frozen=True)
class Sample:
    """A stored list of window ids drawn for one feature (examples or negatives), with how it was drawn."""

    sae_id: str
    """The SAE."""
    feature: int
    """Feature index."""
    source: str
    """TOP, QUANTILE, RANDOM_EXAMPLE, RANDOM, RANDOM_NEGATIVE, SIMILAR, SIMILAR_NEGATIVE."""
    seed: int
    """Seed it was drawn with (reproduces it exactly)."""
    config: dict[str, Any]
    """Sampling parameters (k, threshold, reference size, embedding model…)."""
    window_ids: list[int]
    """The windows, in sampling order."""
    id: int | None = None
    """Row id once stored."""


@dataclass(frozen=True)
class ExplanationRecord:
    """One explanation of one feature, with full provenance."""

    sae_id: str
    """The SAE."""
    feature: int
    """Feature index."""
    explainer: str
    """Explainer name (lexical, oneshot, tree, prism)."""
    explainer_version: str
    """Explainer code version."""
    prompt_version: str
    """Prompt version ('' when no prompt)."""
    llm_model: str
    """LLM model name ('' for offline explainers)."""
    llm_params: dict[str, Any]
    """LLM parameters (temperature, max_tokens, base_url…)."""
    sampling: dict[str, Any]
    """Sampling config (sources, k, seed…)."""
    example_ids: list[int]
    """Window ids shown as examples."""
    negative_ids: list[int]
    """Window ids shown as negatives."""
    text: str
    """The explanation."""
    config_key: str
    """Unique key of (SAE, feature, explainer config); has_explanation() checks it to skip done work."""
    rules: Any = None
    """Structured rules (JSON-able) or None."""
    extra: dict[str, Any] = field(default_factory=dict[str, Any])
    """Explainer-specific payload (tree, PRISM clusters…)."""
    tokens_in: int = 0
    """Prompt tokens spent."""
    tokens_out: int = 0
    """Completion tokens spent."""
    seconds: float = 0.0
    """Wall time."""
    id: int | None = None
    """Row id once stored."""
    created_at: datetime | None = None
    """Set by the store."""
    status: Status = Status.OK
    """OK, or DEAD for a feature that never fired (empty text, never scored)."""


@dataclass(frozen=True)
class ScoreRecord:
    """One score of one explanation."""

    explanation_id: int
    """Explanation scored."""
    scorer: str
    """Scorer name (simulation, detection, fuzzing, embedding, cosy…)."""
    scorer_version: str
    """Scorer code version."""
    negative_source: str
    """Negative source used (RANDOM, RANDOM_NEGATIVE, SIMILAR, SIMILAR_NEGATIVE, or '' for none)."""
    metrics: dict[str, Any]
    """Metric values."""
    provenance: dict[str, Any] = field(default_factory=dict[str, Any])
    """Simulator model, sample ids, seeds, tokens, seconds…"""
    id: int | None = None
    """Row id once stored."""
    created_at: datetime | None = None
    """Set by the store."""
    status: Status = Status.OK
    """OK (metrics computed), DEAD, or the failure that was recorded instead of metrics."""
    score_key: str | None = None
    """Unique key of (explanation, scorer config); resume skips stored keys (Store.score_keys)."""


@dataclass(frozen=True)
class EvalRecord:
    """A SAE-level evaluation result (absorption, core metrics…)."""

    sae_id: str
    """The SAE."""
    eval_type_id: str
    """Evaluation kind, e.g. 'absorption_first_letter', 'core'."""
    eval: dict[str, Any]
    """Result payload."""
    id: int | None = None
    """Row id once stored."""
    created_at: datetime | None = None
    """Set by the store."""


@dataclass(frozen=True)
class LLMCacheEntry:
    """A cached LLM response."""

    key: str
    """Hash of the request."""
    model: str
    """Model that answered."""
    response: dict[str, Any]
    """The response payload."""
    tokens: int
    """Tokens spent producing it."""
    created_at: datetime
    """When it was cached."""


@dataclass(frozen=True)
class WindowEmbeddings:
    """Sentence embeddings of a corpus's windows."""

    window_ids: np.ndarray
    """(N,) int64, ascending."""
    embeddings_ND: np.ndarray
    """(N, D) float32, L2-normalised rows, same order."""


@dataclass(frozen=True)
class TokenFeature:
    """A feature that fires on a token string, aggregated over the token's occurrences in the indexed windows."""

    feature: int
    """Feature index."""
    n_fires: int
    """Occurrences of the token on which the feature is active."""
    mean_value: float
    """Mean activation over those occurrences."""
    max_value: float
    """Largest activation on the token."""
