"""`Store.verify` (the CLI's `workbench verify --store S`): check a whole store and list every fault found.

    report = Store.open("runs/store.duckdb", read_only=True).verify()
    for fault in report.faults: print(fault)

What is checked, in order:
  schema      the schema version is this workbench's, and every table and column the migrations create is there
              with its type (compared with a blank database migrated in memory);
  ledger      every partitioned SAE / corpus: its file record exists, each file is present with its recorded size,
              BLAKE2b digest and footer row count, no stray file lies among them (every byte is read), the record's
              rows add up to the ledger's n_rows, and no rows of it are left in the store file's table;
  index       every finalized index run has no staged rows left and its statistics and neighbours steps finished
              (`index_steps`) unless it was run without statistics;
  staging     no file is left under `<root>/staging/` of any root the store uses (the default root included): an
              interrupted `graduate` or Ray index left it, and rerunning that command finishes and removes it.

Run it when no job writes the store (a running graduate or index has staging files by design).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from sae_workbench.store.graduate import PartitionRepair
from sae_workbench.store.migrations import LATEST_VERSION, migrate
from sae_workbench.store.partitioned import filesystem, fs_path, join, listed_files, normalise_root
from sae_workbench.store.sql import count, loads

INDEX_STEPS = ("statistics", "neighbours")
"""The post-index steps a finalized run with statistics must have recorded in `index_steps`."""


@dataclass
class VerifyReport:
    """What `Store.verify` checked and what it found wrong."""

    checked: list[str] = field(default_factory=lambda: [])
    """One line per check made (what and how many)."""
    faults: list[str] = field(default_factory=lambda: [])
    """One line per fault (empty: the store is whole)."""

    @property
    def ok(self) -> bool:
        """Whether no fault was found."""
        return not self.faults


class Verification(PartitionRepair):
    """The whole-store check (`verify`)."""

    def verify(self) -> VerifyReport:
        """Check schema, ledgers and their files, index runs and staging leftovers; see the module docstring."""
        report = VerifyReport()
        self._verify_schema(report)
        if report.faults:
            return report  # the other checks read tables that may not be there
        self._verify_ledgers(report)
        self._verify_index_runs(report)
        self._verify_staging(report)
        return report

    def _verify_schema(self, report: VerifyReport) -> None:
        """Schema version, tables, columns and types against a blank database migrated to LATEST_VERSION."""
        version = self.schema_version()
        if version != LATEST_VERSION:
            report.faults.append(f"schema version {version}, this workbench writes {LATEST_VERSION}")
            return
        columns_sql = (
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
            "AND NOT internal"
        )
        blank = duckdb.connect(":memory:")
        try:
            migrate(blank, 0)
            wanted = {(str(r[0]), str(r[1]), str(r[2])) for r in blank.execute(columns_sql).fetchall()}
        finally:
            blank.close()
        with self._conn() as conn:
            have = {(str(r[0]), str(r[1]), str(r[2])) for r in conn.execute(columns_sql).fetchall()}
        for table, column, kind in sorted(wanted - have):
            report.faults.append(f"schema: column {table}.{column} ({kind}) is missing or has another type")
        report.checked.append(f"schema: version {version}, {len(wanted)} columns")

    def _verify_ledgers(self, report: VerifyReport) -> None:
        """Each partitioned SAE's and corpus's files, deep (digests and footers), and the ledger's totals."""
        for kind, keys, table, column in (
            ("activations", self.partitioned_saes(), "activations", "sae_id"),
            ("windows", self.partitioned_corpora(), "windows", "corpus"),
        ):
            ledger = "activation_partitions" if kind == "activations" else "window_partitions"
            for key in keys:
                what = f"{kind} of {key!r}"
                recorded = self.partition_file_record(kind, key)
                if recorded is None:
                    report.faults.append(
                        f"{what}: no file record (graduated before schema 11); `workbench graduate --repair` records it"
                    )
                    continue
                report.faults += [f"{what}: {f}" for f in self.partition_faults(kind, key, deep=True)]
                with self._conn() as conn:
                    n_rows = count(conn.execute(f"SELECT n_rows FROM {ledger} WHERE {column} = ?", [key]))
                    left = count(conn.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", [key]))
                total = sum(int(r[0]) for r in recorded.values())
                if total != n_rows:
                    report.faults.append(f"{what}: its files record {total} rows, the ledger {n_rows}")
                if left:
                    report.faults.append(
                        f"{what}: {left} rows are also left in the store file's {table} table"
                    )
                report.checked.append(f"{what}: {len(recorded)} files, {n_rows:,} rows")

    def _verify_index_runs(self, report: VerifyReport) -> None:
        """Finalized runs: nothing left in staging, statistics and neighbours recorded as finished."""
        with self._conn() as conn:
            runs = conn.execute("SELECT sae_id, finalized, config FROM index_runs ORDER BY sae_id").fetchall()
            steps = {
                (str(r[0]), str(r[1]))
                for r in conn.execute("SELECT sae_id, step FROM index_steps").fetchall()
            }
        for sae_id, finalized, config in runs:
            if not finalized:
                report.checked.append(
                    f"index of {sae_id}: not finished (rerun `workbench index` to finish it)"
                )
                continue
            staged = self.activation_count(str(sae_id), staged=True)
            if staged:
                report.faults.append(f"index of {sae_id}: finalized but {staged} staged rows are left")
            if dict(loads(config) or {}).get("compute_stats", True):
                for step in INDEX_STEPS:
                    if (str(sae_id), step) not in steps:
                        report.faults.append(
                            f"index of {sae_id}: the {step} step never finished; rerun the same `workbench index`"
                        )
            report.checked.append(f"index of {sae_id}: finalized")

    def _verify_staging(self, report: VerifyReport) -> None:
        """Files left under `<root>/staging/` of every root the store uses (and its default root)."""
        roots = {normalise_root(str(self.path.parent / f"{self.path.stem}-data"))}
        roots |= set(self.partitioned_saes().values()) | set(self.partitioned_corpora().values())
        for root in sorted(roots):
            staging = join(root, "staging")
            if not filesystem(staging).exists(fs_path(staging)):
                continue
            for rel in sorted(listed_files(staging)):
                report.faults.append(
                    f"orphaned staging file {join(staging, rel)} (an interrupted graduate or Ray index; rerun it to "
                    "finish and clean up, or delete the file)"
                )
        report.checked.append(f"staging: {len(roots)} root(s)")
