"""The `Store` class: every SQL statement of the workbench lives here, behind named, typed methods."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Container, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from sae_workbench.store import vectors
from sae_workbench.store.connection import HUB, close_connection, open_connection
from sae_workbench.store.errors import (
    NotIndexedError,
    SAEConflictError,
    SchemaVersionError,
    StoreError,
    StoreReadOnlyError,
    UnknownSAEError,
)
from sae_workbench.store.feature_rows import ROWS_CAP, FeatureRows
from sae_workbench.store.migrations import LATEST_VERSION, MIGRATIONS, statements
from sae_workbench.store.records import (
    EvalRecord,
    Example,
    ExplanationRecord,
    FeatureStats,
    IndexProgress,
    LLMCacheEntry,
    SAERecord,
    Sample,
    ScoreRecord,
    Window,
    WindowEmbeddings,
    WindowMaxima,
)

log = logging.getLogger(__name__)

# Activation quantile levels shown on dashboards (a deciles-plus-tail choice of ours, not from a paper).
DEFAULT_QUANTILE_LEVELS: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
DEFAULT_HIST_BINS = 32
ACTIVATION_COLUMNS = ("feature", "window_id", "position", "value")
# Session cache size: a few features' rows and window maxima plus index progress / SAE records / window ids.
_SESSION_CACHE_ENTRIES = 32
_ACTIVATION_SCHEMA = pa.schema(
    [("feature", pa.int32()), ("window_id", pa.int64()), ("position", pa.int16()), ("value", pa.float32())]
)


class IndexConfigError(StoreError):
    """Indexing an SAE again with settings (corpus, context size, top-k) different from its first run."""


def _dumps(value: Any) -> str:
    """JSON text for a JSON column (sorted keys so equal configs compare equal)."""
    return json.dumps(value, sort_keys=True, default=str)


def _loads(value: Any) -> Any:
    """Parse a JSON column value (None stays None)."""
    return None if value is None else json.loads(value)


def _list_column(values_2d: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    """A (N, T) numpy array as an Arrow list column of N rows."""
    n, t = values_2d.shape
    offsets = pa.array(np.arange(0, (n + 1) * t, t, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values_2d.reshape(-1), type=value_type))


class Store:
    """A DuckDB feature store file. Open with `Store.open(path, read_only=False)`; see the package docstring."""

    def __init__(self, path: Path, read_only: bool, busy_timeout_s: float) -> None:
        self.path = path
        self.read_only = read_only
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()

    # ------------------------------------------------------------------ opening, sessions, schema

    @classmethod
    def open(cls, path: str | Path, read_only: bool = False, *, busy_timeout_s: float = 60.0) -> Store:
        """Open (creating and migrating when writable) the store at `path`; raise typed errors on bad files."""
        store = cls(Path(path), read_only, busy_timeout_s)
        if not read_only:
            store.path.parent.mkdir(parents=True, exist_ok=True)
        with store.session() as conn:
            version = _schema_version(conn)
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
                _migrate(conn, version)
        return store

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Hold one connection for several calls (a dashboard render, a batch of writes); re-entrant per thread.

        Keep sessions short: while one is open, other processes wait (writers always; readers when it writes).
        Inside a session, facts that cannot change under it (index progress, SAE records, indexed window ids, a
        feature's window maxima) are read once: other processes cannot write while it holds the file, and every
        write of this process invalidates them.
        """
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        conn = open_connection(self.path, self.read_only, self.busy_timeout_s)
        self._local.conn = conn
        self._local.cache = {}
        self._local.generation = HUB.generation(self.path)
        try:
            yield conn
        finally:
            self._local.conn = None
            self._local.cache = {}
            close_connection(self.path, conn)

    def _in_session(self) -> bool:
        """Whether this thread holds a session (then its cache applies)."""
        return getattr(self._local, "conn", None) is not None

    def _cached(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """`compute()` once per session and key (no caching outside a session; writes invalidate)."""
        if not self._in_session():
            return compute()
        cache: dict[tuple[Any, ...], Any] = self._local.cache
        generation = HUB.generation(self.path)
        if generation != self._local.generation:
            cache.clear()
            self._local.generation = generation
        if key in cache:
            value = cache.pop(key)  # least recently used first: a hit moves the entry to the end
        else:
            if len(cache) >= _SESSION_CACHE_ENTRIES:
                cache.pop(next(iter(cache)))
            value = compute()
        cache[key] = value
        return value

    @contextmanager
    def _write(self, invalidates: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction (inside the current session, or a session of its own).

        `invalidates=False` is for appends to tables no session-cached fact is read from (explanations, scores,
        evals, samples, embeddings, the LLM cache): the session caches survive them.
        """
        if self.read_only:
            raise StoreReadOnlyError(
                f"Store {self.path} was opened read-only; open it with read_only=False to write."
            )
        with self.session() as conn:
            if getattr(self._local, "in_tx", False):
                try:
                    yield conn
                finally:
                    if invalidates:
                        HUB.bump(self.path)
                return
            if invalidates:
                HUB.bump(self.path)
            conn.execute("BEGIN TRANSACTION").fetchall()
            self._local.in_tx = True
            try:
                yield conn
                conn.execute("COMMIT").fetchall()
            except BaseException:
                conn.execute("ROLLBACK").fetchall()
                raise
            finally:
                self._local.in_tx = False
                if invalidates:
                    HUB.bump(self.path)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group several write calls into one atomic transaction."""
        with self._write():
            yield

    def schema_version(self) -> int:
        """The store's schema version (number of migrations applied)."""
        with self.session() as conn:
            return _schema_version(conn)

    def table_names(self) -> list[str]:
        """Names of all tables in the store (sorted)."""
        with self.session() as conn:
            rows = conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY table_name"
            ).fetchall()
        return [r[0] for r in rows]

    def table_columns(self, table: str) -> list[tuple[str, str]]:
        """(column, type) pairs of a table, in order."""
        with self.session() as conn:
            rows = conn.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
                "AND table_name = ? ORDER BY column_index",
                [table],
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    # ------------------------------------------------------------------ SAEs

    def register_sae(
        self,
        sae_id: str,
        model: str,
        hook: str,
        d_in: int,
        d_sae: int,
        cfg: dict[str, Any],
        metrics: dict[str, Any] | None = None,
    ) -> SAERecord:
        """Register an SAE (idempotent); raise SAEConflictError if the id exists with another model/hook/shape."""
        with self._write() as conn:
            row = _first(conn.execute("SELECT model, hook, d_in, d_sae FROM saes WHERE sae_id = ?", [sae_id]))
            if row is None:
                conn.execute(
                    "INSERT INTO saes (sae_id, model, hook, d_in, d_sae, cfg, metrics) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [sae_id, model, hook, d_in, d_sae, _dumps(cfg), _dumps(metrics or {})],
                ).fetchall()
            elif tuple(row) != (model, hook, d_in, d_sae):
                raise SAEConflictError(
                    f"SAE {sae_id} is registered as (model, hook, d_in, d_sae)={tuple(row)}, not "
                    f"{(model, hook, d_in, d_sae)}. SAE ids hash weights + hook + model, so recompute the id."
                )
            elif metrics:
                conn.execute(
                    "UPDATE saes SET metrics = ? WHERE sae_id = ?", [_dumps(metrics), sae_id]
                ).fetchall()
        return self.get_sae(sae_id)

    def update_sae_metrics(self, sae_id: str, metrics: dict[str, Any]) -> None:
        """Merge `metrics` into an SAE's stored metrics."""
        merged = {**self.get_sae(sae_id).metrics, **metrics}
        with self._write() as conn:
            conn.execute("UPDATE saes SET metrics = ? WHERE sae_id = ?", [_dumps(merged), sae_id]).fetchall()

    def get_sae(self, sae_id: str) -> SAERecord:
        """The registered SAE `sae_id`; UnknownSAEError lists the known ids if absent."""
        return self._cached(("sae", sae_id), lambda: self._read_sae(sae_id))

    def _read_sae(self, sae_id: str) -> SAERecord:
        """get_sae without the session cache."""
        with self.session() as conn:
            row = _first(
                conn.execute(
                    "SELECT sae_id, model, hook, d_in, d_sae, cfg, metrics, created_at FROM saes WHERE sae_id = ?",
                    [sae_id],
                )
            )
        if row is None:
            known = [s.sae_id for s in self.list_saes()]
            raise UnknownSAEError(f"SAE {sae_id!r} is not in {self.path}; known SAEs: {known or 'none'}.")
        return _sae_record(row)

    def list_saes(self) -> list[SAERecord]:
        """All registered SAEs, oldest first."""
        with self.session() as conn:
            rows = conn.execute(
                "SELECT sae_id, model, hook, d_in, d_sae, cfg, metrics, created_at FROM saes ORDER BY created_at, sae_id"
            ).fetchall()
        return [_sae_record(r) for r in rows]

    # ------------------------------------------------------------------ windows

    def add_windows(
        self,
        corpus: str,
        window_ids: np.ndarray,
        tokens_BT: np.ndarray,
        mask_BT: np.ndarray,
        texts: Sequence[str],
        token_strings: Sequence[Sequence[str]],
        sources: Sequence[str],
        offsets: np.ndarray,
    ) -> int:
        """Insert windows of `corpus` (existing (corpus, window_id) rows are kept); return how many were new."""
        n = len(window_ids)
        if n == 0:
            return 0
        lengths = np.array([len(s) for s in token_strings])
        if not (lengths == tokens_BT.shape[1]).all():
            raise StoreError("token_strings must have one string per position of each window.")
        table = pa.table(
            {
                "corpus": pa.array([corpus] * n, pa.string()),
                "window_id": pa.array(np.asarray(window_ids, dtype=np.int64)),
                "tokens": _list_column(np.asarray(tokens_BT, dtype=np.int32), pa.int32()),
                "text": pa.array(list(texts), pa.string()),
                "token_strings": pa.array([list(s) for s in token_strings], pa.list_(pa.string())),
                "source": pa.array(list(sources), pa.string()),
                "offset": pa.array(np.asarray(offsets, dtype=np.int64)),
                "mask": _list_column(np.asarray(mask_BT, dtype=bool), pa.bool_()),
            }
        )
        with self._write() as conn:
            before = _first(conn.execute("SELECT count(*) FROM windows WHERE corpus = ?", [corpus]))
            conn.register("_new_windows", table)
            try:
                conn.execute("INSERT OR IGNORE INTO windows SELECT * FROM _new_windows").fetchall()
            finally:
                conn.unregister("_new_windows")
            after = _first(conn.execute("SELECT count(*) FROM windows WHERE corpus = ?", [corpus]))
        assert before is not None and after is not None
        return int(after[0] - before[0])

    def get_windows(self, corpus: str, window_ids: Sequence[int] | np.ndarray) -> list[Window]:
        """Windows by id, in the order asked (missing ids raise StoreError)."""
        ids = [int(i) for i in window_ids]
        with self.session() as conn:
            where, params = _in_ids("window_id", ids)
            rows = conn.execute(
                'SELECT window_id, tokens, text, token_strings, source, "offset", mask FROM windows '
                f"WHERE corpus = ? AND {where}",
                [corpus, *params],
            ).fetchall()
        by_id = {
            r[0]: Window(
                corpus=corpus,
                window_id=int(r[0]),
                tokens=np.asarray(r[1], dtype=np.int32),
                text=r[2],
                token_strings=list(r[3]),
                source=r[4],
                offset=int(r[5]),
                mask=np.asarray(r[6], dtype=bool),
            )
            for r in rows
        }
        _require_windows(corpus, ids, by_id)
        return [by_id[i] for i in ids]

    def window_tokens(
        self, corpus: str, window_ids: Sequence[int] | np.ndarray
    ) -> dict[int, tuple[list[str], np.ndarray]]:
        """(token display strings, (T,) bool mask) of windows by id — what records need, without the rest of a
        Window (missing ids raise StoreError)."""
        ids = [int(i) for i in window_ids]
        with self.session() as conn:
            where, params = _in_ids("window_id", ids)
            cols = conn.execute(
                f"SELECT window_id, token_strings, mask FROM windows WHERE corpus = ? AND {where}",
                [corpus, *params],
            ).fetchnumpy()
        out = {
            int(w): (list(strings), np.asarray(mask, dtype=bool))
            for w, strings, mask in zip(cols["window_id"], cols["token_strings"], cols["mask"], strict=True)
        }
        _require_windows(corpus, ids, out)
        return out

    def window_ids(self, corpus: str) -> np.ndarray:
        """All stored window ids of `corpus`, ascending, int64."""
        with self.session() as conn:
            cols = _numpy(conn, "SELECT window_id FROM windows WHERE corpus = ? ORDER BY window_id", [corpus])
        return cols["window_id"].astype(np.int64)

    def window_texts(self, corpus: str, window_ids: Sequence[int] | np.ndarray) -> list[str]:
        """Decoded texts of windows, in the order asked."""
        return [w.text for w in self.get_windows(corpus, window_ids)]

    # ------------------------------------------------------------------ indexing bookkeeping + activations

    def start_index(
        self, sae_id: str, corpus: str, context_size: int, top_k: int | None, config: dict[str, Any]
    ) -> IndexProgress:
        """Begin (or resume) indexing `sae_id` over `corpus`; IndexConfigError if an earlier run used other settings."""
        self.get_sae(sae_id)
        existing = self.index_progress(sae_id)
        if existing is not None:
            if (existing.corpus, existing.context_size, existing.top_k) != (corpus, context_size, top_k):
                raise IndexConfigError(
                    f"SAE {sae_id} was indexed with corpus={existing.corpus!r}, context_size={existing.context_size}, "
                    f"top_k={existing.top_k}; this run asks for {corpus!r}, {context_size}, {top_k}. Use the same "
                    "settings to resume, or a new store."
                )
            return existing
        with self._write() as conn:
            conn.execute(
                "INSERT INTO index_runs (sae_id, corpus, context_size, top_k, next_window, n_tokens, finalized, config) "
                "VALUES (?, ?, ?, ?, 0, 0, false, ?)",
                [sae_id, corpus, context_size, top_k, _dumps(config)],
            ).fetchall()
        progress = self.index_progress(sae_id)
        assert progress is not None
        return progress

    def index_progress(self, sae_id: str) -> IndexProgress | None:
        """Indexing state of `sae_id`, or None if never indexed."""
        return self._cached(("progress", sae_id), lambda: self._read_progress(sae_id))

    def _read_progress(self, sae_id: str) -> IndexProgress | None:
        """index_progress without the session cache."""
        with self.session() as conn:
            row = _first(
                conn.execute(
                    "SELECT sae_id, corpus, context_size, top_k, next_window, n_tokens, finalized, config "
                    "FROM index_runs WHERE sae_id = ?",
                    [sae_id],
                )
            )
        if row is None:
            return None
        return IndexProgress(
            sae_id=row[0],
            corpus=row[1],
            context_size=int(row[2]),
            top_k=None if row[3] is None else int(row[3]),
            next_window=int(row[4]),
            n_tokens=int(row[5]),
            finalized=bool(row[6]),
            config=_loads(row[7]),
        )

    def add_activations(self, sae_id: str, batch: pa.Table | pa.RecordBatch) -> int:
        """Append sparse activations (columns feature, window_id, position, value) to staging; return rows added.

        Rows become queryable after `finalize_index`, which sorts them by feature. Prefer `add_index_batch`, which
        also records progress in the same transaction (resumable, no duplicates).
        """
        table = _activation_table(batch)
        with self._write() as conn:
            conn.register("_new_acts", table)
            try:
                conn.execute(
                    "INSERT INTO activations_staging SELECT ?, feature, window_id, position, value FROM _new_acts",
                    [sae_id],
                ).fetchall()
            finally:
                conn.unregister("_new_acts")
        return table.num_rows

    def add_index_batch(
        self,
        sae_id: str,
        corpus: str,
        windows: dict[str, Any],
        activations: pa.Table | pa.RecordBatch,
        next_window: int,
        n_tokens: int,
    ) -> None:
        """Atomically store one indexed batch: windows (kwargs of add_windows minus corpus), activations, progress.

        Skips the batch if progress is already past `next_window` (a re-run after a crash between commit and
        return), so no activation row is ever written twice.
        """
        with self._write() as conn:
            row = _first(conn.execute("SELECT next_window FROM index_runs WHERE sae_id = ?", [sae_id]))
            if row is None:
                raise NotIndexedError(f"call start_index({sae_id!r}, …) before add_index_batch.")
            if int(row[0]) >= next_window:
                return
            self.add_windows(corpus, **windows)
            self.add_activations(sae_id, activations)
            conn.execute(
                "UPDATE index_runs SET next_window = ?, n_tokens = n_tokens + ?, finalized = false, "
                "updated_at = current_timestamp WHERE sae_id = ?",
                [next_window, n_tokens, sae_id],
            ).fetchall()

    def finalize_index(self, sae_id: str) -> int:
        """Move staged activations into the query table sorted by (feature, window, position); return rows moved.

        Sorting by feature makes DuckDB's per-row-group min/max skip almost everything for one-feature queries.
        """
        with self._write() as conn:
            conn.execute(
                "INSERT INTO activations SELECT * FROM activations_staging WHERE sae_id = ? "
                "ORDER BY feature, window_id, position",
                [sae_id],
            ).fetchall()
            moved = _first(conn.execute("DELETE FROM activations_staging WHERE sae_id = ?", [sae_id]))
            conn.execute("UPDATE index_runs SET finalized = true WHERE sae_id = ?", [sae_id]).fetchall()
        return int(moved[0]) if moved else 0

    def activation_count(self, sae_id: str, staged: bool = False) -> int:
        """Number of stored activation rows of `sae_id` (query table, or staging when `staged`)."""
        table = "activations_staging" if staged else "activations"
        with self.session() as conn:
            row = _first(conn.execute(f"SELECT count(*) FROM {table} WHERE sae_id = ?", [sae_id]))
        return int(row[0]) if row else 0

    def activation_coordinates(self, sae_id: str) -> pa.Table:
        """All (feature, window_id, position, value) rows of `sae_id` as Arrow (for vectorised statistics)."""
        with self.session() as conn:
            return _arrow(
                conn, "SELECT feature, window_id, position, value FROM activations WHERE sae_id = ?", [sae_id]
            )

    def window_activations(
        self, sae_id: str, feature: int, window_ids: Sequence[int] | np.ndarray
    ) -> np.ndarray:
        """Dense (len(window_ids), T) float32 activations of one feature on the given windows (0 where not stored)."""
        progress = self._indexed(sae_id)
        ids = np.asarray(window_ids, dtype=np.int64)
        if len(ids) == 0:
            return np.zeros((0, progress.context_size), dtype=np.float32)
        if self._in_session():
            rows = self._session_rows(sae_id, feature)
            if rows is not None:
                return rows.dense(ids, progress.context_size)
        where, params = _in_ids("window_id", ids.tolist())
        with self.session() as conn:
            cols = _numpy(
                conn,
                f"SELECT window_id, position, value FROM activations WHERE sae_id = ? AND feature = ? AND {where}",
                [sae_id, int(feature), *params],
            )
        # Through FeatureRows so that a window id asked twice gets its activations twice.
        return FeatureRows.from_columns(cols["window_id"], cols["position"], cols["value"]).dense(
            ids, progress.context_size
        )

    def window_maxima(self, sae_id: str, feature: int) -> WindowMaxima:
        """Per-window max activation of one feature over every window where it is active (ascending window id;
        a window's position is its earliest token at the maximum)."""
        maxima = self._cached(("maxima", sae_id, int(feature)), lambda: self._read_maxima(sae_id, feature))
        return WindowMaxima(maxima.window_ids.copy(), maxima.values.copy(), maxima.positions.copy())

    def _session_rows(self, sae_id: str, feature: int) -> FeatureRows | None:
        """The feature's rows, read once per session (None for features denser than feature_rows.ROWS_CAP)."""
        return self._cached(("rows", sae_id, int(feature)), lambda: self._read_rows(sae_id, feature))

    def _read_rows(self, sae_id: str, feature: int) -> FeatureRows | None:
        """Every activation row of a feature, or None when it has more than ROWS_CAP (one plain scan)."""
        with self.session() as conn:
            cols = _numpy(
                conn,
                "SELECT window_id, position, value FROM activations WHERE sae_id = ? AND feature = ? LIMIT ?",
                [sae_id, int(feature), ROWS_CAP + 1],
            )
        if len(cols["window_id"]) > ROWS_CAP:
            return None
        return FeatureRows.from_columns(cols["window_id"], cols["position"], cols["value"])

    def _read_maxima(self, sae_id: str, feature: int) -> WindowMaxima:
        """window_maxima without the session cache: from the feature's rows, or aggregated by DuckDB when dense."""
        self._indexed(sae_id)
        rows = self._session_rows(sae_id, feature) if self._in_session() else self._read_rows(sae_id, feature)
        if rows is not None:
            return rows.maxima()
        with self.session() as conn:
            cols = _numpy(
                conn,
                "SELECT window_id, max(value) AS m, arg_max(position, (value, -position)) AS p FROM activations "
                "WHERE sae_id = ? AND feature = ? GROUP BY window_id ORDER BY window_id",
                [sae_id, int(feature)],
            )
        return WindowMaxima(
            window_ids=cols["window_id"].astype(np.int64),
            values=cols["m"].astype(np.float32),
            positions=cols["p"].astype(np.int64),
        )

    def window_text_scores(self, sae_id: str, feature: int) -> tuple[np.ndarray, np.ndarray]:
        """(window ids ascending, scores) over the windows where `feature` is active: its activation summed over
        each window's tokens and divided by their number, BOS and padding excluded (PRISM's text score, computed
        without loading the windows' tokens)."""
        progress = self._indexed(sae_id)
        if self._in_session():
            rows = self._session_rows(sae_id, feature)
            if rows is not None:
                ids, n = self._cached(("token_counts", sae_id), lambda: self._read_token_counts(progress))
                return rows.text_scores(ids, n)
        with self.session() as conn:
            cols = _numpy(
                conn,
                "WITH s AS (SELECT window_id, coalesce(sum(value) FILTER (WHERE position > 0), 0) AS total "
                "FROM activations WHERE sae_id = ? AND feature = ? GROUP BY window_id) "
                "SELECT s.window_id, s.total, len(list_filter(w.mask[2:], lambda x: x)) AS n FROM s "
                "JOIN windows w ON w.corpus = ? AND w.window_id = s.window_id ORDER BY s.window_id",
                [sae_id, int(feature), progress.corpus],
            )
        n = cols["n"].astype(np.float64)
        scores = np.divide(cols["total"].astype(np.float64), n, out=np.zeros_like(n), where=n > 0)
        return cols["window_id"].astype(np.int64), scores

    def _read_token_counts(self, progress: IndexProgress) -> tuple[np.ndarray, np.ndarray]:
        """(window ids ascending, tokens per window without BOS and padding) over the indexed windows."""
        with self.session() as conn:
            cols = _numpy(
                conn,
                "SELECT window_id, len(list_filter(mask[2:], lambda x: x)) AS n FROM windows "
                "WHERE corpus = ? AND window_id < ? ORDER BY window_id",
                [progress.corpus, progress.next_window],
            )
        return cols["window_id"].astype(np.int64), cols["n"].astype(np.float64)

    def indexed_window_ids(self, sae_id: str) -> np.ndarray:
        """Ids of the windows `sae_id` was indexed over (ascending)."""
        return self._cached(("indexed", sae_id), lambda: self._read_indexed(sae_id)).copy()

    def _read_indexed(self, sae_id: str) -> np.ndarray:
        """indexed_window_ids without the session cache."""
        progress = self._indexed(sae_id)
        with self.session() as conn:
            cols = _numpy(
                conn,
                "SELECT window_id FROM windows WHERE corpus = ? AND window_id < ? ORDER BY window_id",
                [progress.corpus, progress.next_window],
            )
        return cols["window_id"].astype(np.int64)

    # ------------------------------------------------------------------ examples

    def top_examples(self, sae_id: str, feature: int, k: int = 20) -> list[Example]:
        """The `k` windows with the highest max activation of `feature` (ties broken by window id)."""
        self._indexed(sae_id)
        with self.session() as conn:
            rows = conn.execute(
                "SELECT window_id, max(value) AS m, arg_max(position, (value, -position)) FROM activations "
                "WHERE sae_id = ? AND feature = ? GROUP BY window_id ORDER BY m DESC, window_id LIMIT ?",
                [sae_id, int(feature), int(k)],
            ).fetchall()
        return [Example(int(r[0]), float(r[1]), int(r[2])) for r in rows]

    def quantile_examples(
        self, sae_id: str, feature: int, n_quantiles: int = 10, per_quantile: int = 5, seed: int = 0
    ) -> list[Example]:
        """Activating windows split into `n_quantiles` equal-count bins by max activation (bin 0 = highest);
        `per_quantile` drawn uniformly per bin with `seed` (delphi-style quantile sampling)."""
        maxima = self.window_maxima(sae_id, feature)
        order = maxima.by_peak()
        rng = np.random.default_rng(seed)
        out: list[Example] = []
        for q, idx in enumerate(np.array_split(order, n_quantiles)):
            if len(idx) == 0:
                continue
            chosen = np.sort(rng.choice(idx, size=min(per_quantile, len(idx)), replace=False))
            out.extend(
                Example(int(maxima.window_ids[i]), float(maxima.values[i]), int(maxima.positions[i]), q)
                for i in chosen
            )
        return out

    def random_examples(self, sae_id: str, feature: int, k: int, seed: int = 0) -> list[Example]:
        """`k` activating windows drawn uniformly with `seed` (all of them if fewer)."""
        maxima = self.window_maxima(sae_id, feature)
        rng = np.random.default_rng(seed)
        chosen = rng.choice(len(maxima.window_ids), size=min(k, len(maxima.window_ids)), replace=False)
        return [
            Example(int(maxima.window_ids[i]), float(maxima.values[i]), int(maxima.positions[i]))
            for i in chosen
        ]

    def random_negatives(
        self, sae_id: str, feature: int, k: int, seed: int = 0, threshold: float = 0.0
    ) -> list[int]:
        """`k` indexed windows whose max activation of `feature` is ≤ `threshold`, drawn uniformly with `seed`."""
        maxima = self.window_maxima(sae_id, feature)
        active = maxima.window_ids[maxima.values > threshold]
        candidates = np.setdiff1d(self.indexed_window_ids(sae_id), active, assume_unique=True)
        rng = np.random.default_rng(seed)
        chosen = rng.choice(candidates, size=min(k, len(candidates)), replace=False)
        return [int(i) for i in chosen]

    # ------------------------------------------------------------------ samples

    def add_sample(self, sample: Sample) -> int:
        """Store a drawn sample (source, seed, config, ids); return its id."""
        with self._write(invalidates=False) as conn:
            row = _first(
                conn.execute(
                    "INSERT INTO samples (sae_id, feature, source, seed, config, window_ids) VALUES (?, ?, ?, ?, ?, ?) "
                    "RETURNING id",
                    [
                        sample.sae_id,
                        sample.feature,
                        sample.source,
                        sample.seed,
                        _dumps(sample.config),
                        sample.window_ids,
                    ],
                )
            )
        assert row is not None
        return int(row[0])

    def samples(self, sae_id: str, feature: int | None = None, source: str | None = None) -> list[Sample]:
        """Stored samples of an SAE (optionally one feature / one source), oldest first."""
        with self.session() as conn:
            rows = conn.execute(
                "SELECT id, sae_id, feature, source, seed, config, window_ids FROM samples WHERE sae_id = ? "
                "AND (? IS NULL OR feature = ?) AND (? IS NULL OR source = ?) ORDER BY id",
                [sae_id, feature, feature, source, source],
            ).fetchall()
        return [
            Sample(r[1], int(r[2]), r[3], int(r[4]), _loads(r[5]), [int(i) for i in r[6]], id=int(r[0]))
            for r in rows
        ]

    # ------------------------------------------------------------------ window embeddings

    def add_window_embeddings(
        self, corpus: str, model: str, window_ids: np.ndarray, embeddings_ND: np.ndarray
    ) -> None:
        """Store sentence embeddings of windows as float32 blobs (existing rows kept)."""
        ids = np.asarray(window_ids, dtype=np.int64)
        if len(ids) == 0:
            return
        vectors = np.ascontiguousarray(embeddings_ND, dtype=np.float32)
        n, dim = vectors.shape
        offsets = pa.py_buffer(np.arange(0, (n + 1) * dim * 4, dim * 4, dtype=np.int32).tobytes())
        blobs = pa.BinaryArray.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(vectors.tobytes())])
        table = pa.table(
            {
                "corpus": pa.array([corpus] * n, pa.string()),
                "model": pa.array([model] * n, pa.string()),
                "window_id": pa.array(ids),
                "dim": pa.array(np.full(n, dim, np.int32)),
                "vector": blobs,
            }
        )
        with self._write(invalidates=False) as conn:
            conn.register("_new_emb", table)
            try:
                conn.execute("INSERT OR IGNORE INTO window_vectors SELECT * FROM _new_emb").fetchall()
            finally:
                conn.unregister("_new_emb")

    def window_embeddings(self, corpus: str, model: str) -> WindowEmbeddings:
        """All stored embeddings of `corpus` by `model`, ascending window id.

        Served from a memory-mapped copy next to the store (`workbench.store.vectors`) while it matches the table;
        otherwise fetched from DuckDB (seconds for 100k windows) and the copy (re)written for the next process.
        """
        with self.session() as conn:
            row = _first(
                conn.execute(
                    "SELECT count(*), max(window_id) FROM window_vectors WHERE corpus = ? AND model = ?",
                    [corpus, model],
                )
            )
            count, last_id = (int(row[0]), row[1]) if row else (0, None)
            if count and last_id is not None:
                probe = _first(
                    conn.execute(
                        "SELECT vector FROM window_vectors WHERE corpus = ? AND model = ? AND window_id = ?",
                        [corpus, model, last_id],
                    )
                )
                last = np.frombuffer(probe[0], dtype=np.float32) if probe else np.zeros(0, np.float32)
                copy = vectors.load_copy(
                    vectors.vectors_dir(self.path), corpus, model, count, int(last_id), last
                )
                if copy is not None:
                    return copy
            embeddings = self._fetch_embeddings(conn, corpus, model)
        vectors.save_copy(vectors.vectors_dir(self.path), corpus, model, embeddings)
        return embeddings

    def _fetch_embeddings(self, conn: duckdb.DuckDBPyConnection, corpus: str, model: str) -> WindowEmbeddings:
        """Every embedding of (corpus, model) out of DuckDB, ascending window id."""
        table = _arrow(
            conn,
            "SELECT window_id, dim, vector FROM window_vectors WHERE corpus = ? AND model = ?",
            [corpus, model],
        )
        ids = table.column("window_id").to_numpy().astype(np.int64)
        # Rows arrive in insertion order; sorting here beats SQL ORDER BY.
        order = np.argsort(ids, kind="stable")
        if len(ids) == 0:
            return WindowEmbeddings(ids, np.zeros((0, 0), np.float32))
        dim = int(table.column("dim")[0].as_py())
        parts = [_blob_values(chunk) for chunk in table.column("vector").chunks if len(chunk)]
        vectors_ND = np.concatenate(parts).view(np.float32).reshape(len(ids), dim)
        if np.all(order[1:] > order[:-1]):
            return WindowEmbeddings(ids, vectors_ND)
        return WindowEmbeddings(ids[order], vectors_ND[order])

    def embedding_count(self, corpus: str, model: str) -> int:
        """Number of stored embeddings of `corpus` by `model` (cheap; lets callers validate a cached copy)."""
        with self.session() as conn:
            row = _first(
                conn.execute(
                    "SELECT count(*) FROM window_vectors WHERE corpus = ? AND model = ?", [corpus, model]
                )
            )
        return int(row[0]) if row else 0

    def windows_missing_embeddings(self, corpus: str, model: str) -> np.ndarray:
        """Ids of stored windows of `corpus` without an embedding by `model` (ascending)."""
        with self.session() as conn:
            table = _arrow(
                conn,
                "SELECT w.window_id FROM windows w ANTI JOIN window_vectors e "
                "ON e.corpus = w.corpus AND e.window_id = w.window_id AND e.model = ? "
                "WHERE w.corpus = ? ORDER BY w.window_id",
                [model, corpus],
            )
        return table.column(0).to_numpy().astype(np.int64)

    # ------------------------------------------------------------------ feature statistics

    def compute_activation_stats(
        self,
        sae_id: str,
        quantile_levels: Sequence[float] = DEFAULT_QUANTILE_LEVELS,
        n_bins: int = DEFAULT_HIST_BINS,
    ) -> int:
        """(Re)compute density, max, mean, quantiles and histogram of every active feature in SQL; return features."""
        progress = self._indexed(sae_id)
        levels = [float(q) for q in quantile_levels]
        with self.session() as conn:
            agg = _arrow(
                conn,
                "SELECT feature, count(*) AS n_active, count(DISTINCT window_id) AS n_windows, max(value) AS mx, "
                "avg(value) AS mean, quantile_cont(value, ?::DOUBLE[]) AS q FROM activations WHERE sae_id = ? "
                "GROUP BY feature ORDER BY feature",
                [levels, sae_id],
            )
            hist = _arrow(
                conn,
                "WITH m AS (SELECT feature, max(value) AS mx FROM activations WHERE sae_id = ? GROUP BY feature) "
                "SELECT a.feature, least(greatest(floor(a.value / m.mx * ?), 0), ? - 1)::INTEGER AS bin, "
                "count(*) AS c FROM activations a JOIN m USING (feature) WHERE a.sae_id = ? AND m.mx > 0 GROUP BY ALL",
                [sae_id, n_bins, n_bins, sae_id],
            )
        features = agg.column("feature").to_numpy().astype(np.int64)
        maxes = agg.column("mx").to_numpy().astype(np.float32)
        counts_FB = np.zeros((len(features), n_bins), dtype=np.int64)
        if hist.num_rows:
            rows = _row_index(features, hist.column("feature").to_numpy().astype(np.int64))
            counts_FB[rows, hist.column("bin").to_numpy()] = hist.column("c").to_numpy()
        edges_FB1 = (
            np.linspace(0.0, 1.0, n_bins + 1, dtype=np.float32)[None, :] * np.maximum(maxes, 0)[:, None]
        )
        n_tokens = max(progress.n_tokens, 1)
        stats = pa.table(
            {
                "sae_id": pa.array([sae_id] * len(features), pa.string()),
                "feature": pa.array(features.astype(np.int32)),
                "n_active": agg.column("n_active"),
                "n_windows_active": agg.column("n_windows"),
                "density": pa.array(agg.column("n_active").to_numpy() / n_tokens),
                "max_value": pa.array(maxes),
                "mean_value": pa.array(agg.column("mean").to_numpy().astype(np.float32)),
                "quantile_levels": pa.array([levels] * len(features), pa.list_(pa.float32())),
                "quantiles": agg.column("q").cast(pa.list_(pa.float32())),
                "hist_edges": _list_column(edges_FB1, pa.float32()),
                "hist_counts": _list_column(counts_FB, pa.int64()),
            }
        )
        with self._write() as conn:
            conn.execute("DELETE FROM feature_stats WHERE sae_id = ?", [sae_id]).fetchall()
            conn.register("_stats", stats)
            try:
                conn.execute("INSERT INTO feature_stats SELECT * FROM _stats").fetchall()
            finally:
                conn.unregister("_stats")
        return len(features)

    def put_feature_neighbours(self, sae_id: str, table: pa.Table) -> None:
        """Replace logit-lens tokens, decoder-cosine and co-occurrence neighbours of `sae_id`.

        `table` has the feature_neighbours columns except sae_id: feature, logit_top_tokens, logit_top_values,
        logit_bottom_tokens, logit_bottom_values, decoder_neighbours, decoder_cosines, cooc_neighbours, cooc_jaccard.
        """
        with self._write() as conn:
            conn.execute("DELETE FROM feature_neighbours WHERE sae_id = ?", [sae_id]).fetchall()
            conn.register("_nb", table)
            try:
                conn.execute(
                    "INSERT INTO feature_neighbours SELECT ?, feature, logit_top_tokens, logit_top_values, "
                    "logit_bottom_tokens, logit_bottom_values, decoder_neighbours, decoder_cosines, cooc_neighbours, "
                    "cooc_jaccard FROM _nb",
                    [sae_id],
                ).fetchall()
            finally:
                conn.unregister("_nb")

    def feature_stats(self, sae_id: str, feature: int) -> FeatureStats:
        """Dashboard statistics of one feature (zeros for a feature never active)."""
        progress = self._indexed(sae_id)
        with self.session() as conn:
            row = _first(
                conn.execute(
                    "SELECT s.n_active, s.n_windows_active, s.density, s.max_value, s.mean_value, s.quantile_levels, "
                    "s.quantiles, s.hist_edges, s.hist_counts, n.logit_top_tokens, n.logit_top_values, "
                    "n.logit_bottom_tokens, n.logit_bottom_values, n.decoder_neighbours, n.decoder_cosines, "
                    "n.cooc_neighbours, n.cooc_jaccard FROM (SELECT ?::TEXT AS sae_id, ?::INTEGER AS feature) k "
                    "LEFT JOIN feature_stats s USING (sae_id, feature) LEFT JOIN feature_neighbours n USING (sae_id, feature)",
                    [sae_id, int(feature)],
                )
            )
        assert row is not None
        if not progress.finalized and row[0] is None:
            raise NotIndexedError(
                f"statistics of SAE {sae_id} are not computed yet; finish `workbench index`."
            )

        def floats(v: Any) -> list[float]:
            return [float(x) for x in v] if v is not None else []

        return FeatureStats(
            sae_id=sae_id,
            feature=int(feature),
            n_active=int(row[0] or 0),
            n_windows_active=int(row[1] or 0),
            density=float(row[2] or 0.0),
            max_value=float(row[3] or 0.0),
            mean_value=float(row[4] or 0.0),
            quantile_levels=floats(row[5]),
            quantiles=floats(row[6]),
            hist_edges=floats(row[7]),
            hist_counts=[int(x) for x in row[8]] if row[8] is not None else [],
            logit_top_tokens=list(row[9] or []),
            logit_top_values=floats(row[10]),
            logit_bottom_tokens=list(row[11] or []),
            logit_bottom_values=floats(row[12]),
            decoder_neighbours=[int(x) for x in row[13] or []],
            decoder_cosines=floats(row[14]),
            cooc_neighbours=[int(x) for x in row[15] or []],
            cooc_jaccard=floats(row[16]),
        )

    def feature_table(self, sae_id: str) -> pa.Table:
        """One row per active feature: feature, n_active, n_windows_active, density, max_value, mean_value."""
        with self.session() as conn:
            return _arrow(
                conn,
                "SELECT feature, n_active, n_windows_active, density, max_value, mean_value FROM feature_stats "
                "WHERE sae_id = ? ORDER BY feature",
                [sae_id],
            )

    # ------------------------------------------------------------------ explanations, scores, evals

    def add_explanation(self, record: ExplanationRecord) -> int:
        """Store an explanation; return its id (the existing row's id if its config_key is already stored)."""
        return self.add_explanations([record])[0]

    def add_explanations(self, records: Sequence[ExplanationRecord]) -> list[int]:
        """Store explanations in one transaction (one commit); return their ids in order.

        A record whose config_key is already stored (or repeated earlier in `records`) is not inserted again; its
        id is the stored row's. Batching is what makes a job's writes cheap: one commit (a WAL fsync, ~10 ms) per
        batch instead of per record.
        """
        if not records:
            return []
        keys = [r.config_key for r in records]
        with self._write(invalidates=False) as conn:
            if len(keys) == 1:
                found = conn.execute("SELECT id, config_key FROM explanations WHERE config_key = ?", keys)
            else:
                found = conn.execute(
                    "SELECT id, config_key FROM explanations WHERE config_key IN (SELECT unnest(?::TEXT[]))",
                    [keys],
                )
            ids: dict[str, int] = {str(k): int(i) for i, k in found.fetchall()}
            first: dict[str, ExplanationRecord] = {}
            for r in records:
                if r.config_key not in ids:
                    first.setdefault(r.config_key, r)
            new = list(first.values())
            rows = [_explanation_row(r) for r in new]
            columns = ", ".join(_EXPLANATION_COLUMNS)
            if len(rows) == 1:
                inserted = conn.execute(
                    f"INSERT INTO explanations ({columns}) VALUES ({', '.join('?' * len(_EXPLANATION_COLUMNS))}) "
                    "RETURNING id, config_key",
                    rows[0],
                ).fetchall()
            elif rows:
                table = pa.table(
                    [
                        pa.array(list(col), type=t)
                        for col, t in zip(zip(*rows, strict=True), _EXPLANATION_TYPES, strict=True)
                    ],
                    names=list(_EXPLANATION_COLUMNS),
                )
                conn.register("_new_expl", table)
                try:
                    inserted = conn.execute(
                        f"INSERT INTO explanations ({columns}) SELECT {columns} FROM _new_expl RETURNING id, config_key"
                    ).fetchall()
                finally:
                    conn.unregister("_new_expl")
            else:
                inserted = []
            ids.update({str(k): int(i) for i, k in inserted})
        return [ids[k] for k in keys]

    def has_explanation(self, config_key: str) -> bool:
        """Whether an explanation with this config key is stored (lets stages skip done work)."""
        return config_key in self.stored_explanation_keys([config_key])

    def stored_explanation_keys(self, config_keys: Sequence[str]) -> set[str]:
        """The subset of `config_keys` already stored (one query: how a job finds what to skip on resume)."""
        if not config_keys:
            return set()
        with self.session() as conn:
            rows = conn.execute(
                "SELECT config_key FROM explanations WHERE config_key IN (SELECT unnest(?::TEXT[]))",
                [list(config_keys)],
            ).fetchall()
        return {str(r[0]) for r in rows}

    def explanations(
        self, sae_id: str | None = None, feature: int | None = None, explainer: str | None = None
    ) -> list[ExplanationRecord]:
        """Stored explanations, filtered by any of SAE / feature / explainer, oldest first."""
        return self._explanations(
            "(? IS NULL OR sae_id = ?) AND (? IS NULL OR feature = ?) AND (? IS NULL OR explainer = ?)",
            [sae_id, sae_id, feature, feature, explainer, explainer],
        )

    def get_explanation(self, explanation_id: int) -> ExplanationRecord:
        """One explanation by id (StoreError if absent)."""
        found = self._explanations("id = ?", [explanation_id])
        if not found:
            raise StoreError(f"no explanation with id {explanation_id} in {self.path}.")
        return found[0]

    def _explanations(self, where: str, params: list[Any]) -> list[ExplanationRecord]:
        """Explanations matching a WHERE clause (internal)."""
        with self.session() as conn:
            rows = conn.execute(
                "SELECT id, sae_id, feature, explainer, explainer_version, prompt_version, llm_model, llm_params, "
                "sampling, example_ids, negative_ids, text, rules, extra, tokens_in, tokens_out, seconds, created_at, "
                f"config_key FROM explanations WHERE {where} ORDER BY id",
                params,
            ).fetchall()
        return [
            ExplanationRecord(
                id=int(r[0]),
                sae_id=r[1],
                feature=int(r[2]),
                explainer=r[3],
                explainer_version=r[4],
                prompt_version=r[5],
                llm_model=r[6],
                llm_params=_loads(r[7]),
                sampling=_loads(r[8]),
                example_ids=[int(i) for i in r[9]],
                negative_ids=[int(i) for i in r[10]],
                text=r[11],
                rules=_loads(r[12]),
                extra=_loads(r[13]),
                tokens_in=int(r[14]),
                tokens_out=int(r[15]),
                seconds=float(r[16]),
                created_at=r[17],
                config_key=r[18],
            )
            for r in rows
        ]

    def add_score(self, record: ScoreRecord) -> int:
        """Store a score of an explanation; return its id."""
        with self._write(invalidates=False) as conn:
            row = _first(
                conn.execute(
                    "INSERT INTO scores (explanation_id, scorer, scorer_version, negative_source, metrics, provenance) "
                    "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                    [
                        record.explanation_id,
                        record.scorer,
                        record.scorer_version,
                        record.negative_source,
                        _dumps(record.metrics),
                        _dumps(record.provenance),
                    ],
                )
            )
        assert row is not None
        return int(row[0])

    def scores(
        self, explanation_id: int | None = None, scorer: str | None = None, sae_id: str | None = None
    ) -> list[ScoreRecord]:
        """Stored scores filtered by explanation, scorer and/or SAE, oldest first."""
        with self.session() as conn:
            rows = conn.execute(
                "SELECT s.id, s.explanation_id, s.scorer, s.scorer_version, s.negative_source, s.metrics, "
                "s.provenance, s.created_at FROM scores s LEFT JOIN explanations e ON e.id = s.explanation_id "
                "WHERE (? IS NULL OR s.explanation_id = ?) AND (? IS NULL OR s.scorer = ?) "
                "AND (? IS NULL OR e.sae_id = ?) ORDER BY s.id",
                [explanation_id, explanation_id, scorer, scorer, sae_id, sae_id],
            ).fetchall()
        return [
            ScoreRecord(
                int(r[1]), r[2], r[3], r[4], _loads(r[5]), _loads(r[6]), id=int(r[0]), created_at=r[7]
            )
            for r in rows
        ]

    def add_eval(self, sae_id: str, eval_type_id: str, result: dict[str, Any]) -> int:
        """Store an SAE-level evaluation result; return its id."""
        with self._write(invalidates=False) as conn:
            row = _first(
                conn.execute(
                    "INSERT INTO evals (sae_id, eval_type_id, eval) VALUES (?, ?, ?) RETURNING id",
                    [sae_id, eval_type_id, _dumps(result)],
                )
            )
        assert row is not None
        return int(row[0])

    def evals(self, sae_id: str | None = None, eval_type_id: str | None = None) -> list[EvalRecord]:
        """Stored evaluations, filtered by SAE and/or type, oldest first."""
        with self.session() as conn:
            rows = conn.execute(
                "SELECT id, sae_id, eval_type_id, eval, created_at FROM evals WHERE (? IS NULL OR sae_id = ?) "
                "AND (? IS NULL OR eval_type_id = ?) ORDER BY id",
                [sae_id, sae_id, eval_type_id, eval_type_id],
            ).fetchall()
        return [EvalRecord(r[1], r[2], _loads(r[3]), id=int(r[0]), created_at=r[4]) for r in rows]

    # ------------------------------------------------------------------ LLM cache

    def llm_cache_get(self, key: str) -> LLMCacheEntry | None:
        """The cached response for `key`, or None."""
        with self.session() as conn:
            row = _first(
                conn.execute(
                    "SELECT key, model, response, tokens, created_at FROM llm_cache WHERE key = ?", [key]
                )
            )
        return None if row is None else LLMCacheEntry(row[0], row[1], _loads(row[2]), int(row[3]), row[4])

    def llm_cache_put(self, key: str, model: str, response: dict[str, Any], tokens: int) -> None:
        """Cache a response (a second put of the same key keeps the first)."""
        self.llm_cache_put_many([(key, model, response, tokens)])

    def llm_cache_put_many(self, entries: Sequence[tuple[str, str, dict[str, Any], int]]) -> None:
        """Cache many (key, model, response, tokens) entries in one transaction (first put of a key wins)."""
        if not entries:
            return
        with self._write(invalidates=False) as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO llm_cache (key, model, response, tokens) VALUES (?, ?, ?, ?)",
                [[key, model, _dumps(response), int(tokens)] for key, model, response, tokens in entries],
            )

    # ------------------------------------------------------------------ export

    def export_parquet(self, folder: str | Path) -> list[Path]:
        """Write every table to `folder/<table>.parquet` (zstd); return the files."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        files: list[Path] = []
        with self.session() as conn:
            for table in self.table_names():
                path = out / f"{table}.parquet"
                conn.execute(
                    f"COPY {table} TO '{_sql_path(path)}' (FORMAT parquet, COMPRESSION zstd)"
                ).fetchall()
                files.append(path)
        return files

    def import_parquet(self, folder: str | Path) -> list[str]:
        """Append rows from `folder/<table>.parquet` files written by export_parquet into this (empty) store."""
        imported: list[str] = []
        with self._write() as conn:
            for table in self.table_names():
                if table == "schema_migrations":
                    continue
                path = Path(folder) / f"{table}.parquet"
                if path.exists():
                    conn.execute(
                        f"INSERT INTO {table} SELECT * FROM read_parquet('{_sql_path(path)}')"
                    ).fetchall()
                    imported.append(table)
            for seq, table in (("explanation_ids", "explanations"), ("score_ids", "scores"), ("eval_ids", "evals"),
                               ("sample_ids", "samples")):  # fmt: skip
                row = _first(conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}"))
                if row and row[0]:
                    # Sequences cannot be altered in place; advance them past the imported ids.
                    conn.execute(f"SELECT max(nextval('{seq}')) FROM range(?)", [int(row[0])]).fetchall()
        return imported

    # ------------------------------------------------------------------ helpers

    def _indexed(self, sae_id: str) -> IndexProgress:
        """Index progress of `sae_id`, raising NotIndexedError when it was never indexed."""
        progress = self.index_progress(sae_id)
        if progress is None:
            self.get_sae(sae_id)
            raise NotIndexedError(
                f"SAE {sae_id} has no activations in {self.path}; run `workbench index` first."
            )
        return progress


_EXPLANATION_COLUMNS = (
    "sae_id", "feature", "explainer", "explainer_version", "prompt_version", "llm_model", "llm_params", "sampling",
    "example_ids", "negative_ids", "text", "rules", "extra", "tokens_in", "tokens_out", "seconds", "config_key",
)  # fmt: skip
_EXPLANATION_TYPES = (
    pa.string(), pa.int32(), pa.string(), pa.string(), pa.string(), pa.string(), pa.string(), pa.string(),
    pa.list_(pa.int64()), pa.list_(pa.int64()), pa.string(), pa.string(), pa.string(), pa.int64(), pa.int64(),
    pa.float64(), pa.string(),
)  # fmt: skip


def _explanation_row(r: ExplanationRecord) -> list[Any]:
    """Values of an explanation in `_EXPLANATION_COLUMNS` order (JSON columns as text)."""
    return [
        r.sae_id, int(r.feature), r.explainer, r.explainer_version, r.prompt_version, r.llm_model,
        _dumps(r.llm_params), _dumps(r.sampling), [int(i) for i in r.example_ids], [int(i) for i in r.negative_ids],
        r.text, None if r.rules is None else _dumps(r.rules), _dumps(r.extra), int(r.tokens_in), int(r.tokens_out),
        float(r.seconds), r.config_key,
    ]  # fmt: skip


def _arrow(conn: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> pa.Table:
    """Run a query and return its rows as an Arrow table (the relational API avoids an extra copy)."""
    return conn.sql(sql, params=params).to_arrow_table()


def _numpy(conn: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> dict[str, np.ndarray]:
    """Run a query with a small numeric result and return its columns as numpy arrays (no NULLs expected).

    For small results this is ~3× faster than the relational API's Arrow path (which plans the query twice).
    """
    return {k: np.asarray(v) for k, v in conn.execute(sql, params).fetchnumpy().items()}


# Up to this many ids are inlined as an IN list (DuckDB pushes it into the scan as a filter and skips row groups by
# their min/max); longer lists go through one list parameter.
_INLINE_IDS = 4096


def _require_windows(corpus: str, ids: Sequence[int], found: Container[int]) -> None:
    """StoreError naming the ids among `ids` that a window query did not find."""
    missing = [i for i in ids if i not in found]
    if missing:
        raise StoreError(f"windows {missing[:10]} of corpus {corpus!r} are not in the store.")


def _in_ids(column: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
    """A `column IN (...)` predicate over integer ids, and its parameters."""
    if len(ids) <= _INLINE_IDS:
        return f"{column} IN ({', '.join(str(int(i)) for i in ids) or 'NULL'})", []
    return f"{column} IN (SELECT unnest(?::BIGINT[]))", [[int(i) for i in ids]]


def _blob_values(chunk: pa.Array) -> np.ndarray:
    """The bytes of a (large_)binary Arrow chunk's values, concatenated, as uint8 (no per-row copies)."""
    offsets_type = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
    buffers = chunk.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offsets_type)[chunk.offset : chunk.offset + len(chunk) + 1]
    return np.frombuffer(buffers[2], dtype=np.uint8)[offsets[0] : offsets[-1]]


def _first(result: duckdb.DuckDBPyConnection) -> Any:
    """First row of a result (or None), consuming the whole result as DuckDB requires before the next statement."""
    rows = result.fetchall()
    return rows[0] if rows else None


def _sql_path(path: Path) -> str:
    """A path as a single-quoted SQL string body."""
    return str(path).replace("'", "''")


def _row_index(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Index of each value of `wanted` in `ids` (values of `wanted` must occur in `ids`)."""
    order = np.argsort(ids, kind="stable")
    return order[np.searchsorted(ids, wanted, sorter=order)]


def _activation_table(batch: pa.Table | pa.RecordBatch) -> pa.Table:
    """Validate and cast an activation batch to the store's column types."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    missing = [c for c in ACTIVATION_COLUMNS if c not in table.column_names]
    if missing:
        raise StoreError(f"activation batch lacks columns {missing}; expected {list(ACTIVATION_COLUMNS)}.")
    return table.select(list(ACTIVATION_COLUMNS)).cast(_ACTIVATION_SCHEMA)


def _sae_record(row: tuple[Any, ...]) -> SAERecord:
    """A saes row as a record."""
    return SAERecord(row[0], row[1], row[2], int(row[3]), int(row[4]), _loads(row[5]), _loads(row[6]), row[7])


def _schema_version(conn: duckdb.DuckDBPyConnection) -> int:
    """Highest applied migration (0 for a blank database)."""
    exists = _first(
        conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
            "AND table_name = 'schema_migrations'"
        )
    )
    if not exists or not exists[0]:
        return 0
    row = _first(conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations"))
    return int(row[0]) if row else 0


def _migrate(conn: duckdb.DuckDBPyConnection, current: int) -> None:
    """Apply every migration above `current`, each in its own transaction, recording it."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)"
    ).fetchall()
    for migration in MIGRATIONS:
        if migration.version <= current:
            continue
        conn.execute("BEGIN TRANSACTION").fetchall()
        try:
            for statement in statements(migration.sql):
                conn.execute(statement).fetchall()
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                [migration.version, migration.name],
            ).fetchall()
            conn.execute("COMMIT").fetchall()
        except BaseException:
            conn.execute("ROLLBACK").fetchall()
            raise
        log.info("store migrated to schema version %d (%s)", migration.version, migration.name)
