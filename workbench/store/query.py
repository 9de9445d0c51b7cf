"""Your own read-only SQL on the store, safe to run while a job holds the file (`Store.query`, `workbench sql`).

A raw `duckdb.connect(path, read_only=True)` fails with DuckDB's lock error while a writer (the explain job's lease,
`workbench index`) holds the file. `query` goes through the store's own attachment instead: it retries on the lock,
announces that it waits (the job's lease steps aside for it at its next feature boundary) and reads one consistent
snapshot. On a store with partitioned SAEs (`partitioned.py`) `activations` names a view over the file's rows
and every SAE's Parquet, so the same SQL sees every row. Only a single SELECT-like statement is accepted (SELECT, WITH … SELECT, FROM …, DESCRIBE, SHOW,
SUMMARIZE, VALUES, EXPLAIN); anything else raises QueryNotAllowedError before the file is touched.

    Store.open("runs/store.duckdb", read_only=True).query("SELECT sae_id, count(*) FROM explanations GROUP BY 1")
"""

from __future__ import annotations

import re
from typing import Any

import duckdb

from sae_workbench.store.errors import QueryNotAllowedError
from sae_workbench.store.partitioned import Partitions, activations_relation, ensure_registered
from sae_workbench.store.sql import Table, arrow

# DuckDB parses DESCRIBE / SHOW / SUMMARIZE / FROM-first / VALUES queries as SELECT statements.
_READ_STATEMENTS = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)
# The one way a SELECT writes: advancing a sequence (not undone by a rollback in DuckDB).
_SEQUENCE_CALL = re.compile(r"\b(nextval|setval)\s*\(", re.IGNORECASE)


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
    return statement.query.strip().rstrip(";")


class Query(Partitions):
    """Read-only SQL of the caller's own (`query`)."""

    def query(self, sql: str, params: list[Any] | None = None) -> Table:
        """Run one read-only statement (`read_only_statement`) on the store and return its rows as a pyarrow Table;
        waits for a job holding the file like every store call (up to busy_timeout_s)."""
        statement = read_only_statement(sql)
        parted = self.partitioned_saes()
        with self._conn() as conn:
            if parted:
                # `activations` names every row, in the file or in Parquet: a TEMP VIEW on this cursor, dropped after
                # the query (inside a session the cursor is shared with the store's own reads and writes).
                db = str(conn.execute("SELECT current_database()").fetchall()[0][0]).replace('"', '""')
                parts = [f'SELECT sae_id, feature, window_id, position, value FROM "{db}".main.activations']
                for sae_id, root in parted.items():
                    ensure_registered(conn, root)
                    relation = activations_relation(root, sae_id)
                    parts.append(f"SELECT sae_id, feature, window_id, position, value FROM {relation}")
                view = " UNION ALL ".join(parts)
                conn.execute(f"CREATE OR REPLACE TEMP VIEW activations AS {view}").fetchall()
            try:
                return arrow(conn, statement, params)
            except duckdb.Error as exc:
                raise QueryNotAllowedError(f"the query failed: {exc}") from exc
            finally:
                if parted:
                    conn.execute("DROP VIEW IF EXISTS temp.main.activations").fetchall()
