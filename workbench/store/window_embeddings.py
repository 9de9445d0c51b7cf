"""Sentence embeddings of windows (`window_vectors`, float32 blobs), served from a memory-mapped copy
(`vectors.py`) while it matches the table.

The `model` column holds an embedding key: the model name for embeddings of whole windows, or
`embedding_key(model, crop)` = "<model>@first<crop>" for embeddings of each window's first `crop` tokens (BOS and
padding dropped: the record a non-activating window is shown and simulated as). Both can coexist per corpus.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from sae_workbench.store import vectors
from sae_workbench.store.partitioned import Partitions
from sae_workbench.store.rows import WindowEmbeddings
from sae_workbench.store.sql import arrow, count, first, insert_arrow, pa


def embedding_key(model: str, crop: int | None) -> str:
    """The `model` column value of `model`'s embeddings of each window's first `crop` tokens (None: whole windows)."""
    return model if crop is None else f"{model}@first{int(crop)}"


class Embeddings(Partitions):
    """The `window_vectors` table."""

    def add_window_embeddings(
        self, corpus: str, model: str, window_ids: np.ndarray, embeddings_ND: np.ndarray
    ) -> None:
        """Store sentence embeddings of windows as float32 blobs (existing rows kept)."""
        ids = np.asarray(window_ids, dtype=np.int64)
        if len(ids) == 0:
            return
        vectors_ND = np.ascontiguousarray(embeddings_ND, dtype=np.float32)
        n, dim = vectors_ND.shape
        offsets = pa.py_buffer(np.arange(0, (n + 1) * dim * 4, dim * 4, dtype=np.int32).tobytes())
        blobs = pa.BinaryArray.from_buffers(
            pa.binary(), n, [None, offsets, pa.py_buffer(vectors_ND.tobytes())]
        )
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
            insert_arrow(
                conn, "_new_emb", table, "INSERT OR IGNORE INTO window_vectors SELECT * FROM _new_emb", []
            )

    def window_embeddings(self, corpus: str, model: str) -> WindowEmbeddings:
        """All stored embeddings of `corpus` by `model`, ascending window id.

        Served from a memory-mapped copy next to the store (`workbench.store.vectors`) while it matches the table;
        otherwise fetched from DuckDB (seconds for 100k windows) and the copy (re)written for the next process.
        """
        with self._conn() as conn:
            row = first(
                conn.execute(
                    "SELECT count(*), max(window_id) FROM window_vectors WHERE corpus = ? AND model = ?",
                    [corpus, model],
                )
            )
            n, last_id = (int(row[0]), row[1]) if row else (0, None)
            if n and last_id is not None:
                probe = first(
                    conn.execute(
                        "SELECT vector FROM window_vectors WHERE corpus = ? AND model = ? AND window_id = ?",
                        [corpus, model, last_id],
                    )
                )
                last = np.frombuffer(probe[0], dtype=np.float32) if probe else np.zeros(0, np.float32)
                copy = vectors.load_copy(vectors.vectors_dir(self.path), corpus, model, n, int(last_id), last)
                if copy is not None:
                    return copy
            embeddings = _fetch_embeddings(conn, corpus, model)
        vectors.save_copy(vectors.vectors_dir(self.path), corpus, model, embeddings)
        return embeddings

    def embedding_count(self, corpus: str, model: str) -> int:
        """Number of stored embeddings of `corpus` by `model` (cheap; lets callers validate a cached copy)."""
        with self._conn() as conn:
            return count(
                conn.execute(
                    "SELECT count(*) FROM window_vectors WHERE corpus = ? AND model = ?", [corpus, model]
                )
            )

    def windows_missing_embeddings(self, corpus: str, model: str) -> np.ndarray:
        """Ids of stored windows of `corpus` without an embedding by `model` (ascending)."""
        with self._conn() as conn:
            windows = self._windows_sql(corpus)
            table = arrow(
                conn,
                f"SELECT w.window_id FROM {windows} w ANTI JOIN window_vectors e "
                "ON e.corpus = w.corpus AND e.window_id = w.window_id AND e.model = ? "
                "WHERE w.corpus = ? ORDER BY w.window_id",
                [model, corpus],
            )
        ids: np.ndarray = table.column(0).to_numpy()
        return ids.astype(np.int64)


def _fetch_embeddings(conn: duckdb.DuckDBPyConnection, corpus: str, model: str) -> WindowEmbeddings:
    """Every embedding of (corpus, model) out of DuckDB, ascending window id."""
    table = arrow(
        conn,
        "SELECT window_id, dim, vector FROM window_vectors WHERE corpus = ? AND model = ?",
        [corpus, model],
    )
    ids: np.ndarray = table.column("window_id").to_numpy().astype(np.int64)
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


def _blob_values(array: Any) -> np.ndarray:
    """The bytes of a (large_)binary Arrow chunk's values, concatenated, as uint8 (no per-row copies)."""
    offsets_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offsets_type)[array.offset : array.offset + len(array) + 1]
    return np.frombuffer(buffers[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
