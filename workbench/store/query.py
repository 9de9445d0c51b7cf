"""Your own read-only SQL on the store, safe to run while a job holds the file (`Store.query`, `workbench sql`).

A raw `duckdb.connect(path, read_only=True)` fails with DuckDB's lock error while a writer (the explain job's lease,
`workbench index`) holds the file. `query` goes through the store's own attachment instead: it retries on the lock,
announces that it waits (the job's lease steps aside for it at its next feature boundary) and reads one consistent
snapshot. On a store with partitioned SAEs or corpora (`partitioned.py`) `activations` and `windows` name views
over the file's rows and the Parquet, so the same SQL sees every row. Only a single SELECT-like statement is
accepted (SELECT, WITH … SELECT, FROM …, DESCRIBE, SHOW, SUMMARIZE, VALUES, EXPLAIN); anything else raises
QueryNotAllowedError before the file is touched.

    Store.open("runs/store.duckdb", read_only=True).query("SELECT sae_id, count(*) FROM explanations GROUP BY 1")
"""

from __future__ import annotations

import re
from typing import Any

import duckdb

from sae_workbench.store.base import parquet_read_error
from sae_workbench.store.errors import QueryNotAllowedError
from sae_workbench.store.partitioned import (
    WINDOW_FILE_COLUMNS,
    Partitions,
    activations_relation,
    ensure_registered,
    windows_relation,
)
from sae_workbench.store.sql import Table, arrow

# DuckDB parses DESCRIBE / SHOW / SUMMARIZE / FROM-first / VALUES queries as SELECT statements.
_READ_STATEMENTS = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)
# The one way a SELECT writes: advancing a sequence (not undone by a rollback in DuckDB).
_SEQUENCE_CALL = re.compile(r"\b(nextval|setval)\s*\(", re.IGNORECASE)
# EXPLAIN [ANALYZE] runs or plans another statement, which must itself be a read: `EXPLAIN ANALYZE DELETE …`
# executes the DELETE. Leading comments and an option list such as `(FORMAT JSON)` may come before it.
_EXPLAIN_PREFIX = re.compile(
    r"^\s*(?:(?:/\*.*?\*/|--[^\n]*(?:\n|$))\s*)*EXPLAIN\s*(?:\([^)]*\)\s*)?(?:ANALY[SZ]E\b\s*)?(?:\([^)]*\)\s*)?",
    re.IGNORECASE | re.DOTALL,
)


def read_only_statement(sql: str) -> str:
    """The one read statement in `sql` (trailing semicolon dropped); QueryNotAllowedError for no statement,
    several, a parse error, or any statement that is not a read (INSERT, DELETE, DDL, ATTACH, COPY, PRAGMA, SET…)."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryNotAllowedError(f"cannot parse the query: {exc}") from exc
    if len(statements) != 1:
        raise QueryNotAllowedError(
            f"pass exactly one SELECT statement (got {len(statements)}); run several queries one at a time."
        )
    (statement,) = statements
    if statement.type not in _READ_STATEMENTS:
        raise QueryNotAllowedError(
            f"only reads are allowed (SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN); got a "
            f"{statement.type.name} statement. The store is written only by the workbench's own commands."
        )
    if _SEQUENCE_CALL.search(statement.query):
        raise QueryNotAllowedError("nextval/setval advance the store's id sequences; they are not reads.")
    if statement.type == duckdb.StatementType.EXPLAIN:
        prefix = _EXPLAIN_PREFIX.match(statement.query)
        if prefix is None or not statement.query[prefix.end() :].strip():
            raise QueryNotAllowedError("cannot tell which statement EXPLAIN runs; EXPLAIN a SELECT.")
        read_only_statement(statement.query[prefix.end() :])  # EXPLAIN ANALYZE executes it: it must be a read
    return statement.query.strip().rstrip(";")


class Query(Partitions):
    """Read-only SQL of the caller's own (`query`)."""

    def query(self, sql: str, params: list[Any] | None = None) -> Table:
        """Run one read-only statement (`read_only_statement`) on the store and return its rows as a pyarrow Table;
        waits for a job holding the file like every store call (up to busy_timeout_s)."""
        statement = read_only_statement(sql)
        views = self._partition_views()
        with self._conn() as conn:
            if views:
                # `activations` / `windows` name every row, in the file or in Parquet: TEMP VIEWs on this cursor,
                # dropped after the query (inside a session the cursor is shared with the store's own reads and writes).
                db = str(conn.execute("SELECT current_database()").fetchall()[0][0]).replace('"', '""')
                for table, (columns, relations) in views.items():
                    parts = [f'SELECT {columns} FROM "{db}".main.{table}']
                    parts += [f"SELECT {columns} FROM {relation}" for relation in relations]
                    conn.execute(
                        f"CREATE OR REPLACE TEMP VIEW {table} AS {' UNION ALL '.join(parts)}"
                    ).fetchall()
            try:
                return arrow(conn, statement, params)
            except duckdb.Error as exc:
                damaged = parquet_read_error(exc, self.path)
                if damaged is not None:
                    raise damaged from exc
                raise QueryNotAllowedError(f"the query failed: {exc}") from exc
            finally:
                for table in views:
                    conn.execute(f"DROP VIEW IF EXISTS temp.main.{table}").fetchall()

    def _partition_views(self) -> dict[str, tuple[str, list[str]]]:
        """table -> (its columns, the Parquet relations of its partitioned SAEs / corpora); empty when none are."""
        views: dict[str, tuple[str, list[str]]] = {}
        with self._conn() as conn:
            saes, corpora = self.partitioned_saes(), self.partitioned_corpora()
            for root in [*saes.values(), *corpora.values()]:
                ensure_registered(conn, root)
        # Every partitioned SAE and corpus is checked against its ledger before the query plan reads them.
        for sae_id in saes:
            self.require_partition_files("activations", sae_id)
        for corpus in corpora:
            self.require_partition_files("windows", corpus)
        if saes:
            relations = [activations_relation(root, sae_id) for sae_id, root in saes.items()]
            views["activations"] = ("sae_id, feature, window_id, position, value", relations)
        if corpora:
            columns = ", ".join(f'"{c}"' for c in ("corpus", *WINDOW_FILE_COLUMNS))
            views["windows"] = (columns, [windows_relation(root, corpus) for corpus, root in corpora.items()])
        return views
