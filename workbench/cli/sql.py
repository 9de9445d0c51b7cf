"""`workbench sql`: run one read-only query on the feature store, even while a job (explain, index) holds it.

    workbench sql --store runs/store.duckdb "SELECT explainer, count(*) FROM explanations GROUP BY 1"
    workbench sql --store runs/store.duckdb --format csv "SELECT * FROM scores" > scores.csv
    workbench sql --store runs/store.duckdb "DESCRIBE activations"

The query waits for its turn through the store's lease (a raw `duckdb.connect(path, read_only=True)` fails with
DuckDB's lock error while a job writes); only one SELECT / WITH / DESCRIBE / SHOW / SUMMARIZE / EXPLAIN statement is
accepted. In Python: `Store.open(path, read_only=True).query(sql)` returns a pyarrow Table.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import typer

from sae_workbench import defaults
from sae_workbench.cli import options
from sae_workbench.errors import WorkbenchError

FORMATS = ("table", "csv", "json")
MAX_CELL = 60
"""Longest cell the table format prints (longer text is cut with an ellipsis; csv and json print it whole)."""


class SqlFormatError(WorkbenchError):
    """Unknown --format of `workbench sql`."""


def _cell(value: Any) -> str:
    """A value as one table cell."""
    text = "NULL" if value is None else str(value).replace("\n", "\\n")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def format_rows(names: list[str], rows: list[dict[str, Any]], fmt: str) -> str:
    """Rows as an aligned text table (with a row count), CSV with a header, or a JSON list of objects."""
    if fmt == "json":
        return json.dumps(rows, default=str, ensure_ascii=False)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([[row[n] for n in names] for row in rows])
        return out.getvalue().rstrip("\n")
    if fmt != "table":
        raise SqlFormatError(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}.")
    cells = [[_cell(row[n]) for n in names] for row in rows]
    widths = [max([len(n), *(len(r[i]) for r in cells)]) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def sql(
    query: str = typer.Argument(
        ..., help="One read-only statement: SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE."
    ),
    store: options.Store = defaults.STORE_PATH,
    fmt: str = typer.Option("table", "--format", help="table (aligned text), csv or json."),
) -> None:
    """Run one read-only SQL query on the store (works while a job holds it) and print the rows."""
    from sae_workbench.store import Store

    if fmt not in FORMATS:
        raise SqlFormatError(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}.")
    table = Store.open(store, read_only=True).query(query)
    typer.echo(format_rows([str(n) for n in table.column_names], table.to_pylist(), fmt))
