"""Tables that benchmarks emit and bench/run_all.py collects: parse Markdown tables from a script's stdout, read or
write the `--json PATH` form, render tables back to Markdown, and pull numbers out of cells.

JSON form written by `write_tables_json` (and read by `read_tables_json`):

    {"tables": [{"title": "...", "columns": ["a", "b"], "rows": [["x", "1.0"]]}], "notes": ["context line", ...]}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

MISSING = "(missing)"
"""Cell text for a row shorter than its header: visible in RESULTS.md instead of a silent gap."""


@dataclass(frozen=True)
class Table:
    """One results table of a benchmark."""

    columns: list[str]
    """Header cells."""
    rows: list[list[str]]
    """Body rows, each padded to len(columns) (short rows are filled with MISSING)."""
    title: str = ""
    """Optional caption shown above the table."""

    def row(self, prefix: str) -> list[str] | None:
        """First row whose first cell starts with `prefix` (case-insensitive), or None."""
        p = prefix.lower()
        return next((r for r in self.rows if r[0].strip().lower().startswith(p)), None)

    def col(self, name_prefix: str) -> int | None:
        """Index of the first column whose header starts with `name_prefix` (case-insensitive), or None."""
        p = name_prefix.lower()
        return next((i for i, c in enumerate(self.columns) if c.strip().lower().startswith(p)), None)


@dataclass
class Emitted:
    """What one benchmark run produced: its tables and the non-table lines of its output (context)."""

    tables: list[Table] = field(default_factory=list)
    """Tables in the order printed."""
    notes: list[str] = field(default_factory=list)
    """Non-empty, non-table output lines (e.g. the model/hook/size line a script prints before its table)."""


NOISE = ("Moving model to device",)
"""Prefixes of library chatter on stdout that is not context worth keeping (TransformerLens prints this one)."""


def _cells(line: str) -> list[str]:
    """Cells of one Markdown table line `| a | b |`."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [c.strip() for c in inner.split("|")]


def _is_separator(cells: list[str]) -> bool:
    """True for a header separator row like `|---|:--:|`."""
    return bool(cells) and all(re.fullmatch(r":?-+:?", c) for c in cells)


BLANK = "—"
"""Cell text for a cell the benchmark printed empty on purpose (e.g. no target for that row)."""


def _padded(cells: list[str], width: int) -> list[str]:
    """Cells padded with MISSING (or truncated) to `width`; cells printed empty become BLANK."""
    cells = [c if c else BLANK for c in cells[:width]]
    return cells + [MISSING] * (width - len(cells))


def parse_markdown(text: str, max_notes: int = 12) -> Emitted:
    """Every Markdown table in `text` (a header line, a `|---|` separator, body lines) plus up to `max_notes`
    other non-empty lines."""
    out = Emitted()
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.startswith("|") and nxt.startswith("|") and _is_separator(_cells(nxt)):
            columns = _cells(line)
            rows: list[list[str]] = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_padded(_cells(lines[i]), len(columns)))
                i += 1
            out.tables.append(Table(columns, rows))
            continue
        if line and not line.startswith(NOISE) and len(out.notes) < max_notes:
            out.notes.append(line)
        i += 1
    return out


def write_tables_json(path: str | Path, tables: list[Table], notes: list[str] | None = None) -> None:
    """Write `tables` (and context `notes`) as the JSON form that bench/run_all.py reads."""
    payload = {
        "tables": [{"title": t.title, "columns": t.columns, "rows": t.rows} for t in tables],
        "notes": list(notes or []),
    }
    Path(path).write_text(json.dumps(payload, indent=1, ensure_ascii=False), encoding="utf-8")


def read_tables_json(path: str | Path) -> Emitted:
    """Read the JSON form written by `write_tables_json`."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    tables = []
    for t in data.get("tables", []):
        columns = [str(c) for c in t["columns"]]
        rows = [_padded([str(c) for c in r], len(columns)) for r in t["rows"]]
        tables.append(Table(columns, rows, str(t.get("title", ""))))
    return Emitted(tables, [str(n) for n in data.get("notes", [])])


def _escape(cell: str) -> str:
    """A cell safe inside a Markdown table (pipes escaped, newlines folded)."""
    return cell.replace("|", "\\|").replace("\n", " ").strip() or MISSING


def render(table: Table) -> str:
    """Markdown text of `table` (with its title as an italic caption when set)."""
    out = [f"*{table.title}*", ""] if table.title else []
    out.append("| " + " | ".join(_escape(c) for c in table.columns) + " |")
    out.append("|" + "---|" * len(table.columns))
    out += ["| " + " | ".join(_escape(c) for c in r) + " |" for r in table.rows]
    return "\n".join(out)


def merge_device_columns(cpu: Table, gpu: Table, label: str = "GPU") -> Table:
    """`cpu` with `gpu`'s value columns appended as '<column> [label]', rows matched on the first cell; rows the
    other device lacks say so explicitly."""
    extra = [f"{c} [{label}]" for c in gpu.columns[1:]]
    by_key = {r[0]: r[1:] for r in gpu.rows}
    absent = [f"not run on {label}"] * len(extra)
    rows = [r + by_key.get(r[0], absent) for r in cpu.rows]
    keys = {r[0] for r in cpu.rows}
    rows += [
        [r[0], *(["not run on CPU"] * (len(cpu.columns) - 1)), *r[1:]] for r in gpu.rows if r[0] not in keys
    ]
    return Table(cpu.columns + extra, rows, cpu.title)


def number(cell: str | None) -> float | None:
    """First number in a cell ('1,234 tok/s' → 1234.0, '93.2%' → 93.2, '0.82×' → 0.82), or None."""
    if cell is None:
        return None
    m = re.search(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+", cell)
    return float(m.group().replace(",", "")) if m else None
