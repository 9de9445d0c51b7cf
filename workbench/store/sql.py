"""Small helpers the table-family modules share: JSON columns, id lists, fetching results, Arrow columns.

pyarrow ships no type information (pyright sees its members as Unknown), so this package reaches it through `pa`,
typed Any, and names Arrow values with the `Table` / `RecordBatch` aliases below.
"""

from __future__ import annotations

import json
from collections.abc import Container, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import duckdb
import numpy as np
import pyarrow  # pyright: ignore[reportMissingTypeStubs]  (no stubs: see the module docstring)

from sae_workbench.status import Status
from sae_workbench.store.errors import StoreError

pa: Any = pyarrow
"""pyarrow (untyped)."""
Table: TypeAlias = Any
"""A pyarrow.Table."""
RecordBatch: TypeAlias = Any
"""A pyarrow.RecordBatch."""

INLINE_IDS = 4096
"""Up to this many ids are inlined as an IN list (DuckDB pushes it into the scan as a filter and skips row groups by
their min/max); longer lists go through one list parameter."""


def dumps(value: Any) -> str:
    """JSON text for a JSON column (sorted keys so equal configs compare equal)."""
    return json.dumps(value, sort_keys=True, default=str)


def loads(value: Any) -> Any:
    """Parse a JSON column value (None stays None)."""
    return None if value is None else json.loads(value)


def first(result: duckdb.DuckDBPyConnection) -> Any:
    """First row of a result (or None), consuming the whole result as DuckDB requires before the next statement."""
    rows = result.fetchall()
    return rows[0] if rows else None


def count(result: duckdb.DuckDBPyConnection) -> int:
    """The single integer a `SELECT count(*) …` returns (0 when it returns no row)."""
    row = first(result)
    return int(row[0]) if row else 0


def arrow(conn: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Table:
    """Run a query and return its rows as an Arrow table (the relational API avoids an extra copy)."""
    return conn.sql(sql, params=params).to_arrow_table()


def numpy_columns(conn: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> dict[str, np.ndarray]:
    """Run a query with a small numeric result and return its columns as numpy arrays (no NULLs expected).

    For small results this is ~3× faster than the relational API's Arrow path (which plans the query twice).
    """
    return {str(k): np.asarray(v) for k, v in conn.execute(sql, params).fetchnumpy().items()}


def in_ids(column: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
    """A `column IN (...)` predicate over integer ids, and its parameters."""
    if len(ids) <= INLINE_IDS:
        return f"{column} IN ({', '.join(str(int(i)) for i in ids) or 'NULL'})", []
    return f"{column} IN (SELECT unnest(?::BIGINT[]))", [[int(i) for i in ids]]


def require_windows(corpus: str, ids: Sequence[int], found: Container[int]) -> None:
    """StoreError naming the ids among `ids` that a window query did not find."""
    missing = [i for i in ids if i not in found]
    if missing:
        raise StoreError(f"windows {missing[:10]} of corpus {corpus!r} are not in the store.")


def list_column(values_2d: np.ndarray, value_type: Any) -> Any:
    """A (N, T) numpy array as an Arrow list column of N rows."""
    n, t = values_2d.shape
    offsets = pa.array(np.arange(0, (n + 1) * t, t, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values_2d.reshape(-1), type=value_type))


def insert_arrow(
    conn: duckdb.DuckDBPyConnection, name: str, table: Table, sql: str, params: list[Any]
) -> Any:
    """Run `sql` (which reads the view `name`) with `table` registered as that view; return its rows."""
    conn.register(name, table)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.unregister(name)


def status_text(value: object) -> str:
    """A Status (or its string) as the text a `status` column stores; StoreError for anything else."""
    try:
        return Status(value).value
    except ValueError:
        raise StoreError(f"unknown status {value!r}; one of {[s.value for s in Status]}.") from None


def read_status(value: object, where: str) -> Status:
    """A `status` column value as a Status (StoreError naming the row for text no Status has)."""
    try:
        return Status(value)
    except ValueError:
        raise StoreError(
            f"{where} has unknown status {value!r}; one of {[s.value for s in Status]}."
        ) from None


def sql_path(path: Path) -> str:
    """A path as a single-quoted SQL string body."""
    return str(path).replace("'", "''")
