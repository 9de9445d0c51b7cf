"""Typed errors of the feature store. Each message says what went wrong and what to do."""

from sae_workbench.errors import WorkbenchError


class StoreError(WorkbenchError):
    """Base class of every feature-store error."""


class StoreNotFoundError(StoreError):
    """A read-only open of a store file that does not exist."""


class StoreCorruptError(StoreError):
    """The store file is not a readable DuckDB database (truncated, overwritten, or another format)."""


class SchemaVersionError(StoreError):
    """The store was written by a newer workbench (schema version above what this code knows), or a read-only
    open found a store that still needs migrating."""


class StoreBusyError(StoreError):
    """Another process held the store's lock longer than the busy timeout."""


class StoreReadOnlyError(StoreError):
    """A write method was called on a store opened read-only."""


class UnknownSAEError(StoreError):
    """An SAE id is not registered in the store."""


class SAEConflictError(StoreError):
    """An SAE id is registered with a different model, hook or shape than the one given."""


class NotIndexedError(StoreError):
    """A query needs activations of an SAE that has not been indexed (or whose indexing is not finalized)."""


class IndexConfigError(StoreError):
    """Indexing an SAE again with settings (corpus, context size, top-k) different from its first run."""


class DuplicateScoreError(StoreError):
    """A score whose score_key is already stored (or repeated in one batch): scoring it again would duplicate it."""


class QueryNotAllowedError(StoreError):
    """A query for `Store.query` / `workbench sql` that is not one read-only statement, or that DuckDB rejects."""


class NonFiniteActivationsError(StoreError):
    """An activation batch holds NaN or infinite values: it is refused before anything of it is written."""


class PartitionFileError(WorkbenchError):
    """A partitioned Parquet file the ledger records is missing, has another size or checksum, or a file the ledger
    does not record lies among them: reading on would give a wrong answer, so nothing is read.

    Deliberately not a StoreError: callers that catch StoreError to skip an absent window or feature must not turn
    a damaged store into an empty answer (the app showed "No activating windows" for a live feature)."""


class StoreNotWritableError(StoreError):
    """A writer's store file, or the folder it would be created in, cannot be written by this process."""
