"""Every `workbench ...` command the README shows exists as written: its subcommand, each `--flag`, and its values.

Command lines come from the README's fenced code blocks (backslash continuations joined, comments dropped) and from
its inline code spans that start with `workbench `. They are checked against the CLI's own click command tree (what
`--help` prints), never run: the subcommand path must resolve, every `--flag` must be one of the command's options
(or its `--no-` form), and a code-block line must parse as the command would parse it (values of the right type and
choice, no stray arguments); only a line with `...` may leave out a required option.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import typer
import typer._click.exceptions as click_errors  # typer 0.29 vendors click; its command tree uses these

if TYPE_CHECKING:
    from typer._click.core import Command

README = Path(__file__).resolve().parents[2] / "README.md"
# How the README spells the console script (the venv's path, the script, its alias).
PROGRAMS = {"workbench", ".venv/bin/workbench", "sae-workbench"}
# Placeholders that stand for "the rest of the options" in an example.
ELLIPSES = {"...", "…"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class ReadmeCommand:
    """One `workbench` invocation shown in the README."""

    line: int
    text: str
    words: list[str]
    parse: bool
    """Whether the whole line is a real command (code block) to parse, or an inline span checked for flags only."""


def _code_block_commands(text: str) -> list[ReadmeCommand]:
    """The `workbench` command lines of the fenced code blocks."""
    found: list[ReadmeCommand] = []
    in_block, joined, start = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_block = not in_block
            continue
        if not in_block:
            continue
        if not joined:
            start = number
        if line.rstrip().endswith("\\"):
            joined += line.rstrip()[:-1] + " "
            continue
        joined += line
        for part in re.split(r"\s*(?:&&|;|\|)\s*", joined.replace("$W ", "workbench ")):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            if words[:1] in (["do"], ["then"]):  # the body of a shell loop or condition
                words = words[1:]
            if words and words[0] in PROGRAMS:
                redirect = next((i for i, w in enumerate(words) if w.startswith(">")), len(words))
                found.append(ReadmeCommand(start, part.strip(), words[1:redirect], parse=True))
        joined = ""
    return found


def _inline_commands(text: str) -> list[ReadmeCommand]:
    """The inline code spans that start with a `workbench` command (flags checked, values not parsed)."""
    found: list[ReadmeCommand] = []
    in_block = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            continue
        for span in re.findall(r"`([^`]+)`", line):
            words = span.replace("\\|", "|").split()
            if words and words[0] in PROGRAMS:
                found.append(ReadmeCommand(number, span, words[1:], parse=False))
    return found


def _root() -> Command:
    """The CLI's click command tree with every stage command registered."""
    from sae_workbench.cli import _register_stage_commands, app

    if not any(c.name == "score" for c in app.registered_commands):
        _register_stage_commands()
    return typer.main.get_command(app)


def _subcommands(command: Command) -> dict[str, Any] | None:
    """A group's subcommands by name (None for a command that is not a group)."""
    return getattr(command, "commands", None)


def _resolve(root: Command, words: list[str]) -> tuple[Command, list[str], str]:
    """The command the words name, the words after its name, and its full name."""
    command = root
    name = "workbench"
    rest = list(words)
    while (subs := _subcommands(command)) is not None and rest and not rest[0].startswith("-"):
        sub = subs.get(rest[0])
        if sub is None:
            raise AssertionError(f"`{name}` has no subcommand {rest[0]!r} (it has {sorted(subs)})")
        name = f"{name} {rest.pop(0)}"
        command = sub
    return command, rest, name


def _option_names(command: Command) -> set[str]:
    """Every spelling of every option of a command, `--help` included."""
    names = {"--help"}
    for param in command.params:
        if param.param_type_name == "option":
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


ALL = (
    _code_block_commands(README.read_text()) + _inline_commands(README.read_text()) if README.exists() else []
)


def test_readme_shows_commands() -> None:
    """The extraction finds the README's commands (a broken extractor would make the check below vacuous)."""
    blocks = [c for c in ALL if c.parse]
    assert len(blocks) >= 15, [c.text for c in blocks]
    assert any(c.words[:1] == ["sql"] for c in blocks)
    assert any(c.words[:2] == ["llm", "serve"] for c in blocks)
    assert any(c.words[:1] == ["match"] for c in blocks)  # the family walkthrough's `$W match` (W=workbench)
    assert len([c for c in ALL if not c.parse]) >= 20


@pytest.mark.parametrize("shown", ALL, ids=[f"L{c.line}:{' '.join(c.words[:2])}" for c in ALL])
def test_readme_command_is_accepted(shown: ReadmeCommand) -> None:
    """The subcommand exists, every --flag is one of its options, and a code-block line parses as written."""
    command, rest, name = _resolve(_root(), shown.words)
    known = _option_names(command)
    flags = (
        FLAG.findall(" ".join(rest))
        if not shown.parse
        else [w.split("=")[0] for w in rest if w.startswith("--")]
    )
    unknown = [f for f in flags if f not in known]
    assert not unknown, f"README line {shown.line}: `{shown.text}`: {name} has no option {unknown}"
    if not shown.parse or _subcommands(command) is not None:
        return
    args = [w for w in rest if w not in ELLIPSES]
    try:
        command.make_context(name, args)
    except click_errors.MissingParameter as err:
        # Only an example that says it leaves options out (the README's `...`) may miss a required one.
        if not ELLIPSES & set(rest):
            pytest.fail(f"README line {shown.line}: `{shown.text}` misses {err.format_message()}")
    except click_errors.UsageError as err:
        pytest.fail(f"README line {shown.line}: `{shown.text}` does not parse: {err.format_message()}")


def test_every_command_is_in_the_command_table() -> None:
    """Each command the CLI registers (and each `llm`/`corpus` subcommand) has a row in the README's command table."""
    text = README.read_text()
    table = text[text.index("## Command line") :]
    table = table[: table.index("\n\n", table.index("| command |"))]
    rows = {line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| `workbench")}
    root = _root()
    subs = _subcommands(root) or {}
    missing: list[str] = []
    for name, command in subs.items():
        inner = _subcommands(command)
        names = [name] if inner is None else [f"{name} {sub}" for sub in inner]
        for full in names:
            head, _, tail = full.partition(" ")
            if not any(
                f"`workbench {full}" in row or (tail and f"`workbench {head}" in row and tail in row)
                for row in rows
            ):
                missing.append(full)
    assert not missing, f"commands without a row in the README's command table: {missing}"


def test_make_targets_exist() -> None:
    """Every `make X` the README names is a Makefile target."""
    targets = set(re.findall(r"^([a-z][a-z-]*):", (README.parent / "Makefile").read_text(), re.MULTILINE))
    named = set(re.findall(r"`make ([a-z][a-z-]*)", README.read_text()))
    named |= {m for c in _code_block_lines() for m in re.findall(r"^make ([a-z][a-z-]*)", c)}
    assert named, "no make targets found in the README"
    assert named <= targets, f"README names make targets the Makefile lacks: {sorted(named - targets)}"


def _code_block_lines() -> list[str]:
    """The lines of the README's fenced code blocks."""
    lines: list[str] = []
    in_block = False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            in_block = not in_block
        elif in_block:
            lines.append(line.strip())
    return lines


def test_store_section_names_every_table(tmp_path: Path) -> None:
    """Every table a fresh store has (all migrations applied) is named in the README's "The store" section."""
    from sae_workbench.store import Store

    store = Store.open(tmp_path / "store.duckdb")
    tables = {
        r["table_name"] for r in store.query("SELECT table_name FROM information_schema.tables").to_pylist()
    }
    text = README.read_text()
    section = text[text.index("## The store") :]
    section = section[: section.index("\n## ", 1)]
    named = set(re.findall(r"`([a-z_]+)`", section))
    missing = sorted(tables - named)
    assert not missing, f"tables the README's store section does not name: {missing}"
