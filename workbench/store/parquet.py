"""Every table to Parquet files and back (`export_parquet`, `import_parquet`)."""

from __future__ import annotations

from pathlib import Path

from sae_workbench.store.base import StoreBase
from sae_workbench.store.sql import first, sql_path

_SEQUENCES = (("explanation_ids", "explanations"), ("score_ids", "scores"), ("eval_ids", "evals"), ("sample_ids", "samples"))  # fmt: skip


class Parquet(StoreBase):
    """Parquet export and import of the whole store."""

    def export_parquet(self, folder: str | Path) -> list[Path]:
        """Write every table to `folder/<table>.parquet` (zstd); return the files."""
        return self._export_tables(self.table_names(), folder)

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
                        f"INSERT INTO {table} SELECT * FROM read_parquet('{sql_path(path)}')"
                    ).fetchall()
                    imported.append(table)
            for seq, table in _SEQUENCES:
                row = first(conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}"))
                if row and row[0]:
                    # Sequences cannot be altered in place; advance them past the imported ids.
                    conn.execute(f"SELECT max(nextval('{seq}')) FROM range(?)", [int(row[0])]).fetchall()
        return imported
