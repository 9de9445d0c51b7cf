"""The dependency direction of the packages, and no import circle (an AST scan of every module, imports inside
functions included).

    cli → app → evaluation → explainers → sae → examples → llm → store → core

A package may import only packages to its right; the core (`sae_workbench`'s own modules) imports none of them. The
README's layout section draws the same picture.

Inside `evaluation`, its sub-packages have an order of their own (highest first; peers in one tier never import each
other):

    reproductions → families → scorers | absorption | interactions → attribution

Reproductions rebuild papers' tables from the stages below them (PRISM Table 1 from the scorers' CoSy summary, the
rule-cap sweep from the score job). Families compares SAE families through the scorers' results. Scorers, absorption
and interactions are separate stages; interactions build on attribution (DePass readouts and games). A sub-package
missing from the table fails the check until it is placed in it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Folder of each package in the repository (setuptools' package-dir maps them into sae_workbench).
ROOTS = {"sae_workbench": "workbench", "sae_workbench.sae": "sae", "sae_workbench.explainers": "explainers",
         "sae_workbench.evaluation": "evaluation", "sae_workbench.app": "app"}  # fmt: skip
# Highest layer first; "core" is every sae_workbench module outside the others.
LAYERS = ["cli", "app", "evaluation", "explainers", "sae", "examples", "llm", "store", "core"]
# Tiers of evaluation's sub-packages, highest first (see the module docstring); "" is evaluation's own __init__.
EVALUATION_TIERS = [
    {"reproductions"},
    {"families"},
    {"scorers", "absorption", "interactions"},
    {"attribution"},
    {""},
]


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found: dict[str, Path] = {}
    for package, folder in ROOTS.items():
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO / folder).with_suffix("").parts
            if package == "sae_workbench" and rel[0] in ("sae", "explainers", "evaluation", "app"):
                continue
            parts = [p for p in rel if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def layer(module: str) -> str:
    """The layer a module belongs to."""
    parts = module.split(".")
    if module == "sae_workbench.__main__":
        return "cli"  # `python -m sae_workbench` is the CLI
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `module` imports (absolute and relative, at any depth of the file)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_pkg else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != module:
                out.add(t)
    return out


@functools.cache
def graph() -> dict[str, set[str]]:
    """Import edges between the package's modules (scanned once per session; callers do not change it)."""
    mods = modules()
    known = set(mods)
    return {m: imports(m, p, known) for m, p in mods.items()}


def evaluation_part(module: str) -> str | None:
    """The sub-package of evaluation a module belongs to ("" for evaluation's __init__, None outside evaluation; a
    module lying flat in evaluation/ is a part of its own, which the tier table does not know)."""
    parts = module.split(".")
    if parts[:2] != ["sae_workbench", "evaluation"]:
        return None
    return parts[2] if len(parts) > 2 else ""


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Every import that goes up: to a higher layer, or inside evaluation to a higher tier or a peer sub-package (a
    sub-package missing from EVALUATION_TIERS counts as one)."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    tier = {name: i for i, names in enumerate(EVALUATION_TIERS) for name in names}
    bad = []
    for m, targets in edges.items():
        for t in targets:
            if rank[layer(t)] < rank[layer(m)]:
                bad.append(f"{m} ({layer(m)}) imports {t} ({layer(t)})")
                continue
            src, dst = evaluation_part(m), evaluation_part(t)
            if src is None or dst is None or src == dst:
                continue
            if src not in tier or dst not in tier or tier[dst] <= tier[src]:
                bad.append(f"{m} (evaluation.{src}) imports {t} (evaluation.{dst})")
    return sorted(bad)


def test_scan_sees_the_packages() -> None:
    """The scan finds modules in every layer (so an empty scan cannot pass the checks below)."""
    seen = {layer(m) for m in modules()}
    assert seen == set(LAYERS)


def test_scan_sees_evaluation_sub_packages() -> None:
    """Every sub-package of evaluation is in the tier table (a new one is placed there before it lands)."""
    parts = {evaluation_part(m) for m in modules()} - {None}
    placed = set().union(*EVALUATION_TIERS)
    assert {"scorers", "absorption", "reproductions", "attribution", "interactions"} <= parts
    assert parts <= placed, parts - placed


def test_no_package_imports_one_above_it() -> None:
    """Every import goes down the layer list (or stays inside its own layer), and inside evaluation down its tiers."""
    bad = upward_imports(graph())
    assert not bad, "\n".join(bad)


def test_check_fails_on_a_planted_upward_import(tmp_path: Path) -> None:
    """The tree's graph plus three planted modules with upward imports (a scorer importing a reproduction, absorption
    importing a scorer through a relative import, sae importing the app inside a function) fails the check on exactly
    those three imports."""
    edges = {m: set(t) for m, t in graph().items()}
    planted = {
        "sae_workbench.evaluation.scorers.planted": "import sae_workbench.evaluation.reproductions.prism_table1\n",
        "sae_workbench.evaluation.absorption.planted": "from ..scorers.metrics import auroc\n",
        "sae_workbench.sae.planted": "def f():\n    import sae_workbench.app.queries\n",
    }
    known = set(edges) | set(planted)
    for name, code in planted.items():
        path = tmp_path / f"{name}.py"
        path.write_text(code)
        edges[name] = imports(name, path, known)
    assert upward_imports(edges) == [
        "sae_workbench.evaluation.absorption.planted (evaluation.absorption) imports "
        "sae_workbench.evaluation.scorers.metrics (evaluation.scorers)",
        "sae_workbench.evaluation.scorers.planted (evaluation.scorers) imports "
        "sae_workbench.evaluation.reproductions.prism_table1 (evaluation.reproductions)",
        "sae_workbench.sae.planted (sae) imports sae_workbench.app.queries (app)",
    ]


def test_no_import_circle() -> None:
    """No cycle among modules (Tarjan's strongly connected components; package __init__ re-exports excluded)."""
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w.startswith(v + "."):
                continue  # a package importing its own sub-module (re-export) is not a circle
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, cycles


@pytest.mark.parametrize("top", ["workbench", "sae", "explainers", "evaluation", "app"])
def test_no_module_imports_the_old_top_level_names(top: str) -> None:
    """Code imports `sae_workbench.…` only: a bare `import sae` would pick up a user's own folder or another package."""
    bad = []
    for m, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            bad += [f"{m}: {n}" for n in names if n == top or n.startswith(top + ".")]
    assert not bad, bad
