"""Graduating a single-file store: move activation rows (per SAE) and windows (per corpus) out of `store.duckdb` into
the partitioned layout of `partitioned.py` (local root or s3://), crash-safely (`Store.graduate`, the CLI's
`workbench graduate`).

Per SAE (activations, buckets fb = feature // 256) and then per corpus (windows, chunks = window_id // 65536), four
steps, each one safe to repeat:
  1. stage: every bucket/chunk is COPYed from its table (activations sorted with their rank, windows by id) to
     `<root>/staging/graduate-<kind>-<key>-<part>/<partition>/part-<part>.parquet`; a staged (or already placed)
     file whose footer row count matches the table's count is kept on a rerun, any other is rewritten.
  2. place: each staged file moves to its final folder (`activations_dir` / `windows_dir`; a rename on a local
     root); any other file under the SAE's (corpus's) folder is deleted first (a leftover of an earlier, different
     run). Nothing reads that folder yet: readers follow the ledger, which still points at the table.
  3. commit: the row count of the placed files (footers) must equal the table's; then ONE transaction deletes the
     rows from the table and writes the ledger row (`activation_partitions` / `window_partitions`). Before it,
     readers see the table; after it, the Parquet. A crash anywhere before leaves the table intact, and a rerun
     redoes what is missing.
  4. clean: the staging folder is removed (a crash here leaves only files nobody reads; a rerun removes them).

Step 3 also records each placed file's rows, bytes and blake2b in the ledger row (`files`); every later read checks
the folder against it (partitioned.py), and so does a rerun of `graduate` for a key already committed
(`PartitionFileError` when a file is missing, resized or stray).

`part` (8 hex digits) hashes the key, its index settings (SAEs) and its row count, so a rerun names the same files
and overwrites rather than duplicates them; a store re-indexed in between gets new names and the old files are
deleted in step 2. A corpus is graduated only when no SAE indexing it is unfinished (its windows would be refused).
The single file does not shrink by itself after the delete (DuckDB reuses the freed blocks); export and re-import it
to reclaim the space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sae_workbench.store.errors import StoreError
from sae_workbench.store.indexing import Indexing
from sae_workbench.store.partitioned import (
    BUCKET_SIZE,
    WINDOW_CHUNK,
    WINDOW_FILE_COLUMNS,
    activations_dir,
    config_hash8,
    corpus_dir,
    file_digest,
    filesystem,
    fs_path,
    join,
    listed_files,
    move_file,
    normalise_root,
    parquet_rows,
    part_name,
    sae_dir,
    staging_dir,
    windows_dir,
    write_bucket,
    write_window_chunk,
)
from sae_workbench.store.sql import Table, count

Kind = Literal["activations", "windows"]


@dataclass(frozen=True)
class GraduationPlan:
    """What graduating one SAE's activations or one corpus's windows writes: partitions, row counts, file names."""

    kind: Kind
    key: str
    """The sae_id (activations) or the corpus (windows)."""
    root: str
    """Normalised root (absolute local path or s3:// URL)."""
    part: str
    """8-hex hash naming the part files."""
    n_rows: int
    """Rows in the table."""
    buckets: dict[int, int]
    """partition (fb or chunk) -> rows in it."""

    @property
    def staging(self) -> str:
        """This graduation's staging folder."""
        return staging_dir(self.root, f"graduate-{self.kind}-{_segment(self.folder)}-{self.part}")

    @property
    def folder(self) -> str:
        """The folder holding every partition of the key."""
        return sae_dir(self.root, self.key) if self.kind == "activations" else corpus_dir(self.root, self.key)

    def staged_file(self, b: int) -> str:
        """Where partition `b` is written first."""
        return join(self.staging, f"{b:05d}", part_name(self.part))

    def final_file(self, b: int) -> str:
        """Where partition `b` is read from once committed."""
        if self.kind == "activations":
            return join(activations_dir(self.root, self.key, b), part_name(self.part))
        return join(windows_dir(self.root, self.key, b), part_name(self.part))


@dataclass(frozen=True)
class GraduationReport:
    """The outcome of graduating one SAE's activations or one corpus's windows."""

    kind: Kind
    key: str
    """The sae_id or the corpus."""
    root: str
    n_rows: int
    """Rows now read from Parquet."""
    n_buckets: int
    """Partition files written (0 when it was already graduated)."""
    already: bool
    """It was graduated by an earlier run (only leftovers were cleaned)."""


def _segment(folder: str) -> str:
    """The last path segment's value (`sae_id=x` -> x), for staging names."""
    return folder.rstrip("/").rsplit("/", 1)[-1].split("=", 1)[-1]


class Graduation(Indexing):
    """`graduate`: move activation rows and windows from the store file to partitioned Parquet."""

    def graduate(
        self, root: str, sae_ids: list[str] | None = None, *, windows: bool = True
    ) -> list[GraduationReport]:
        """Move the activations of `sae_ids` (default: every SAE with rows in the file), then (with `windows`) the
        windows of their corpora, to partitioned Parquet under `root` (a folder or s3://bucket/prefix); idempotent
        and safe to rerun after a crash."""
        root = normalise_root(root)
        if sae_ids is None:
            with self._conn() as conn:
                rows = conn.execute("SELECT DISTINCT sae_id FROM activations ORDER BY sae_id").fetchall()
            here = [s for s, r in self.partitioned_saes().items() if r == root]
            sae_ids = sorted({str(r[0]) for r in rows} | set(here))
        reports = [self._graduate_one("activations", sae_id, root) for sae_id in sae_ids]
        if windows:
            corpora = sorted({self._indexed(s).corpus for s in sae_ids})
            reports += [
                self._graduate_one("windows", corpus, root)
                for corpus in corpora
                if self.windows_root(corpus) is not None or self._table_windows(corpus)
            ]  # a corpus without stored windows has nothing to move
        return reports

    def _table_windows(self, corpus: str) -> int:
        """Windows of `corpus` in the `windows` table."""
        with self._conn() as conn:
            return count(conn.execute("SELECT count(*) FROM windows WHERE corpus = ?", [corpus]))

    def _ledger_root(self, kind: Kind, key: str) -> str | None:
        """Where the ledger says `key`'s rows live (None: in the table)."""
        return self.activations_root(key) if kind == "activations" else self.windows_root(key)

    def _graduate_one(self, kind: Kind, key: str, root: str) -> GraduationReport:
        """Steps 1-4 of the module docstring for one SAE or corpus."""
        done = self._ledger_root(kind, key)
        if done is not None:
            if done != root:
                raise StoreError(f"the {kind} of {key!r} already live under {done}, not {root}.")
            self._clean_leftovers(kind, key, root)
            # A graduated key's files are checked on every rerun: a lost or damaged file is reported, not passed over.
            self.require_partition_files(kind, key)
            ledger, column = _LEDGERS[kind]
            with self._conn() as conn:
                n = count(conn.execute(f"SELECT n_rows FROM {ledger} WHERE {column} = ?", [key]))
            return GraduationReport(kind, key, root, n, 0, already=True)
        plan = self._graduation_plan(kind, key, root)
        self._stage_buckets(plan)
        self._place_buckets(plan)
        self._commit_graduation(plan)
        _remove(plan.staging)
        return GraduationReport(kind, key, root, plan.n_rows, len(plan.buckets), already=False)

    def _graduation_plan(self, kind: Kind, key: str, root: str) -> GraduationPlan:
        """Partitions and counts of the rows in the table (StoreError when there is nothing to move or the rows
        may still grow)."""
        if kind == "activations":
            progress = self._indexed(key)
            if self.activation_count(key, staged=True):
                raise StoreError(
                    f"SAE {key} has staged activations; finish `workbench index` before graduating."
                )
            sql = f"SELECT feature // {BUCKET_SIZE} AS b, count(*) FROM activations WHERE sae_id = ? GROUP BY b ORDER BY b"  # fmt: skip
            settings: list[object] = [progress.corpus, progress.context_size, progress.top_k, progress.config]
        else:
            with self._conn() as conn:
                open_runs = conn.execute(
                    "SELECT sae_id FROM index_runs WHERE corpus = ? AND NOT finalized", [key]
                ).fetchall()
            if open_runs:
                raise StoreError(
                    f"SAE {open_runs[0][0]} is still indexing corpus {key!r}; finish `workbench index` first."
                )
            sql = f"SELECT window_id // {WINDOW_CHUNK} AS b, count(*) FROM windows WHERE corpus = ? GROUP BY b ORDER BY b"  # fmt: skip
            settings: list[object] = []
        with self._conn() as conn:
            rows = conn.execute(sql, [key]).fetchall()
        buckets = {int(r[0]): int(r[1]) for r in rows}
        n_rows = sum(buckets.values())
        if n_rows == 0:
            raise StoreError(f"{key!r} has no {kind} rows in {self.path} to graduate.")
        part = config_hash8({"kind": kind, "key": key, "settings": settings, "n_rows": n_rows})
        return GraduationPlan(kind, key, root, part, n_rows, buckets)

    def _stage_buckets(self, plan: GraduationPlan) -> None:
        """Step 1: write every partition not yet staged (or placed) with its full row count."""
        for b, n in plan.buckets.items():
            if self._rows_or_none(plan.final_file(b)) == n or self._rows_or_none(plan.staged_file(b)) == n:
                continue
            with self._conn() as conn:
                if plan.kind == "activations":
                    written = write_bucket(
                        conn,
                        "SELECT feature, window_id, position, value FROM activations WHERE sae_id = ? "
                        "AND feature >= ? AND feature < ?",
                        [plan.key, b * BUCKET_SIZE, (b + 1) * BUCKET_SIZE],
                        plan.staged_file(b),
                    )
                else:
                    columns = ", ".join(f'"{c}"' for c in WINDOW_FILE_COLUMNS)
                    written = write_window_chunk(
                        conn,
                        f"SELECT {columns} FROM windows WHERE corpus = ? AND window_id >= ? AND window_id < ?",
                        [plan.key, b * WINDOW_CHUNK, (b + 1) * WINDOW_CHUNK],
                        plan.staged_file(b),
                    )
            if written != n:
                raise StoreError(
                    f"{plan.kind} {plan.key!r} partition {b}: wrote {written} rows, the table has {n}."
                )

    def _place_buckets(self, plan: GraduationPlan) -> None:
        """Step 2: delete stray files under the key's folder, then move each staged partition into place."""
        fs = filesystem(plan.root)
        wanted = {fs_path(plan.final_file(b)) for b in plan.buckets}
        folder = fs_path(plan.folder)
        if fs.exists(folder):
            for path in fs.find(folder):
                if path not in wanted:
                    fs.rm(path)
        for b, n in plan.buckets.items():
            if self._rows_or_none(plan.final_file(b)) == n:
                continue
            move_file(plan.staged_file(b), plan.final_file(b))

    def _commit_graduation(self, plan: GraduationPlan) -> None:
        """Step 3: check the placed files' row count, then delete the table rows and write the ledger row at once."""
        with self._conn() as conn:
            placed = parquet_rows(conn, join(plan.folder, "*", "*.parquet"))
        if placed != plan.n_rows:
            raise StoreError(
                f"{plan.kind} of {plan.key!r}: {placed} rows under {plan.root}, {plan.n_rows} in the table; "
                "nothing removed."
            )
        table, column = ("activations", "sae_id") if plan.kind == "activations" else ("windows", "corpus")
        files = self.record_partition_files(plan.kind, plan.key, plan.root)  # read before the lock is taken
        with self._write() as conn:
            deleted = count(conn.execute(f"DELETE FROM {table} WHERE {column} = ?", [plan.key]))
            if deleted != plan.n_rows:
                raise StoreError(f"{plan.kind} of {plan.key!r} changed during graduation; nothing removed.")
            if plan.kind == "activations":
                self.record_partitioned(plan.key, plan.root, plan.n_rows, plan.part, files)
            else:
                self.record_windows_partitioned(plan.key, plan.root, plan.n_rows, plan.part, files)

    def _clean_leftovers(self, kind: Kind, key: str, root: str) -> None:
        """Step 4 for a key committed by an earlier run: remove its staging folders."""
        fs = filesystem(root)
        staging = fs_path(join(root, "staging"))
        folder = sae_dir(root, key) if kind == "activations" else corpus_dir(root, key)
        prefix = f"graduate-{kind}-{_segment(folder)}-"
        if not fs.exists(staging):
            return
        for path in fs.ls(staging, detail=False):
            if str(path).rstrip("/").rsplit("/", 1)[-1].startswith(prefix):
                fs.rm(path, recursive=True)

    def _rows_or_none(self, path: str) -> int | None:
        """Rows in the Parquet file at `path` (footer), or None when there is no such file."""
        if not filesystem(path).exists(fs_path(path)):
            return None
        with self._conn() as conn:
            return parquet_rows(conn, path)


class PartitionRepair(Graduation):
    """`graduate --repair`'s store side: rewrite one recorded file, drop strays, record a missing file record."""

    def replace_partition_file(self, kind: Kind, key: str, rel: str, rows: Table) -> int:
        """Rewrite the recorded file `rel` of `key` from `rows` (activations: feature, window_id, position, value;
        windows: the window file's columns) through staging, sorted and ranked exactly as graduation writes it.
        StoreError (nothing replaced) unless it holds the row count the ledger recorded; the ledger's record of the
        file gets its new bytes and digest. Return the rows."""
        recorded = self.partition_file_record(kind, key)
        folder = self.partition_folder(kind, key)
        if recorded is None or folder is None or rel not in recorded:
            raise StoreError(f"{kind} of {key!r} has no recorded file {rel}; nothing to rebuild.")
        root = folder.rsplit("/", 2)[0]
        staging = staging_dir(root, f"repair-{kind}-{_segment(folder)}")
        staged = join(staging, rel)
        with self._conn() as conn:
            conn.register("_repair_rows", rows)
            try:
                if kind == "activations":
                    sql = "SELECT feature, window_id, position, value FROM _repair_rows"
                    written = write_bucket(conn, sql, [], staged)
                else:
                    columns = ", ".join(f'"{c}"' for c in WINDOW_FILE_COLUMNS)
                    written = write_window_chunk(conn, f"SELECT {columns} FROM _repair_rows", [], staged)
            finally:
                conn.unregister("_repair_rows")
        expected = int(recorded[rel][0])
        if written != expected:
            _remove(staging)
            raise StoreError(
                f"the rebuilt {join(folder, rel)} holds {written} rows, the ledger recorded {expected}; nothing "
                "replaced (the source differs from what was indexed: restore the file from a backup instead)."
            )
        move_file(staged, join(folder, rel))
        _remove(staging)
        size = int(filesystem(folder).size(fs_path(join(folder, rel))))
        self.update_partition_files(
            kind, key, {**recorded, rel: [written, size, file_digest(join(folder, rel))]}
        )
        return written

    def remove_stray_files(self, kind: Kind, key: str) -> list[str]:
        """Delete the files under `key`'s folder that the ledger does not record; return their paths."""
        folder = self.partition_folder(kind, key)
        recorded = self.partition_file_record(kind, key)
        if folder is None or recorded is None:
            return []
        fs = filesystem(folder)
        removed = [join(folder, rel) for rel in listed_files(folder) if rel not in recorded]
        for path in removed:
            fs.rm(fs_path(path))
        return removed

    def record_missing_file_record(self, kind: Kind, key: str) -> bool:
        """Record the files of a key graduated before file records existed (schema < 11), when their footers add up
        to the ledger's n_rows; False when it had a record already."""
        if self.partition_file_record(kind, key) is not None:
            return False
        root = self._ledger_root(kind, key)
        if root is None:
            raise StoreError(f"{kind} of {key!r} are not partitioned.")
        files = self.record_partition_files(kind, key, root)
        ledger, column = _LEDGERS[kind]
        with self._conn() as conn:
            n_rows = count(conn.execute(f"SELECT n_rows FROM {ledger} WHERE {column} = ?", [key]))
        total = sum(int(r[0]) for r in files.values())
        if total != n_rows:
            raise StoreError(
                f"{kind} of {key!r}: the files under {root} hold {total} rows, the ledger {n_rows}; restore the "
                "missing files from a backup before recording them."
            )
        self.update_partition_files(kind, key, files)
        return True


_LEDGERS: dict[Kind, tuple[str, str]] = {
    "activations": ("activation_partitions", "sae_id"),
    "windows": ("window_partitions", "corpus"),
}
"""Ledger table and key column per kind."""


def _remove(folder: str) -> None:
    """Remove a folder and everything under it, if present."""
    fs = filesystem(folder)
    if fs.exists(fs_path(folder)):
        fs.rm(fs_path(folder), recursive=True)
