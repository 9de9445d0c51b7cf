"""The ledger of a distributed indexing run (`index_ranges`): one row per committed window range [a, b).

Written only by the driver of `workbench index --backend ray` (sae/ray_index.py, specs/scale.md 4.3): a worker writes a
range's windows and activation rows to two staging Parquet files and returns their sha256; the driver commits the
range with `commit_index_range`, which in ONE transaction copies the windows and rows into `windows` and
`activations_staging`, adds the ledger row and advances `index_runs` (next_window = end of the contiguous committed
prefix, n_tokens). A crash before the commit leaves neither; after it, both. A range that overlaps a committed one is
refused (returns False), so rerunning after a crash never stores a row twice, and a staging file is only ever read for
the range the driver is committing, after its checksum matched the one the worker returned. A ledger row's `files` is
{"windows": [path, sha256], "activations": [path, sha256]}; the activation file is kept (and read by the reduce step)
only for a partitioned index (`rows_in_table=False`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from sae_workbench.store.base import StoreBase
from sae_workbench.store.errors import NonFiniteActivationsError, NotIndexedError, StoreError
from sae_workbench.store.sql import count, dumps, first, loads
from sae_workbench.store.windows import insert_staged_windows


@dataclass(frozen=True)
class IndexRange:
    """One committed window range of an SAE's index (a row of `index_ranges`)."""

    start: int
    """First window id of the range."""
    end: int
    """One past its last window id."""
    n_tokens: int
    """Counted (unmasked) tokens of its windows."""
    n_rows: int
    """Activation rows it added."""


@dataclass(frozen=True)
class StagedRange:
    """What a worker wrote for one range: two staging Parquet files, their checksums and counts."""

    start: int
    """First window id."""
    end: int
    """One past the last window id."""
    windows_file: str
    """Parquet file with the `windows` table's columns for the range."""
    windows_sha256: str
    """sha256 of that file."""
    activations_file: str
    """Parquet file with columns feature, window_id, position, value."""
    activations_sha256: str
    """sha256 of that file."""
    n_tokens: int
    """Counted (unmasked) tokens of the range."""
    n_rows: int
    """Activation rows in the activations file."""
    n_windows: int = 0
    """Windows in the windows file (fewer than end - start where the corpus ends inside the range)."""


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _literal(path: str) -> str:
    """A file path as a SQL string literal."""
    return "'" + path.replace("'", "''") + "'"


class IndexRanges(StoreBase):
    """The `index_ranges` ledger (migration 6) and the reduce step's `index_buckets` (migration 9)."""

    def index_buckets(self, sae_id: str, part: str) -> dict[int, int]:
        """Feature buckets of `sae_id`'s reduce run `part` already placed: bucket -> rows."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT fb, n_rows FROM index_buckets WHERE sae_id = ? AND part = ?", [sae_id, part]
            ).fetchall()
        return {int(r[0]): int(r[1]) for r in rows}

    def commit_index_bucket(self, sae_id: str, part: str, fb: int, n_rows: int, path: str | None) -> bool:
        """Record that bucket `fb` of reduce run `part` is in place at `path` (None: empty, no file); False (nothing
        changes) if it was recorded already."""
        with self._write() as conn:
            inserted = conn.execute(
                "INSERT OR IGNORE INTO index_buckets (sae_id, part, fb, n_rows, path) VALUES (?, ?, ?, ?, ?) "
                "RETURNING fb",
                [sae_id, part, fb, n_rows, path],
            ).fetchall()
        return bool(inserted)

    def index_range_files(self, sae_id: str) -> list[str]:
        """The activation files of `sae_id`'s committed ranges, by range start (what a partitioned reduce reads)."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT files FROM index_ranges WHERE sae_id = ? ORDER BY range_start", [sae_id]
            ).fetchall()
        return [str(cast(dict[str, list[str]], loads(row[0]))["activations"][0]) for row in rows]

    def index_ranges(self, sae_id: str) -> list[IndexRange]:
        """Committed ranges of `sae_id`, by start."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT range_start, range_end, n_tokens, n_rows FROM index_ranges WHERE sae_id = ? "
                "ORDER BY range_start",
                [sae_id],
            ).fetchall()
        return [IndexRange(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]

    def commit_index_range(
        self, sae_id: str, corpus: str, staged: StagedRange, config_hash: str, rows_in_table: bool = True
    ) -> bool:
        """Store one staged range atomically (windows, activation rows, ledger row, progress); False if any of its
        windows is already indexed (committed range, or below the progress marker), in which case nothing changes.

        `rows_in_table=False` leaves the activation rows in their file (the ledger names it): a partitioned index
        whose reduce step writes the Parquet buckets from the committed range files. StoreError when a staging
        file's checksum differs from the one its worker returned.
        """
        for path, digest in (
            (staged.windows_file, staged.windows_sha256),
            (staged.activations_file, staged.activations_sha256),
        ):
            if file_sha256(path) != digest:
                raise StoreError(
                    f"staging file {path} does not match its worker's checksum; rerun the range."
                )
        with self._conn() as conn:
            n_bad = count(
                conn.execute(
                    f"SELECT count(*) FROM read_parquet({_literal(staged.activations_file)}) WHERE NOT isfinite(value)"
                )
            )
        if n_bad:
            raise NonFiniteActivationsError(
                f"range [{staged.start}, {staged.end}) of SAE {sae_id}: {n_bad:,} activation values are NaN or "
                "infinite; nothing was committed. The SAE or the model computes non-finite values on this input."
            )
        with self._write() as conn:
            run = first(conn.execute("SELECT next_window FROM index_runs WHERE sae_id = ?", [sae_id]))
            if run is None:
                raise NotIndexedError(f"call start_index({sae_id!r}, …) before commit_index_range.")
            overlap = first(
                conn.execute(
                    "SELECT count(*) FROM index_ranges WHERE sae_id = ? AND range_start < ? AND range_end > ?",
                    [sae_id, staged.end, staged.start],
                )
            )
            if staged.start < int(run[0]) or (overlap is not None and int(overlap[0]) > 0):
                return False
            insert_staged_windows(conn, f"read_parquet({_literal(staged.windows_file)})", corpus)
            if rows_in_table:
                conn.execute(
                    "INSERT INTO activations_staging SELECT ?, feature, window_id, position, value "
                    f"FROM read_parquet({_literal(staged.activations_file)})",
                    [sae_id],
                ).fetchall()
            conn.execute(
                "DELETE FROM index_steps WHERE sae_id = ?", [sae_id]
            ).fetchall()  # statistics are stale
            conn.execute(
                "INSERT INTO index_ranges (sae_id, range_start, range_end, n_tokens, n_rows, files, config_hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    sae_id,
                    staged.start,
                    staged.end,
                    staged.n_tokens,
                    staged.n_rows,
                    dumps(
                        {
                            "windows": [staged.windows_file, staged.windows_sha256],
                            "activations": [staged.activations_file, staged.activations_sha256],
                        }
                    ),
                    config_hash,
                ],
            ).fetchall()
            ends = {
                int(r[0]): int(r[1])
                for r in conn.execute(
                    "SELECT range_start, range_end FROM index_ranges WHERE sae_id = ?", [sae_id]
                ).fetchall()
            }
            next_window = int(run[0])
            while next_window in ends:  # the contiguous committed prefix: what a local run would resume from
                next_window = ends[next_window]
            conn.execute(
                "UPDATE index_runs SET next_window = ?, n_tokens = n_tokens + ?, finalized = false, "
                "updated_at = current_timestamp WHERE sae_id = ?",
                [next_window, staged.n_tokens, sae_id],
            ).fetchall()
        return True
