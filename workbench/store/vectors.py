"""A memory-mapped copy of a store's window embeddings, next to the store file (`<store>.vectors/`).

Fetching 100k × 384 float32 embeddings out of DuckDB takes seconds; `np.load(mmap_mode="r")` of the same bytes
takes microseconds and the OS pages them in as they are read. The copy is a pure cache: the DuckDB table stays the
source of truth, each copy is named by (corpus, model, row count), and a copy is used only while the table still has
that many rows, the same last window id and the same vector for it (embeddings are append-only per corpus and
model, so that identifies the content). Writing is best-effort (a read-only folder just means no cache).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import numpy as np

from sae_workbench.store.rows import WindowEmbeddings

log = logging.getLogger(__name__)


def vectors_dir(store_path: Path) -> Path:
    """Folder of the memory-mapped copies of `store_path`."""
    return store_path.with_name(store_path.name + ".vectors")


def _stem(corpus: str, model: str) -> str:
    """File-name stem of one (corpus, model) pair."""
    return hashlib.sha1(f"{corpus}\0{model}".encode()).hexdigest()[:20]


def _paths(folder: Path, corpus: str, model: str, count: int) -> tuple[Path, Path]:
    """(ids file, vectors file) of a copy with `count` rows."""
    stem = f"{_stem(corpus, model)}-{count}"
    return folder / f"{stem}.ids.npy", folder / f"{stem}.f32.npy"


def load_copy(
    folder: Path, corpus: str, model: str, count: int, last_id: int, last_vector: np.ndarray
) -> WindowEmbeddings | None:
    """The memory-mapped copy if it matches (count rows, same last id and last vector), else None."""
    ids_path, vec_path = _paths(folder, corpus, model, count)
    if count == 0 or not vec_path.exists():
        return None
    try:
        ids = np.load(ids_path, mmap_mode="r")
        vectors_ND = np.load(vec_path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        log.debug("ignoring unreadable embedding copy %s: %s", vec_path, exc)
        return None
    if (
        len(ids) != count
        or vectors_ND.shape != (count, len(last_vector))
        or int(ids[-1]) != last_id
        or not np.array_equal(vectors_ND[-1], last_vector)
    ):
        return None
    return WindowEmbeddings(np.asarray(ids), vectors_ND)


def save_copy(folder: Path, corpus: str, model: str, embeddings: WindowEmbeddings) -> None:
    """Write a copy (atomically: temp files renamed into place, vectors last); drop older copies of the pair."""
    count = len(embeddings.window_ids)
    if count == 0:
        return
    ids_path, vec_path = _paths(folder, corpus, model, count)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path, array in ((ids_path, embeddings.window_ids), (vec_path, embeddings.embeddings_ND)):
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            with tmp.open("wb") as fh:
                np.save(fh, np.ascontiguousarray(array))
            os.replace(tmp, path)
        for old in folder.glob(f"{_stem(corpus, model)}-*.npy"):
            if old not in (ids_path, vec_path):
                old.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("could not write embedding copy under %s: %s", folder, exc)
