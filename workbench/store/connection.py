"""Opening DuckDB files with a lock-retry loop, and typed errors for unreadable files.

Concurrency design (see the package docstring): no process holds the store open for long. Every store call (or
`Store.session()` block) opens a connection, runs, and closes it; a process that finds the file locked by another
retries with exponential backoff until `busy_timeout_s`, then raises `StoreBusyError`. DuckDB's file lock makes
writers mutually exclusive (queueing, never interleaving) and its WAL + checkpoint make each transaction atomic.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import duckdb

from workbench.store.errors import StoreBusyError, StoreCorruptError, StoreNotFoundError

log = logging.getLogger(__name__)

# Lock contention messages DuckDB raises while another process (or another config in this process) holds the file.
_BUSY_MARKERS = ("Could not set lock", "Conflicting lock", "different configuration")
_CORRUPT_MARKERS = (
    "not a valid DuckDB database",
    "Could not read enough bytes",
    "Serialization Error",
    "Corrupt",
    "corrupt",
    "checksum",
    "Checksum",
    "is too small",
)


def open_connection(path: Path, read_only: bool, busy_timeout_s: float) -> duckdb.DuckDBPyConnection:
    """Open `path`, retrying while another process holds its lock; raise typed errors for missing/corrupt files."""
    if read_only and not path.exists():
        raise StoreNotFoundError(
            f"No store at {path}; create it with a writer first (e.g. `workbench index`)."
        )
    deadline = time.monotonic() + busy_timeout_s
    delay = 0.005
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except (duckdb.IOException, duckdb.ConnectionException) as exc:
            message = str(exc)
            if any(marker in message for marker in _BUSY_MARKERS):
                if time.monotonic() >= deadline:
                    raise StoreBusyError(
                        f"Store {path} stayed locked by another process for {busy_timeout_s:.0f}s ({message}). "
                        "Wait for the other job to finish, or raise busy_timeout_s."
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                continue
            if any(marker in message for marker in _CORRUPT_MARKERS):
                raise StoreCorruptError(
                    f"{path} is not a readable DuckDB store ({message}). Restore it from a Parquet export "
                    "(`Store.import_parquet`) or move it aside and re-run the stages that fill it."
                ) from exc
            raise
        except duckdb.Error as exc:
            if any(marker in str(exc) for marker in _CORRUPT_MARKERS):
                raise StoreCorruptError(f"{path} is not a readable DuckDB store ({exc}).") from exc
            raise
