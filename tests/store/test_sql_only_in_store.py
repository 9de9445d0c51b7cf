"""All SQL lives in workbench/store/ (style rule 5): an AST scan of every other module of the package for string
constants and f-strings that start with an SQL statement keyword. Docstrings are left out (they show example
commands); `workbench sql` passes the user's own query through `Store.query`, so it has no SQL constant of its own.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.store.sql_scan import module_strings

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("workbench", "sae", "explainers", "evaluation", "app")
STORE = REPO / "workbench" / "store"
STATEMENT = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|ATTACH|DETACH|COPY|PRAGMA|WITH\s+\w+\s+AS)\s",
    re.DOTALL,
)
# module (relative to the repository) -> why it may hold SQL; keep this tiny.
ALLOWED: dict[str, str] = {}


def statements(path: Path) -> list[tuple[int, str]]:
    """(line, first 60 characters) of each non-docstring string in `path` that starts like an SQL statement."""
    return [
        (line, text[:60])
        for line, text in module_strings(ast.parse(path.read_text()))
        if STATEMENT.match(text)
    ]


def package_modules() -> list[Path]:
    """Every module of the package outside workbench/store/."""
    return [p for folder in FOLDERS for p in sorted((REPO / folder).rglob("*.py")) if STORE not in p.parents]


def test_no_sql_outside_the_store() -> None:
    leaks = {
        str(p.relative_to(REPO)): hits
        for p in package_modules()
        if (hits := statements(p)) and str(p.relative_to(REPO)) not in ALLOWED
    }
    assert leaks == {}, "move these queries into a workbench/store/ module behind a named method"


def test_the_scan_finds_planted_sql(tmp_path: Path) -> None:
    """Plain strings, f-strings and CTEs are found; docstrings and prose are not."""
    module = tmp_path / "planted.py"
    module.write_text(
        '"""SELECT in a docstring is an example."""\n'
        'a = "SELECT feature FROM activations"\n'
        'b = f"DELETE FROM {table} WHERE sae_id = ?"\n'
        'c = """\n    WITH pairs AS (SELECT 1) SELECT * FROM pairs"""\n'
        'd = "Select a feature to see its examples."\n'
        'e = "With --backend ray: the workers share it"\n'
    )
    assert [line for line, _ in statements(module)] == [2, 3, 4]
    assert len(package_modules()) > 100  # the scan sees the package
