"""The `Store` facade: one class over the table-family modules, each holding its own SQL behind named, typed methods.

saes.py (saes) · windows.py (windows) · indexing.py (index_runs, activations_staging, activations) ·
activations.py (per-feature reads, example draws) · stats.py (feature_stats, feature_neighbours) ·
explanations.py · scores.py (scores, evals) · samples.py · llm_cache.py · window_embeddings.py (window_vectors) ·
attributions.py (attributions, feature_effects) · lrp.py (lrp_attributions) · interactions.py (interactions) ·
families.py (match_runs, feature_matches, match_agreement, explanation_stability: SAE families) ·
partitioned.py (Parquet data plane, activation_partitions) ·
graduate.py (single file -> Parquet) · verify.py (the whole-store check) · ranges.py (index_ranges, the Ray index ledger) ·
query.py (the caller's own read-only SQL) · parquet.py (export / import) · base.py (sessions, transactions, the session cache)
"""

from __future__ import annotations

from pathlib import Path

from sae_workbench.store.activations import Activations
from sae_workbench.store.attributions import Attributions
from sae_workbench.store.base import Session, StoreBase
from sae_workbench.store.connection import READER_BUSY_TIMEOUT_S, WRITER_BUSY_TIMEOUT_S, require_writable
from sae_workbench.store.errors import IndexConfigError, SchemaVersionError
from sae_workbench.store.explanations import Explanations
from sae_workbench.store.families import Families
from sae_workbench.store.interactions import Interactions
from sae_workbench.store.llm_cache import LLMCache
from sae_workbench.store.lrp import LrpAttributions
from sae_workbench.store.migrations import LATEST_VERSION, migrate, schema_version_of
from sae_workbench.store.parquet import Parquet
from sae_workbench.store.query import Query
from sae_workbench.store.ranges import IndexRanges
from sae_workbench.store.samples import Samples
from sae_workbench.store.scores import Scores
from sae_workbench.store.stats import Stats
from sae_workbench.store.tokens import Tokens
from sae_workbench.store.verify import Verification
from sae_workbench.store.window_embeddings import Embeddings

__all__ = ["IndexConfigError", "Session", "Store", "StoreBase"]


class Store(
    Activations,
    Stats,
    Tokens,
    Explanations,
    Scores,
    Samples,
    LLMCache,
    Embeddings,
    Parquet,
    Attributions,
    LrpAttributions,
    Interactions,
    Families,
    Query,
    Verification,
    IndexRanges,
):
    """A DuckDB feature store file. Open with `Store.open(path, read_only=False)`; see the package docstring."""

    @classmethod
    def open(cls, path: str | Path, read_only: bool = False, *, busy_timeout_s: float | None = None) -> Store:
        """Open (creating and migrating when writable) the store at `path`; raise typed errors on bad files.

        `busy_timeout_s`: how long each call waits for another process's lock before StoreBusyError; default
        READER_BUSY_TIMEOUT_S (60 s) read-only, WRITER_BUSY_TIMEOUT_S (no limit, with a warning every 30 s) for a
        writer, so that a reader holding the file can delay a job but never make it fail."""
        if busy_timeout_s is None:
            busy_timeout_s = READER_BUSY_TIMEOUT_S if read_only else WRITER_BUSY_TIMEOUT_S
        store = cls(Path(path), read_only, busy_timeout_s)
        if not read_only:
            require_writable(store.path)
            store.path.parent.mkdir(parents=True, exist_ok=True)
        with store._conn() as conn:
            version = schema_version_of(conn)
            if version > LATEST_VERSION:
                raise SchemaVersionError(
                    f"Store {store.path} has schema version {version}, newer than this workbench's {LATEST_VERSION}. "
                    "Upgrade sae-workbench to read it."
                )
            if version < LATEST_VERSION:
                if read_only:
                    raise SchemaVersionError(
                        f"Store {store.path} has schema version {version} < {LATEST_VERSION}; open it once "
                        "read-write (any writer command) to migrate it."
                    )
                migrate(conn, version)
        return store
