"""Indexing bookkeeping and the activation tables: `index_runs`, `activations_staging`, `activations`.

Written by `sae_workbench.sae.index_loop`: start_index, then add_index_batch per batch (atomic, idempotent), then
finalize_index, which sorts the staged rows by feature into the query table.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow.compute  # pyright: ignore[reportMissingTypeStubs]  (no stubs, see sql.py)

from sae_workbench.store.errors import (
    IndexConfigError,
    NonFiniteActivationsError,
    NotIndexedError,
    StoreError,
)
from sae_workbench.store.rows import IndexProgress
from sae_workbench.store.saes import SAEs
from sae_workbench.store.sql import (
    RecordBatch,
    Table,
    arrow,
    count,
    dumps,
    first,
    insert_arrow,
    loads,
    numpy_columns,
    pa,
)
from sae_workbench.store.windows import Windows

pc: Any = pyarrow.compute
"""pyarrow.compute (untyped)."""
ACTIVATION_COLUMNS = ("feature", "window_id", "position", "value")
"""Columns of an activation batch (add_activations)."""
COOC_SAMPLE_KEY = "cooc_sample"
"""Key of an index run's config that records the windows the co-occurrence neighbours were estimated on."""


class WindowPrefix(NamedTuple):
    """The first windows of an SAE (smallest ids) whose activation rows fit a budget (`Indexing.window_prefix`)."""

    window_end: int | None
    """Exclusive bound: the id of the first window left out, or None when every window fits."""
    n_windows: int
    """Windows (with at least one activation row) in the prefix."""
    n_rows: int
    """Activation rows of those windows."""
    total_windows: int
    """Windows with at least one activation row, all of them."""
    total_rows: int
    """Activation rows of the SAE, all of them."""


class Indexing(SAEs, Windows):
    """The `index_runs`, `activations_staging` and `activations` tables."""

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
                [sae_id, corpus, context_size, top_k, dumps(config)],
            ).fetchall()
        progress = self.index_progress(sae_id)
        assert progress is not None
        return progress

    def index_progress(self, sae_id: str) -> IndexProgress | None:
        """Indexing state of `sae_id`, or None if never indexed."""
        return self._cached(("progress", sae_id), lambda: self._read_progress(sae_id))

    def _read_progress(self, sae_id: str) -> IndexProgress | None:
        """index_progress without the session cache."""
        with self._conn() as conn:
            row = first(
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
            config=loads(row[7]),
        )

    def _indexed(self, sae_id: str) -> IndexProgress:
        """Index progress of `sae_id`, raising NotIndexedError when it was never indexed."""
        progress = self.index_progress(sae_id)
        if progress is None:
            self.get_sae(sae_id)
            raise NotIndexedError(
                f"SAE {sae_id} has no activations in {self.path}; run `workbench index` first."
            )
        return progress

    def add_activations(self, sae_id: str, batch: Table | RecordBatch) -> int:
        """Append sparse activations (columns feature, window_id, position, value) to staging; return rows added.

        Rows become queryable after `finalize_index`, which sorts them by feature. Prefer `add_index_batch`, which
        also records progress in the same transaction (resumable, no duplicates).
        """
        table = _activation_table(batch)
        with self._write() as conn:
            insert_arrow(
                conn,
                "_new_acts",
                table,
                "INSERT INTO activations_staging SELECT ?, feature, window_id, position, value FROM _new_acts",
                [sae_id],
            )
        return int(table.num_rows)

    def add_index_batch(
        self,
        sae_id: str,
        corpus: str,
        windows: dict[str, Any],
        activations: Table | RecordBatch,
        next_window: int,
        n_tokens: int,
    ) -> None:
        """Atomically store one indexed batch: windows (kwargs of add_windows minus corpus), activations, progress.

        Skips the batch if progress is already past `next_window` (a re-run after a crash between commit and
        return), so no activation row is ever written twice.
        """
        with self._write() as conn:
            row = first(conn.execute("SELECT next_window FROM index_runs WHERE sae_id = ?", [sae_id]))
            if row is None:
                raise NotIndexedError(f"call start_index({sae_id!r}, …) before add_index_batch.")
            if int(row[0]) >= next_window:
                return
            self.add_windows(corpus, **windows)
            self.add_activations(sae_id, activations)
            self.clear_index_steps(sae_id)
            conn.execute(
                "UPDATE index_runs SET next_window = ?, n_tokens = n_tokens + ?, finalized = false, "
                "updated_at = current_timestamp WHERE sae_id = ?",
                [next_window, n_tokens, sae_id],
            ).fetchall()

    def finalize_index(self, sae_id: str) -> int:
        """Move staged activations into the query table sorted by (feature, window, position); return rows moved.

        Sorting by feature makes DuckDB's per-row-group min/max skip almost everything for one-feature queries.
        A partitioned SAE (`activations_root`) refuses staged rows: the table is no longer where it is read from.
        """
        if self.activations_root(sae_id) is not None and self.activation_count(sae_id, staged=True):
            raise StoreError(
                f"SAE {sae_id}'s activations were moved to Parquet under {self.activations_root(sae_id)}; staged rows "
                "cannot be added to them. Index it into a new store, or write its buckets with the partitioned writer."
            )
        with self._write() as conn:
            conn.execute(
                "INSERT INTO activations SELECT * FROM activations_staging WHERE sae_id = ? "
                "ORDER BY feature, window_id, position",
                [sae_id],
            ).fetchall()
            moved = count(conn.execute("DELETE FROM activations_staging WHERE sae_id = ?", [sae_id]))
            conn.execute("UPDATE index_runs SET finalized = true WHERE sae_id = ?", [sae_id]).fetchall()
        return moved

    def index_steps(self, sae_id: str) -> dict[str, dict[str, Any]]:
        """The post-index steps of `sae_id` recorded as finished (`statistics`, `neighbours`) -> their config."""
        with self._conn() as conn:
            rows = conn.execute("SELECT step, config FROM index_steps WHERE sae_id = ?", [sae_id]).fetchall()
        return {str(r[0]): dict(loads(r[1])) for r in rows}

    def record_index_step(self, sae_id: str, step: str, config: dict[str, Any]) -> None:
        """Record post-index step `step` of `sae_id` as finished (call in the transaction that writes its rows)."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO index_steps (sae_id, step, config) VALUES (?, ?, ?)",
                [sae_id, step, dumps(config)],
            ).fetchall()

    def clear_index_steps(self, sae_id: str) -> None:
        """Forget that `sae_id`'s post-index steps finished (new activation rows make them stale)."""
        with self._write() as conn:
            conn.execute("DELETE FROM index_steps WHERE sae_id = ?", [sae_id]).fetchall()

    def activation_count(self, sae_id: str, staged: bool = False) -> int:
        """Number of stored activation rows of `sae_id` (query table, or staging when `staged`)."""
        with self._conn() as conn:
            table = "activations_staging" if staged else self._activations_sql(sae_id)
            return count(conn.execute(f"SELECT count(*) FROM {table} WHERE sae_id = ?", [sae_id]))

    def activation_coordinates(self, sae_id: str, window_end: int | None = None) -> Table:
        """The (feature, window_id, position, value) rows of `sae_id` as Arrow (for vectorised statistics): all of
        them, or with `window_end` only those of windows with id < window_end.

        The bound is a WHERE clause of the scan, so DuckDB filters the table (or the Parquet files, row group by row
        group) while reading and only the kept rows reach memory.
        """
        bound, params = (
            ("", [sae_id]) if window_end is None else (" AND window_id < ?", [sae_id, int(window_end)])
        )
        with self._conn() as conn:
            acts = self._activations_sql(sae_id)
            return arrow(
                conn,
                f"SELECT feature, window_id, position, value FROM {acts} WHERE sae_id = ?{bound}",
                params,
            )

    def window_prefix(self, sae_id: str, max_rows: int) -> WindowPrefix:
        """The longest run of `sae_id`'s windows, in id order from the smallest, whose activation rows total at most
        `max_rows` (rows counted per window id in SQL, cumulative sum, cut at the budget)."""
        if max_rows < 0:
            raise StoreError(f"max_rows must be >= 0, got {max_rows}.")
        with self._conn() as conn:
            acts = self._activations_sql(sae_id)
            row = first(
                conn.execute(
                    f"WITH w AS (SELECT window_id, count(*) AS n FROM {acts} WHERE sae_id = ? GROUP BY window_id), "
                    "c AS (SELECT window_id, sum(n) OVER (ORDER BY window_id) AS cum FROM w) "
                    "SELECT count(*) FILTER (WHERE cum <= ?), coalesce(max(cum) FILTER (WHERE cum <= ?), 0), "
                    "min(window_id) FILTER (WHERE cum > ?), coalesce(max(cum), 0), count(*) FROM c",
                    [sae_id, max_rows, max_rows, max_rows],
                )
            )
        assert row is not None
        return WindowPrefix(
            window_end=None if row[2] is None else int(row[2]),
            n_windows=int(row[0]),
            n_rows=int(row[1]),
            total_windows=int(row[4]),
            total_rows=int(row[3]),
        )

    def record_cooccurrence_sample(self, sae_id: str, sample: dict[str, int] | None) -> None:
        """Note in `sae_id`'s index run (its config, key `cooc_sample`) which windows and rows the co-occurrence
        neighbours were computed on; None removes the note (they were computed on every row)."""
        config = dict(self._indexed(sae_id).config)
        if sample is None and COOC_SAMPLE_KEY not in config:
            return
        if sample is None:
            del config[COOC_SAMPLE_KEY]
        else:
            config[COOC_SAMPLE_KEY] = dict(sample)
        with self._write() as conn:
            conn.execute(
                "UPDATE index_runs SET config = ?, updated_at = current_timestamp WHERE sae_id = ?",
                [dumps(config), sae_id],
            ).fetchall()

    def indexed_window_ids(self, sae_id: str) -> np.ndarray:
        """Ids of the windows `sae_id` was indexed over (ascending)."""
        return self._cached(("indexed", sae_id), lambda: self._read_indexed(sae_id)).copy()

    def _read_indexed(self, sae_id: str) -> np.ndarray:
        """indexed_window_ids without the session cache."""
        progress = self._indexed(sae_id)
        with self._conn() as conn:
            windows = self._windows_sql(progress.corpus)
            cols = numpy_columns(
                conn,
                f"SELECT window_id FROM {windows} WHERE corpus = ? AND window_id < ? ORDER BY window_id",
                [progress.corpus, progress.next_window],
            )
        return cols["window_id"].astype(np.int64)


_ACTIVATION_SCHEMA = pa.schema(
    [("feature", pa.int32()), ("window_id", pa.int64()), ("position", pa.int16()), ("value", pa.float32())]
)


def _activation_table(batch: Table | RecordBatch) -> Table:
    """Validate and cast an activation batch to the store's column types."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    missing = [c for c in ACTIVATION_COLUMNS if c not in table.column_names]
    if missing:
        raise StoreError(f"activation batch lacks columns {missing}; expected {list(ACTIVATION_COLUMNS)}.")
    table = table.select(list(ACTIVATION_COLUMNS)).cast(_ACTIVATION_SCHEMA)
    values = table.column("value")
    n_bad = int(values.length() - pc.sum(pc.is_finite(values)).as_py()) if values.length() else 0
    if n_bad:
        raise NonFiniteActivationsError(
            f"{n_bad:,} of {values.length():,} activation values are NaN or infinite; nothing was written. The SAE or "
            "the model computes non-finite values on this input (check its weights with `load_sae`, or run in float32)."
        )
    return table
