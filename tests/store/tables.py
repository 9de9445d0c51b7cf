"""Comparing every table of two store files row for row (EXCEPT ALL both ways), for the crash/resume and
refused-input tests: a rerun after a kill, or a refused command, must leave exactly what the reference leaves."""

from __future__ import annotations

from pathlib import Path

import duckdb

VOLATILE_TYPES = ("TIMESTAMP", "TIMESTAMP WITH TIME ZONE")
"""Column types left out of the comparison: when a row was written differs between two runs by design."""


def table_differences(a: Path, b: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """table -> (rows only in a, rows only in b), for every table of either file whose rows differ (EXCEPT ALL
    both ways, timestamp columns and the `skip` tables left out); empty when both hold the same rows."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
        con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
        tables = {
            str(r[0]): str(r[1])
            for r in con.execute(
                "SELECT table_name, database_name FROM duckdb_tables() WHERE database_name IN ('a', 'b')"
            ).fetchall()
        }
        names_a = {str(r[0]) for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'a'").fetchall()}  # fmt: skip
        names_b = {str(r[0]) for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'b'").fetchall()}  # fmt: skip
        out: dict[str, tuple[int, int]] = {}
        for table in sorted(set(tables) - set(skip)):
            if table not in names_a or table not in names_b:
                out[table] = (-1, -1)
                continue
            columns = [
                f'"{r[0]}"'
                for r in con.execute(
                    "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'a' AND table_name = ? "
                    "ORDER BY column_index",
                    [table],
                ).fetchall()
                if str(r[1]) not in VOLATILE_TYPES
            ]
            cols = ", ".join(columns)
            only_a = con.execute(
                f"SELECT count(*) FROM (SELECT {cols} FROM a.{table} EXCEPT ALL SELECT {cols} FROM b.{table})"
            ).fetchall()[0][0]
            only_b = con.execute(
                f"SELECT count(*) FROM (SELECT {cols} FROM b.{table} EXCEPT ALL SELECT {cols} FROM a.{table})"
            ).fetchall()[0][0]
            if only_a or only_b:
                out[table] = (int(only_a), int(only_b))
        return out
    finally:
        con.close()


def table_counts(path: Path) -> dict[str, int]:
    """table -> rows, of every table in a store file."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        names = [str(r[0]) for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        return {n: int(con.execute(f"SELECT count(*) FROM {n}").fetchall()[0][0]) for n in names}
    finally:
        con.close()
