"""Graduating a single-file store: move an SAE's activation rows out of `store.duckdb` into the partitioned layout
of `partitioned.py` (local root or s3://), crash-safely (`Store.graduate`, the CLI's `workbench graduate`).

Per SAE, four steps, each one safe to repeat:
  1. stage: every bucket (features f with f // 256 = fb) is COPYed from the `activations` table, sorted with its
     rank, to `<root>/staging/graduate-<sae>-<part>/fb=<fb>/part-<part>.parquet`; a staged file whose footer row
     count matches the table's bucket count is kept on a rerun, any other is rewritten.
  2. place: each staged file moves to `<root>/activations/sae_id=<sae>/fb=<fb>/part-<part>.parquet` (a rename on a
     local root); any other file under the SAE's folder is deleted first (a leftover of an earlier, different run).
     Nothing reads that folder yet: readers follow the ledger, which still points at the table.
  3. commit: the row count of the placed files (footers) must equal the table's; then ONE transaction deletes the
     SAE's rows from `activations` and writes its `activation_partitions` row. Before it, readers see the table;
     after it, the Parquet. A crash anywhere before leaves the table intact and a rerun redoes what is missing.
  4. clean: the staging folder is removed (a crash here leaves only files nobody reads; a rerun removes them).

`part` (8 hex digits) hashes the SAE id, its index settings and its row count, so a rerun names the same files and
overwrites rather than duplicates them; a store re-indexed in between gets new names and the old files are deleted
in step 2. The single file does not shrink by itself after the delete (DuckDB reuses the freed blocks); export and
re-import it to reclaim the space.
"""

from __future__ import annotations

from dataclasses import dataclass

from sae_workbench.store.errors import StoreError
from sae_workbench.store.indexing import Indexing
from sae_workbench.store.partitioned import (
    BUCKET_SIZE,
    activations_dir,
    config_hash8,
    filesystem,
    fs_path,
    join,
    move_file,
    normalise_root,
    parquet_rows,
    part_name,
    sae_dir,
    sae_segment,
    staging_dir,
    write_bucket,
)
from sae_workbench.store.sql import count


@dataclass(frozen=True)
class GraduationPlan:
    """What graduating one SAE writes: its buckets, their row counts and the file names."""

    sae_id: str
    root: str
    """Normalised root (absolute local path or s3:// URL)."""
    part: str
    """8-hex hash naming the part files (SAE id, index settings, row count)."""
    n_rows: int
    """Rows of the SAE in the `activations` table."""
    buckets: dict[int, int]
    """fb -> rows in that bucket."""

    @property
    def staging(self) -> str:
        """This graduation's staging folder."""
        return staging_dir(self.root, f"graduate-{sae_segment(self.sae_id)[len('sae_id=') :]}-{self.part}")

    def staged_file(self, fb: int) -> str:
        """Where bucket `fb` is written first."""
        return join(self.staging, f"fb={fb:05d}", part_name(self.part))

    def final_file(self, fb: int) -> str:
        """Where bucket `fb` is read from once committed."""
        return join(activations_dir(self.root, self.sae_id, fb), part_name(self.part))


@dataclass(frozen=True)
class GraduationReport:
    """The outcome of graduating one SAE."""

    sae_id: str
    root: str
    n_rows: int
    """Rows now read from Parquet."""
    n_buckets: int
    """Bucket files written (0 when it was already graduated)."""
    already: bool
    """It was graduated by an earlier run (only leftovers were cleaned)."""


class Graduation(Indexing):
    """`graduate`: move activation rows from the store file to partitioned Parquet."""

    def graduate(self, root: str, sae_ids: list[str] | None = None) -> list[GraduationReport]:
        """Move the activations of `sae_ids` (default: every SAE with rows in the file) to partitioned Parquet
        under `root` (a folder or s3://bucket/prefix); idempotent and safe to rerun after a crash."""
        root = normalise_root(root)
        if sae_ids is None:
            with self._conn() as conn:
                rows = conn.execute("SELECT DISTINCT sae_id FROM activations ORDER BY sae_id").fetchall()
            sae_ids = sorted({str(r[0]) for r in rows} | set(self._partitioned_here(root)))
        return [self._graduate_one(sae_id, root) for sae_id in sae_ids]

    def _partitioned_here(self, root: str) -> list[str]:
        """SAEs already committed under `root` (a rerun reports them and cleans their leftovers)."""
        return [s for s, r in self.partitioned_saes().items() if r == root]

    def _graduate_one(self, sae_id: str, root: str) -> GraduationReport:
        """Steps 1-4 of the module docstring for one SAE."""
        done = self.activations_root(sae_id)
        if done is not None:
            if done != root:
                raise StoreError(f"SAE {sae_id}'s activations already live under {done}, not {root}.")
            self._clean_leftovers(sae_id, root)
            with self._conn() as conn:
                n = count(conn.execute("SELECT n_rows FROM activation_partitions WHERE sae_id = ?", [sae_id]))
            return GraduationReport(sae_id, root, n, 0, already=True)
        plan = self._graduation_plan(sae_id, root)
        self._stage_buckets(plan)
        self._place_buckets(plan)
        self._commit_graduation(plan)
        _remove(plan.staging)
        return GraduationReport(sae_id, root, plan.n_rows, len(plan.buckets), already=False)

    def _graduation_plan(self, sae_id: str, root: str) -> GraduationPlan:
        """Buckets and counts of the SAE's rows in the table (StoreError when there is nothing to move)."""
        progress = self._indexed(sae_id)
        if self.activation_count(sae_id, staged=True):
            raise StoreError(
                f"SAE {sae_id} has staged activations; finish `workbench index` before graduating."
            )
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT feature // {BUCKET_SIZE} AS fb, count(*) FROM activations WHERE sae_id = ? "
                "GROUP BY fb ORDER BY fb",
                [sae_id],
            ).fetchall()
        buckets = {int(r[0]): int(r[1]) for r in rows}
        n_rows = sum(buckets.values())
        if n_rows == 0:
            raise StoreError(f"SAE {sae_id} has no activation rows in {self.path} to graduate.")
        key = {
            "sae_id": sae_id,
            "corpus": progress.corpus,
            "context_size": progress.context_size,
            "top_k": progress.top_k,
            "config": progress.config,
            "n_rows": n_rows,
        }
        return GraduationPlan(sae_id, root, config_hash8(key), n_rows, buckets)

    def _stage_buckets(self, plan: GraduationPlan) -> None:
        """Step 1: write every bucket not yet staged (or placed) with its full row count."""
        for fb, n in plan.buckets.items():
            if self._rows_or_none(plan.final_file(fb)) == n or self._rows_or_none(plan.staged_file(fb)) == n:
                continue
            with self._conn() as conn:
                written = write_bucket(
                    conn,
                    "SELECT feature, window_id, position, value FROM activations WHERE sae_id = ? "
                    "AND feature >= ? AND feature < ?",
                    [plan.sae_id, fb * BUCKET_SIZE, (fb + 1) * BUCKET_SIZE],
                    plan.staged_file(fb),
                )
            if written != n:
                raise StoreError(
                    f"bucket {fb} of SAE {plan.sae_id}: wrote {written} rows, the table has {n}."
                )

    def _place_buckets(self, plan: GraduationPlan) -> None:
        """Step 2: delete stray files under the SAE's folder, then move each staged bucket into place."""
        fs = filesystem(plan.root)
        wanted = {fs_path(plan.final_file(fb)) for fb in plan.buckets}
        folder = fs_path(sae_dir(plan.root, plan.sae_id))
        if fs.exists(folder):
            for path in fs.find(folder):
                if path not in wanted:
                    fs.rm(path)
        for fb, n in plan.buckets.items():
            if self._rows_or_none(plan.final_file(fb)) == n:
                continue
            move_file(plan.staged_file(fb), plan.final_file(fb))

    def _commit_graduation(self, plan: GraduationPlan) -> None:
        """Step 3: check the placed files' row count, then delete the table rows and write the ledger row at once."""
        with self._conn() as conn:
            placed = parquet_rows(conn, join(sae_dir(plan.root, plan.sae_id), "*", "*.parquet"))
        if placed != plan.n_rows:
            raise StoreError(
                f"SAE {plan.sae_id}: {placed} rows under {plan.root}, {plan.n_rows} in the table; nothing removed."
            )
        with self._write() as conn:
            deleted = count(conn.execute("DELETE FROM activations WHERE sae_id = ?", [plan.sae_id]))
            if deleted != plan.n_rows:
                raise StoreError(f"SAE {plan.sae_id}: the table changed during graduation; nothing removed.")
            self.record_partitioned(plan.sae_id, plan.root, plan.n_rows, plan.part)

    def _clean_leftovers(self, sae_id: str, root: str) -> None:
        """Step 4 for an SAE committed by an earlier run: remove its staging folders."""
        fs = filesystem(root)
        staging = fs_path(join(root, "staging"))
        prefix = f"graduate-{sae_segment(sae_id)[len('sae_id=') :]}-"
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


def _remove(folder: str) -> None:
    """Remove a folder and everything under it, if present."""
    fs = filesystem(folder)
    if fs.exists(fs_path(folder)):
        fs.rm(fs_path(folder), recursive=True)
