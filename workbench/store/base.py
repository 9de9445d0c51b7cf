"""What every table family builds on: opening a store file, sessions, write transactions and the session cache.

`StoreBase` is the base of the table-family mixins that `Store` combines (`store.py`); a mixin reaches the DuckDB
connection only through the protected `_conn()` / `_write()` context managers, so no connection leaves the package.
`Session` is what `with store.session() as s:` yields: a handle, not a connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import duckdb

from sae_workbench.store.connection import HUB, close_connection, open_connection
from sae_workbench.store.errors import PartitionFileError, StoreReadOnlyError
from sae_workbench.store.migrations import schema_version_of
from sae_workbench.store.sql import count, sql_path

T = TypeVar("T")

SESSION_CACHE_ENTRIES = 32
"""Session cache size: a few features' rows and window maxima plus index progress / SAE records / window ids."""


class Session:
    """A store file held open by one thread across several `Store` calls (what `store.session()` yields).

    It runs no SQL itself: call the store's methods inside the `with` block, and they share the held attachment.
    """

    def __init__(self, path: Path, read_only: bool) -> None:
        """A handle on the held file."""
        self.path = path
        """The store file."""
        self.read_only = read_only
        """Whether it is held read-only."""


@dataclass
class _Held:
    """A thread's open session: its cursor, its handle and the facts cached under it."""

    conn: duckdb.DuckDBPyConnection
    session: Session
    generation: int
    """HUB.generation of the file when the cache was last valid."""
    cache: dict[tuple[object, ...], object] = field(default_factory=lambda: {})
    in_tx: bool = False
    """Whether a write transaction is open (nested writes join it)."""


_LAYOUT_SEGMENTS = ("/activations/sae_id=", "/windows/corpus=")
"""Path segments of the partitioned layout (partitioned.py): an error naming such a file is about its data plane."""


def parquet_read_error(exc: duckdb.Error, store_path: Path) -> PartitionFileError | None:
    """The typed error for DuckDB's failure to read a partitioned Parquet file (None for any other error)."""
    message = str(exc)
    if "parquet" not in message.lower() or not any(segment in message for segment in _LAYOUT_SEGMENTS):
        return None
    return PartitionFileError(
        f"a partitioned Parquet file of {store_path} could not be read ({message.splitlines()[0]}). Restore it "
        f"from a backup, or rebuild it: `workbench graduate --store {store_path} --repair` (`workbench verify "
        f"--store {store_path}` lists every fault)."
    )


class StoreBase:
    """A DuckDB feature store file: sessions, transactions, the session cache and schema introspection."""

    def __init__(self, path: Path, read_only: bool, busy_timeout_s: float) -> None:
        """A store on `path` (use `Store.open`, which also creates and migrates it)."""
        self.path = path
        """The DuckDB file."""
        self.read_only = read_only
        """Opened read-only (every write raises StoreReadOnlyError)."""
        self.busy_timeout_s = busy_timeout_s
        """How long a call waits for another process's lock before StoreBusyError."""
        self._local = threading.local()

    def _held(self) -> _Held | None:
        """This thread's open session, if any."""
        held: _Held | None = getattr(self._local, "held", None)
        return held

    @contextmanager
    def session(self) -> Generator[Session, None, None]:
        """Hold the file for several calls (a dashboard render, a batch of writes); re-entrant per thread.

        Keep sessions short: while one is open, other processes wait (writers always; readers when it writes).
        Inside a session, facts that cannot change under it (index progress, SAE records, indexed window ids, a
        feature's window maxima) are read once: other processes cannot write while it holds the file, and every
        write of this process invalidates them.
        """
        held = self._held()
        if held is not None:
            yield held.session
            return
        conn = open_connection(self.path, self.read_only, self.busy_timeout_s)
        held = _Held(conn, Session(self.path, self.read_only), HUB.generation(self.path))
        self._local.held = held
        try:
            yield held.session
        finally:
            self._local.held = None
            close_connection(self.path, conn)

    @contextmanager
    def released(self) -> Generator[None, None, None]:
        """Leave the file free during long work that needs no store (embedding texts inside a job's store call): when
        this thread holds a session outside a transaction, its cursor is closed for the block (the file is detached
        once no other session of the process uses it) and reopened after it, with the session cache cleared (another
        process may have written meanwhile). Elsewhere a no-op."""
        held = self._held()
        if held is None or held.in_tx:
            yield
            return
        close_connection(self.path, held.conn)
        try:
            yield
        finally:
            held.conn = open_connection(self.path, self.read_only, self.busy_timeout_s)
            held.cache.clear()

    @contextmanager
    def _conn(self) -> Generator[duckdb.DuckDBPyConnection, None, None]:
        """The cursor of this thread's session (opening a session of its own when none is held); DuckDB's error on
        a damaged partitioned Parquet file becomes PartitionFileError (`parquet_read_error`)."""
        with self.session():
            held = self._held()
            assert held is not None
            try:
                yield held.conn
            except duckdb.Error as exc:
                damaged = parquet_read_error(exc, self.path)
                if damaged is None:
                    raise
                raise damaged from exc

    def _in_session(self) -> bool:
        """Whether this thread holds a session (then its cache applies)."""
        return self._held() is not None

    def _cached(self, key: tuple[object, ...], compute: Callable[[], T]) -> T:
        """`compute()` once per session and key (no caching outside a session; writes invalidate)."""
        held = self._held()
        if held is None:
            return compute()
        cache = held.cache
        generation = HUB.generation(self.path)
        if generation != held.generation:
            cache.clear()
            held.generation = generation
        if key in cache:
            value = cast(T, cache.pop(key))  # least recently used first: a hit moves the entry to the end
        else:
            if len(cache) >= SESSION_CACHE_ENTRIES:
                cache.pop(next(iter(cache)))
            value = compute()
        cache[key] = value
        return value

    @contextmanager
    def _write(self, invalidates: bool = True) -> Generator[duckdb.DuckDBPyConnection, None, None]:
        """One write transaction (inside the current session, or a session of its own).

        `invalidates=False` is for appends to tables no session-cached fact is read from (explanations, scores,
        evals, samples, embeddings, the LLM cache): the session caches survive them.
        """
        if self.read_only:
            raise StoreReadOnlyError(
                f"Store {self.path} was opened read-only; open it with read_only=False to write."
            )
        with self._conn() as conn:
            held = self._held()
            assert held is not None
            if held.in_tx:
                try:
                    yield conn
                finally:
                    if invalidates:
                        HUB.bump(self.path)
                return
            if invalidates:
                HUB.bump(self.path)
            conn.execute("BEGIN TRANSACTION").fetchall()
            held.in_tx = True
            try:
                yield conn
                conn.execute("COMMIT").fetchall()
            except BaseException:
                conn.execute("ROLLBACK").fetchall()
                raise
            finally:
                held.in_tx = False
                if invalidates:
                    HUB.bump(self.path)

    @contextmanager
    def transaction(self) -> Generator[None, None, None]:
        """Group several write calls into one atomic transaction."""
        with self._write():
            yield

    def _insert_new(self, table: str, columns: tuple[str, ...], rows: list[list[Any]]) -> int:
        """Insert rows into a table keyed by `config_key` in one transaction, skipping stored keys; count new ones
        (the attribution, LRP and interaction tables' one write path)."""
        if not rows:
            return 0
        marks = ", ".join("?" * len(columns))
        with self._write(invalidates=False) as conn:
            before = count(conn.execute(f"SELECT count(*) FROM {table}"))
            conn.executemany(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) ON CONFLICT (config_key) DO NOTHING",
                rows,
            )
            return count(conn.execute(f"SELECT count(*) FROM {table}")) - before

    def _config_keys(self, table: str, sae_id: str) -> set[str]:
        """The config keys of an SAE's rows in a table keyed by `config_key` (what a resumed job skips)."""
        with self._conn() as conn:
            rows = conn.execute(f"SELECT config_key FROM {table} WHERE sae_id = ?", [sae_id]).fetchall()
        return {str(r[0]) for r in rows}

    def _export_tables(self, tables: Sequence[str], folder: str | Path) -> list[Path]:
        """Write each table to `folder/<table>.parquet` (zstd); return the files."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        files: list[Path] = []
        with self._conn() as conn:
            for table in tables:
                path = out / f"{table}.parquet"
                conn.execute(
                    f"COPY {table} TO '{sql_path(path)}' (FORMAT parquet, COMPRESSION zstd)"
                ).fetchall()
                files.append(path)
        return files

    def schema_version(self) -> int:
        """The store's schema version (number of migrations applied)."""
        with self._conn() as conn:
            return schema_version_of(conn)

    def table_names(self) -> list[str]:
        """Names of all tables in the store (sorted)."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY table_name"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def table_columns(self, table: str) -> list[tuple[str, str]]:
        """(column, type) pairs of a table, in order."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
                "AND table_name = ? ORDER BY column_index",
                [table],
            ).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]
