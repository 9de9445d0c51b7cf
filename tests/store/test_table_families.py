"""Each table family's module names only its own tables in its SQL (an AST scan of workbench/store/).

`FAMILIES` declares which module(s) own which tables. A family reads another family's rows only through that family's
relation or subquery function (`_windows_sql`, `_activations_sql`, `explanations.explanation_ids_of_sae`) and writes
them only through its functions (`windows.insert_staged_windows`), so where and how a table's rows live (store file or
Parquet, which columns) is decided in one module. Modules that are not a table family (the schema, the caller's own
SQL, export, the whole-store check, the shared plumbing) are listed in `NOT_FAMILIES` with why. A new table or module
fails here until it is declared.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sae_workbench.store import Store
from tests.store.sql_scan import module_strings

STORE_DIR = Path(__file__).resolve().parents[2] / "workbench" / "store"

FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # family: (its modules, its tables)
    "saes": (("saes.py",), ("saes",)),
    "windows": (("windows.py",), ("windows",)),
    "indexing": (
        ("indexing.py", "ranges.py"),
        ("index_runs", "activations_staging", "activations", "index_ranges", "index_buckets", "index_steps"),
    ),
    "activation reads": (
        ("activations.py", "feature_rows.py", "tokens.py"),
        (),
    ),  # read through _activations_sql
    "partitions": (("partitioned.py", "graduate.py"), ("activation_partitions", "window_partitions")),
    "stats": (("stats.py",), ("feature_stats", "feature_neighbours")),
    "explanations": (("explanations.py",), ("explanations",)),
    "scores": (("scores.py",), ("scores", "evals")),
    "samples": (("samples.py",), ("samples",)),
    "llm_cache": (("llm_cache.py",), ("llm_cache",)),
    "embeddings": (("window_embeddings.py", "vectors.py"), ("window_vectors",)),
    "attributions": (("attributions.py",), ("attributions", "feature_effects")),
    "interactions": (("interactions.py",), ("interactions",)),
    "lrp": (("lrp.py",), ("lrp_attributions",)),
    "families": (
        ("families.py",),
        ("match_runs", "feature_matches", "match_agreement", "explanation_stability"),
    ),
}
NOT_FAMILIES = {
    "__init__.py": "the package docstring",
    "store.py": "the facade: composes the families, no SQL of its own",
    "base.py": "sessions, transactions, schema introspection (duckdb_tables / duckdb_columns)",
    "connection.py": "attaching the file",
    "sql.py": "helpers shared by the families",
    "migrations.py": "the schema: creates every table",
    "query.py": "the caller's own read-only SQL (`workbench sql`) over every table",
    "parquet.py": "export / import of whole tables by name",
    "export.py": "export of whole tables by name",
    "verify.py": "the whole-store check: every table against the schema and the ledgers",
    "lease.py": "the long writers' lease (no SQL)",
    "rows.py": "typed rows (no SQL)",
    "errors.py": "error types (no SQL)",
}
# Known reaches across families, each with why it is still there; the test fails when one is no longer needed.
EXCEPTIONS: dict[str, set[str]] = {
    # graduate moves a SAE's activations and a corpus's windows into Parquet and deletes them from the file in one
    # transaction with the ledger row; it reads and deletes those tables by name (issue 31: route through
    # indexing/windows functions once issue 34's ledger changes to graduate.py have landed).
    "graduate.py": {"activations", "windows", "index_runs"},
    # families.py (issue 36) joins explanations for explanation_stability; to read them through
    # explanations.explanation_ids_of_sae-style functions.
    "families.py": {"explanations"},
}

SQL_REFERENCE = re.compile(
    r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE|VIEW)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?\"?([A-Za-z_][A-Za-z0-9_]*)\"?",
    re.IGNORECASE,
)


def tables_named(path: Path, tables: set[str]) -> set[str]:
    """The store's tables that a module's SQL names after FROM / JOIN / INTO / UPDATE / TABLE / VIEW."""
    found: set[str] = set()
    for _, text in module_strings(ast.parse(path.read_text())):
        found |= {name.lower() for name in SQL_REFERENCE.findall(text)} & tables
    return found


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every table and view of a freshly migrated store."""
    store = Store.open(tmp_path_factory.mktemp("families") / "store.duckdb")
    return set(store.table_names()) - {"schema_migrations"}


def test_every_table_and_module_is_declared(tables: set[str]) -> None:
    owned = [t for _, family_tables in FAMILIES.values() for t in family_tables]
    assert len(owned) == len(set(owned)), "a table is declared in two families"
    assert tables - set(owned) == set(), "declare these tables' family in FAMILIES"
    modules = {m for family_modules, _ in FAMILIES.values() for m in family_modules}
    on_disk = {p.name for p in STORE_DIR.glob("*.py")}
    assert on_disk - modules - set(NOT_FAMILIES) == set(), "declare these modules in FAMILIES or NOT_FAMILIES"


def test_no_family_names_another_familys_tables(tables: set[str]) -> None:
    reaches: dict[str, set[str]] = {}
    for family_modules, family_tables in FAMILIES.values():
        for module in family_modules:
            path = STORE_DIR / module
            if not path.exists():
                continue
            foreign = tables_named(path, tables) - set(family_tables)
            if foreign:
                reaches[module] = foreign
    assert reaches == EXCEPTIONS


def test_the_scan_sees_a_reach(tmp_path: Path, tables: set[str]) -> None:
    """The scan finds table names in plain strings, concatenations and f-strings, and skips docstrings."""
    module = tmp_path / "planted.py"
    module.write_text(
        '"""Reads FROM windows in its docstring only."""\n'
        'a = "SELECT s.id FROM scores s "\n'
        '"LEFT JOIN explanations e ON e.id = s.explanation_id"\n'
        'b = f"INSERT OR IGNORE INTO windows SELECT * FROM {x}"\n'
        'c = "DELETE FROM index_runs WHERE sae_id = ?"\n'
    )
    assert tables_named(module, tables) == {"scores", "explanations", "windows", "index_runs"}
