"""Token windows of a corpus (`windows`, or its Parquet view for a graduated corpus: `partitioned.py`), keyed by
(corpus, window_id)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import numpy as np

from sae_workbench.store.errors import StoreError
from sae_workbench.store.partitioned import Partitions
from sae_workbench.store.rows import Window
from sae_workbench.store.sql import (
    count,
    in_ids,
    insert_arrow,
    list_column,
    numpy_columns,
    pa,
    require_windows,
)


def insert_staged_windows(conn: duckdb.DuckDBPyConnection, relation: str, corpus: str) -> None:
    """Copy `corpus`'s rows of a staged windows relation (a `read_parquet(...)` of a Ray index range) into `windows`,
    keeping rows already stored, inside the caller's transaction (the range commits atomically)."""
    conn.execute(
        'INSERT OR IGNORE INTO windows SELECT corpus, window_id, tokens, text, token_strings, source, "offset", '
        f"mask FROM {relation} WHERE corpus = ?",
        [corpus],
    ).fetchall()


class Windows(Partitions):
    """The `windows` table."""

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
        if self.windows_root(corpus) is not None:
            raise StoreError(
                f"the windows of corpus {corpus!r} were moved to Parquet under {self.windows_root(corpus)}; new "
                "windows cannot join them. Index into a new store."
            )
        lengths = np.array([len(s) for s in token_strings])
        if not (lengths == tokens_BT.shape[1]).all():
            raise StoreError("token_strings must have one string per position of each window.")
        table = pa.table(
            {
                "corpus": pa.array([corpus] * n, pa.string()),
                "window_id": pa.array(np.asarray(window_ids, dtype=np.int64)),
                "tokens": list_column(np.asarray(tokens_BT, dtype=np.int32), pa.int32()),
                "text": pa.array(list(texts), pa.string()),
                "token_strings": pa.array([list(s) for s in token_strings], pa.list_(pa.string())),
                "source": pa.array(list(sources), pa.string()),
                "offset": pa.array(np.asarray(offsets, dtype=np.int64)),
                "mask": list_column(np.asarray(mask_BT, dtype=bool), pa.bool_()),
            }
        )
        with self._write() as conn:
            before = count(conn.execute("SELECT count(*) FROM windows WHERE corpus = ?", [corpus]))
            insert_arrow(
                conn, "_new_windows", table, "INSERT OR IGNORE INTO windows SELECT * FROM _new_windows", []
            )
            after = count(conn.execute("SELECT count(*) FROM windows WHERE corpus = ?", [corpus]))
        return after - before

    def get_windows(self, corpus: str, window_ids: Sequence[int] | np.ndarray) -> list[Window]:
        """Windows by id, in the order asked (missing ids raise StoreError)."""
        ids = [int(i) for i in window_ids]
        with self._conn() as conn:
            windows, chunks = self._windows_sql(corpus), self._chunk_filter(corpus, ids)
            where, params = in_ids("window_id", ids)
            rows = conn.execute(
                f'SELECT window_id, tokens, text, token_strings, source, "offset", mask FROM {windows} '
                f"WHERE corpus = ?{chunks} AND {where}",
                [corpus, *params],
            ).fetchall()
        by_id = {
            int(r[0]): Window(
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
        require_windows(corpus, ids, by_id)
        return [by_id[i] for i in ids]

    def _window_columns(self, corpus: str, ids: list[int], columns: str) -> dict[str, np.ndarray]:
        """`window_id` and `columns` (comma-separated) of windows by id, as numpy columns."""
        with self._conn() as conn:
            windows, chunks = self._windows_sql(corpus), self._chunk_filter(corpus, ids)
            where, params = in_ids("window_id", ids)
            return numpy_columns(
                conn,
                f"SELECT window_id, {columns} FROM {windows} WHERE corpus = ?{chunks} AND {where}",
                [corpus, *params],
            )

    def window_tokens(
        self, corpus: str, window_ids: Sequence[int] | np.ndarray
    ) -> dict[int, tuple[list[str], np.ndarray]]:
        """(token display strings, (T,) bool mask) of windows by id — what records need, without the rest of a
        Window (missing ids raise StoreError)."""
        ids = [int(i) for i in window_ids]
        cols = self._window_columns(corpus, ids, "token_strings, mask")
        out: dict[int, tuple[list[str], np.ndarray]] = {
            int(w): ([str(s) for s in strings], np.asarray(mask, dtype=bool))
            for w, strings, mask in zip(cols["window_id"], cols["token_strings"], cols["mask"], strict=True)
        }
        require_windows(corpus, ids, out)
        return out

    def window_masks(self, corpus: str, window_ids: Sequence[int] | np.ndarray) -> dict[int, np.ndarray]:
        """(T,) bool masks of windows by id, without their tokens (missing ids raise StoreError)."""
        ids = [int(i) for i in window_ids]
        cols = self._window_columns(corpus, ids, "mask")
        out = {
            int(w): np.asarray(m, dtype=bool) for w, m in zip(cols["window_id"], cols["mask"], strict=True)
        }
        require_windows(corpus, ids, out)
        return out

    def window_ids(self, corpus: str) -> np.ndarray:
        """All stored window ids of `corpus`, ascending, int64."""
        with self._conn() as conn:
            windows = self._windows_sql(corpus)
            cols = numpy_columns(
                conn, f"SELECT window_id FROM {windows} WHERE corpus = ? ORDER BY window_id", [corpus]
            )
        return cols["window_id"].astype(np.int64)

    def window_texts(self, corpus: str, window_ids: Sequence[int] | np.ndarray) -> list[str]:
        """Decoded texts of windows, in the order asked."""
        return [w.text for w in self.get_windows(corpus, window_ids)]
