"""Opening store files briefly, with a lock-retry loop and typed errors for unreadable files.

Concurrency design (see the package docstring): no process holds the store open for long. Every store call (or
`Store.session()` block) attaches the file, runs, and detaches it; a process that finds the file locked by another
retries with exponential backoff until `busy_timeout_s`, then raises `StoreBusyError`. DuckDB's file lock makes
writers mutually exclusive (queueing, never interleaving) and its WAL + checkpoint make each transaction atomic.

Why attach instead of `duckdb.connect(path)`: creating a DuckDB database instance costs 15–60 ms on this machine
(most of it building the instance's function catalogue, even for ":memory:"), and the old design paid it on every
call. Here each process keeps ONE in-memory DuckDB instance (the hub) for its whole life and `ATTACH`es a store file
only for the length of a session, then `DETACH`es it — which checkpoints a written WAL and releases the file lock
exactly like closing a connection, at a fraction of the cost (~1–10 ms). Several threads (or Store objects) of one
process that use the same file at the same time share one attachment (reference counted), each with its own cursor;
a read-write session waits for a read-only attachment of the same file in its process to be released.

Long writers (the explain job) hold the file in leases instead of a session per call; a process that finds the file
locked touches `<store>.waiting` on every retry, and a lease-holding writer steps aside (for YIELD_S) only when that
announcement is fresh — so nobody pays for yields nobody waits for.

Inside a process, open store files only through `Store` (a raw `duckdb.connect` on a file the hub has attached
would be a second database instance on it).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from sae_workbench.store.errors import (
    StoreBusyError,
    StoreCorruptError,
    StoreNotFoundError,
    StoreNotWritableError,
)

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


@dataclass
class _Attachment:
    """One store file attached to the hub."""

    alias: str
    """Catalog name the file is attached under."""
    read_only: bool
    """Attached READ_ONLY (then read-write sessions must wait for it to be released)."""
    users: int
    """Open sessions using it; the file is detached when this drops to 0."""


POLL_CAP_S = 0.025
"""Longest wait between two attempts to open a locked store file."""
YIELD_S = 0.06
"""How long a lease-holding writer leaves the file free between leases (> POLL_CAP_S, see acquire)."""
READER_BUSY_TIMEOUT_S = 60.0
"""How long a read-only store call (the app, `workbench sql`) waits for the file before StoreBusyError."""
WRITER_BUSY_TIMEOUT_S = math.inf
"""How long a writing store call (a job's commit) waits: without limit, so that another process holding the file
(a raw `duckdb.connect(path, read_only=True)`, another job) delays a job but cannot make it fail; it says so."""
WAIT_NOTICE_S = 10.0
"""A call waiting this long for the file logs a warning (and again every WAIT_NOTICE_S * 3 while it waits)."""
WAITING_FRESH_S = 2.0
"""A waiting announcement (see `announce_waiting`) older than this is stale: its process got in or gave up (2 s:
filesystems with one-second timestamps must still see a fresh touch as fresh)."""


def require_writable(path: Path) -> None:
    """StoreNotWritableError unless this process can write the store file at `path` (or create it: the nearest
    existing folder above it is writable). A check of permissions only, before any work."""
    path = Path(path).expanduser()
    if path.exists():
        if path.is_dir() or not os.access(path, os.W_OK):
            raise StoreNotWritableError(f"cannot write the store {path}; pass a writable --store file.")
        folder = path.parent
    else:
        folder = path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise StoreNotWritableError(
            f"cannot create or write the store {path}: the folder {folder} is not writable (DuckDB also writes "
            f"{path.name}.wal beside it); pass a --store in a writable folder."
        )


def waiting_marker(path: Path) -> Path:
    """The file a process waiting for `path`'s lock touches, so that lease-holding writers know to step aside."""
    return path.with_name(path.name + ".waiting")


def announce_waiting(path: Path) -> None:
    """Touch `path`'s waiting marker (best effort: a directory we cannot write only loses the announcement)."""
    marker = waiting_marker(path)
    try:
        marker.touch()
    except OSError:
        return


def someone_waiting(path: Path) -> bool:
    """Whether another process announced within WAITING_FRESH_S that it waits for `path` (one stat call)."""
    try:
        return time.time() - os.stat(waiting_marker(path)).st_mtime < WAITING_FRESH_S
    except OSError:
        return False


class _Hub:
    """The process's in-memory DuckDB instance and the store files currently attached to it."""

    def __init__(self) -> None:
        """No instance yet (created on first use, and again after a fork)."""
        self._lock = threading.Lock()
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._pid = -1
        self._attached: dict[str, _Attachment] = {}
        self._generation: dict[str, int] = {}

    def _instance(self) -> duckdb.DuckDBPyConnection:
        """The hub connection of this process (call with the lock held)."""
        if self._conn is None or self._pid != os.getpid():
            # After a fork the parent's instance is unusable here: start afresh (the parent keeps its own).
            self._conn = duckdb.connect(":memory:")
            self._pid = os.getpid()
            self._attached = {}
        return self._conn

    def acquire(self, path: Path, read_only: bool, busy_timeout_s: float) -> duckdb.DuckDBPyConnection:
        """A cursor whose default catalog is `path` (attaching it if needed); pair with `release`."""
        if read_only and not path.exists():
            raise StoreNotFoundError(
                f"No store at {path}; create it with a writer first (e.g. `workbench index`)."
            )
        key = os.path.realpath(path)
        started = time.monotonic()
        deadline = started + busy_timeout_s
        notice_at = started + WAIT_NOTICE_S
        delay = 0.005
        while True:
            message = ""
            with self._lock:
                hub = self._instance()
                att = self._attached.get(key)
                if att is None:
                    alias = "wb_" + hashlib.sha1(key.encode()).hexdigest()[:16]
                    try:
                        _attach(hub, key, alias, read_only)
                    except _Busy as busy:
                        message = str(busy)
                    else:
                        att = self._attached[key] = _Attachment(alias, read_only, 0)
                elif att.read_only and not read_only:
                    message = "the file is attached read-only by another session of this process"
                if att is not None and not message:
                    att.users += 1
                    try:
                        cursor = hub.cursor()
                        cursor.execute(f'USE "{att.alias}"').fetchall()
                    except BaseException:
                        self._drop_user(key)
                        raise
                    return cursor
            now = time.monotonic()
            if now >= deadline:
                raise StoreBusyError(
                    f"Store {path} stayed locked by another process for {busy_timeout_s:.0f}s ({message}). "
                    "Wait for the other job to finish, or raise busy_timeout_s."
                )
            if now >= notice_at:
                notice_at = now + 3 * WAIT_NOTICE_S
                log.warning(
                    "store %s has been locked by another process for %.0f s; waiting and retrying (%s). A job or "
                    "a raw `duckdb.connect(...)` holds it: close such a connection and query through `workbench "
                    "sql`, which takes its turn.",
                    path, now - started, "read-only" if read_only else "this write waits without limit",
                )  # fmt: skip
            # Say we wait (lease-holding writers, like the explain job, step aside only for a waiting process) and
            # poll at least every POLL_CAP_S: they leave the file free for YIELD_S > POLL_CAP_S, so a waiting
            # process is sure to see it free at least once.
            announce_waiting(path)
            time.sleep(delay)
            delay = min(delay * 2, POLL_CAP_S)

    def release(self, path: Path, cursor: duckdb.DuckDBPyConnection) -> None:
        """Close a cursor from `acquire`; detach the file (checkpoint, unlock) when no session uses it."""
        key = os.path.realpath(path)
        with self._lock:
            try:
                cursor.close()
            finally:
                self._drop_user(key)

    def _drop_user(self, key: str) -> None:
        """One session fewer on `key`; detach at zero (call with the lock held)."""
        att = self._attached.get(key)
        if att is None:
            return
        att.users -= 1
        if att.users > 0:
            return
        del self._attached[key]
        if self._conn is not None and self._pid == os.getpid():
            self._conn.execute(f'DETACH "{att.alias}"').fetchall()

    def bump(self, path: Path) -> None:
        """Record that this process wrote to `path` (invalidates session caches of every thread)."""
        key = os.path.realpath(path)
        with self._lock:
            self._generation[key] = self._generation.get(key, 0) + 1

    def generation(self, path: Path) -> int:
        """How many writes this process has started on `path` (see `bump`)."""
        return self._generation.get(os.path.realpath(path), 0)


class _Busy(Exception):
    """Another process holds the file's lock (internal; retried)."""


def _attach(hub: duckdb.DuckDBPyConnection, key: str, alias: str, read_only: bool) -> None:
    """ATTACH `key` as `alias`, turning DuckDB's errors into _Busy or StoreCorruptError."""
    mode = " (READ_ONLY)" if read_only else ""
    literal = key.replace("'", "''")
    try:
        hub.execute(f"ATTACH '{literal}' AS \"{alias}\"{mode}").fetchall()
    except duckdb.Error as exc:
        message = str(exc)
        if any(marker in message for marker in _BUSY_MARKERS):
            raise _Busy(message) from exc
        if any(marker in message for marker in _CORRUPT_MARKERS):
            raise StoreCorruptError(
                f"{key} is not a readable DuckDB store ({message}). Restore it from a Parquet export "
                "(`Store.import_parquet`) or move it aside and re-run the stages that fill it."
            ) from exc
        raise


HUB = _Hub()


def open_connection(path: Path, read_only: bool, busy_timeout_s: float) -> duckdb.DuckDBPyConnection:
    """A cursor on `path` (retrying while another process holds its lock); give it back with `close_connection`."""
    return HUB.acquire(path, read_only, busy_timeout_s)


def close_connection(path: Path, conn: duckdb.DuckDBPyConnection) -> None:
    """Release a cursor from `open_connection` (the file is detached once no session of this process uses it)."""
    HUB.release(path, conn)
