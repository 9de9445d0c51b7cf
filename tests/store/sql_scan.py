"""The string scan both SQL tests use: every string of a module that could hold SQL, with its line."""

from __future__ import annotations

import ast


def module_strings(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of every string constant and f-string of a module (an f-string's holes become `{}`), docstrings
    and the constant parts inside f-strings left out."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    in_fstring = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in in_fstring or id(node) in docstrings:
            continue
        if isinstance(node, ast.JoinedStr):
            out.append(
                (
                    node.lineno,
                    "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values),
                )
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
    return out
