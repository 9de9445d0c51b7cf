"""What an indexing run is asked (`IndexRequest`, its settings `IndexConfig`) and what it reports (`IndexResult`),
one request type for the local loop (`sae.index_loop.index_sae`) and the Ray backend (`sae.ray_index.index_sae_ray`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench import defaults
from sae_workbench.corpus import Corpus, MaskPolicy
from sae_workbench.errors import WorkbenchError


class IndexArgumentError(WorkbenchError, ValueError):
    """An index setting or request that cannot work (no window to index, a batch of no windows)."""


class CooccurrenceBudgetError(WorkbenchError, ValueError):
    """IndexConfig.cooc_max_rows is not a positive number of rows."""


@dataclass(frozen=True)
class IndexConfig:
    """Settings of one indexing run (the first three are fixed for an SAE once indexing starts)."""

    context_size: int = defaults.CONTEXT_SIZE
    """Tokens per window, BOS included."""
    top_k: int | None = None
    """Keep only the k largest activations per token (None: every non-zero)."""
    batch_size: int = defaults.FORWARD_BATCH_WINDOWS
    """Windows per forward pass."""
    commit_tokens: int = 65_536
    """Tokens per write transaction (a killed run loses at most this much work)."""
    n_logit_tokens: int = 10
    """Logit-lens tokens kept per feature, top and bottom."""
    n_neighbours: int = 10
    """Decoder-cosine and co-occurrence neighbours kept per feature."""
    compute_stats: bool = True
    """Compute per-feature statistics after indexing."""
    cooc_max_rows: int = 20_000_000
    """Row budget of the co-occurrence neighbours, which hold their rows in memory: an SAE with more activation rows
    gets neighbours estimated on its first windows (smallest ids) whose rows fit. Peak RSS of the step, measured here
    on synthetic rows at 131,072 features and L0 64 (4M and 8M rows): ~0.4 GiB + 65-76 MiB per 1M rows, so ~2 GiB
    at the default; time 10-30 s of one core per 1M rows."""

    def __post_init__(self) -> None:
        """Refuse impossible settings before any work (typed errors; the CLI exits 2)."""
        if self.cooc_max_rows < 1:
            raise CooccurrenceBudgetError(
                f"cooc_max_rows must be >= 1 (rows read for the co-occurrence neighbours), got {self.cooc_max_rows}."
            )
        for name, value, least in (
            ("context_size", self.context_size, 2),
            ("batch_size", self.batch_size, 1),
            ("commit_tokens", self.commit_tokens, 1),
            ("top_k", 1 if self.top_k is None else self.top_k, 1),
            ("n_logit_tokens", self.n_logit_tokens, 1),
            ("n_neighbours", self.n_neighbours, 1),
        ):
            if value < least:
                raise IndexArgumentError(f"IndexConfig.{name} must be >= {least}, got {value}.")


@dataclass(frozen=True, eq=False)
class IndexRequest:
    """One SAE to index on a model's hook over the first `n_tokens` tokens of a corpus (resuming any earlier run)."""

    model: HookedTransformer
    """The subject model (loaded; its tokenizer cuts the windows)."""
    sae: SAE[Any]
    """The SAE to index."""
    hook: str
    """The hook the SAE reads (checked against the SAE's recorded hook and width)."""
    corpus: Corpus
    """The corpus whose windows are indexed."""
    n_tokens: int
    """Tokens to index (whole windows: `n_tokens // context_size` of them)."""
    config: IndexConfig = field(default_factory=IndexConfig)
    """The run's settings."""
    model_name: str | None = None
    """The model's name as recorded with the SAE (None: `model.cfg.model_name`)."""
    mask_policy: MaskPolicy | None = None
    """Which positions count (None: the default policy)."""
    sae_path: str | None = None
    """Where the SAE was loaded from: recorded in its config so the app's playground can reload it; when it is a
    folder with a training record, the SAE's id is read back from it (`sae.io.sae_id_of`) instead of rehashing."""
    sae_metrics: dict[str, Any] | None = None
    """Metrics stored with the SAE (e.g. the metrics.json `workbench train` wrote next to it)."""


@dataclass(frozen=True)
class IndexResult:
    """What an indexing call did."""

    sae_id: str
    """The SAE's content id."""
    new_windows: int
    """Windows indexed by this call (0 when everything was already done)."""
    new_tokens: int
    """Tokens of those windows (BOS included)."""
    new_rows: int
    """Activation rows written by this call."""
    seconds: float
    """Wall time of the indexing loop (stats excluded)."""

    @property
    def tokens_per_s(self) -> float:
        """Indexing throughput."""
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0
