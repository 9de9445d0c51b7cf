"""The embedded default corpus: real English prose and Python code that exist on this machine without network.

Sources (Debian packages are installed by `make system-deps`):
- the King James Bible, through the `bible` program of Debian's ``bible-kjv`` (one document per chapter);
- Debian's ``fortunes`` collection (groups of fortunes);
- WordNet 3.0 glosses from Debian's ``wordnet-base`` (groups of definitions with their example sentences);
- the Python documentation sources from Debian's ``python3-doc`` (reStructuredText prose with code samples);
- the Python standard library's own ``.py`` sources (code), capped so prose stays the majority.

Documents are shuffled with a fixed seed so that any prefix of the corpus mixes all sources, and written once to
``$WORKBENCH_HOME/corpora/default-v{VERSION}.jsonl``. Build it with ``workbench corpus build``.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from sae_workbench import paths
from sae_workbench.errors import CorpusError

log = logging.getLogger(__name__)

VERSION = 1
SEED = 0
FORTUNES_DIR = Path("/usr/share/games/fortunes")
WORDNET_DIR = Path("/usr/share/wordnet")
PYDOC_DIR = Path("/usr/share/doc/python3-doc/html/_sources")
# Caps in characters (~4 characters per token) keep the mix balanced: code ≤ ~2.5M tokens of ~7M.
STDLIB_CHAR_CAP = 10_000_000
PYDOC_CHAR_CAP = 12_000_000
INSTALL_HINT = "run `make system-deps` (apt-get install bible-kjv fortunes wordnet-base python3-doc)"


def default_corpus_path() -> Path:
    """Path of the assembled default corpus, building it on first use."""
    path = paths.corpora_dir() / f"default-v{VERSION}.jsonl"
    if not path.exists():
        build_default_corpus(path)
    return path


def _bible() -> Iterator[tuple[str, str]]:
    """KJV chapters from the `bible` program (Debian bible-kjv)."""
    if shutil.which("bible") is None:
        raise CorpusError(f"the `bible` program is missing; {INSTALL_HINT}.")
    out = subprocess.run(
        ["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True, check=True
    ).stdout
    chapters: dict[str, list[str]] = {}
    for line in out.splitlines():
        m = re.match(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$", line.strip())
        if m:
            key = f"{m.group(1)} {m.group(2)}"
            chapters.setdefault(key, []).append(m.group(4))
    for key, verses in chapters.items():
        yield " ".join(verses), f"kjv:{key}"


def _fortunes() -> Iterator[tuple[str, str]]:
    """Debian fortunes in groups of 20, one file at a time (skipping the offensive ``off/`` folder)."""
    if not FORTUNES_DIR.is_dir():
        raise CorpusError(f"{FORTUNES_DIR} is missing; {INSTALL_HINT}.")
    for f in sorted(FORTUNES_DIR.iterdir()):
        if f.suffix or not f.is_file():
            continue
        items = [
            t.strip() for t in f.read_text(encoding="utf-8", errors="replace").split("\n%\n") if t.strip()
        ]
        for i in range(0, len(items), 20):
            yield "\n\n".join(items[i : i + 20]), f"fortunes:{f.name}:{i // 20}"


def _wordnet() -> Iterator[tuple[str, str]]:
    """WordNet glosses ("word: definition; examples"), 40 per document."""
    if not WORDNET_DIR.is_dir():
        raise CorpusError(f"{WORDNET_DIR} is missing; {INSTALL_HINT}.")
    for pos in ("noun", "verb", "adj", "adv"):
        lines = []
        for line in (WORDNET_DIR / f"data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue
            fields, gloss = line.split("|", 1)
            parts = fields.split()
            word = parts[4].replace("_", " ") if len(parts) > 4 else ""
            lines.append(f"{word} ({pos}): {gloss.strip()}")
        for i in range(0, len(lines), 40):
            yield "\n".join(lines[i : i + 40]), f"wordnet:{pos}:{i // 40}"


def _pydoc() -> Iterator[tuple[str, str]]:
    """Python documentation sources (reStructuredText)."""
    if not PYDOC_DIR.is_dir():
        raise CorpusError(f"{PYDOC_DIR} is missing; {INSTALL_HINT}.")
    total = 0
    for f in sorted(PYDOC_DIR.rglob("*.txt")):
        text = f.read_text(encoding="utf-8", errors="replace")
        if total + len(text) > PYDOC_CHAR_CAP:
            break
        total += len(text)
        # Split long files at section boundaries so documents stay a few thousand tokens at most.
        for i, part in enumerate(re.split(r"\n(?=\S[^\n]*\n[=\-~^*]{4,}\n)", text)):
            if part.strip():
                yield part, f"pydoc:{f.relative_to(PYDOC_DIR)}#{i}"


def _stdlib() -> Iterator[tuple[str, str]]:
    """Python standard library sources (tests and vendored packages skipped)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if rel.parts[0] in {"test", "site-packages", "idlelib", "lib2to3", "tkinter", "turtledemo"}:
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        if total + len(text) > STDLIB_CHAR_CAP:
            break
        total += len(text)
        yield text, f"stdlib:{rel}"


def build_default_corpus(path: Path) -> Path:
    """Assemble the default corpus into `path` (JSONL of {"text", "source"}), atomically."""
    docs: list[tuple[str, str]] = []
    for name, part in (
        ("kjv", _bible),
        ("fortunes", _fortunes),
        ("wordnet", _wordnet),
        ("pydoc", _pydoc),
        ("stdlib", _stdlib),
    ):
        before = len(docs)
        docs.extend(part())
        log.info("default corpus: %s gave %d documents", name, len(docs) - before)
    random.Random(SEED).shuffle(docs)
    payload = "".join(json.dumps({"text": t, "source": s}, ensure_ascii=False) + "\n" for t, s in docs)
    path.parent.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_bytes(path, payload.encode("utf-8"))
    log.info("default corpus: %d documents, %.1f MB → %s", len(docs), len(payload) / 1e6, path)
    return path
