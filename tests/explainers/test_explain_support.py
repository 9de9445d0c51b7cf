"""Builders shared by the explainer tests: a real DuckDB store over real corpus windows with planted features.

Planted features of SAE "planted" (d_sae 4), over ~KJV, Python stdlib, Python docs and WordNet windows of the default
corpus tokenised by SmolLM2's tokenizer:
  0  fires on the tokens LORD (5.0), God (3.0) and Israel (2.0) wherever they occur
  1  fires on every counted token of windows starting in a KJV or a stdlib document (two unrelated topics)
  2  never fires (dead)
  3  fires on LORD only (monosemantic control)
  4  fires on six frequent KJV tokens (unto, shall, thou, thy, him, thee) at 3.0 — more than a 1–2 rule root covers
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from sae_workbench.corpus import iter_windows, resolve_corpus
from sae_workbench.default_corpus import default_corpus_path
from sae_workbench.store import Store

PLANTED_SAE = "planted"
PLANTED_TOKENS = {"lord": 5.0, "god": 3.0, "israel": 2.0}
WIDE_TOKENS = {"unto", "shall", "thou", "thy", "him", "thee"}
CONTEXT = 32


Plant = Callable[[int, int, str, str], list[tuple[int, float]]]
"""(window id, position, token string, source) → the (feature, activation) pairs planted at that token."""


def default_plant(wid: int, pos: int, token: str, source: str) -> list[tuple[int, float]]:
    """Features 0-4 of the module docstring."""
    key = token.strip().lower()
    out = []
    if key in PLANTED_TOKENS:
        out.append((0, PLANTED_TOKENS[key]))
    if key == "lord":
        out.append((3, 4.0))
    if key in WIDE_TOKENS:
        out.append((4, 3.0))
    if source.startswith(("kjv", "stdlib")):
        out.append((1, 1.0 + 0.5 * ((pos * 7 + wid) % 3)))
    return out


def planted_corpus(folder: Path, per_source: int = 25, want: dict[str, int] | None = None) -> Path:
    """A small JSONL corpus with the first documents of sources of the default corpus (default: four sources)."""
    want = dict(want) if want is not None else {
        "kjv": per_source, "stdlib": per_source, "pydoc": per_source // 2, "wordnet": per_source // 2,
    }  # fmt: skip
    docs = []
    with default_corpus_path().open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            kind = row["source"].split(":")[0]
            if want.get(kind, 0) > 0:
                want[kind] -= 1
                docs.append({"text": row["text"][:1500], "source": row["source"]})
            if not any(want.values()):
                break
    path = folder / "planted.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def build_planted_store(
    folder: Path, tokenizer, want: dict[str, int] | None = None, plant: Plant = default_plant, d_sae: int = 5
) -> Store:
    """Index the planted features (`plant`, default: the module docstring's) over a small corpus (documents per
    source: `want`) into a fresh store; the SAE is registered `d_sae` features wide."""
    corpus = resolve_corpus(str(planted_corpus(folder, want=want)))
    store = Store.open(folder / "store.duckdb")
    store.register_sae(PLANTED_SAE, "tiny", "blocks.1.hook_resid_post", 64, d_sae, {"planted": True})
    store.start_index(PLANTED_SAE, corpus.name, CONTEXT, None, {"planted": True})
    rows: dict[str, list] = {"feature": [], "window_id": [], "position": [], "value": []}
    batches = list(iter_windows(corpus, tokenizer, CONTEXT, batch_size=4096))
    n = 0

    def add(feature: int, wid: int, pos: int, value: float) -> None:
        for name, v in zip(
            ("feature", "window_id", "position", "value"), (feature, wid, pos, value), strict=True
        ):
            rows[name].append(v)

    for b in batches:
        strings = [tokenizer.batch_decode([[int(t)] for t in row]) for row in b.tokens_BT]
        for wid, toks, mask, src in zip(b.window_ids, strings, b.mask_BT, b.sources, strict=True):
            for pos in range(1, CONTEXT):
                if not mask[pos]:
                    continue
                for feature, value in plant(int(wid), pos, toks[pos], src):
                    add(feature, int(wid), pos, value)
        windows = {
            "window_ids": b.window_ids, "tokens_BT": b.tokens_BT, "mask_BT": b.mask_BT, "texts": b.texts,
            "token_strings": strings, "sources": b.sources, "offsets": b.offsets,
        }  # fmt: skip
        n = int(b.window_ids.max()) + 1
        acts = pa.table({
            "feature": pa.array(rows["feature"], pa.int32()), "window_id": pa.array(rows["window_id"], pa.int64()),
            "position": pa.array(rows["position"], pa.int16()), "value": pa.array(rows["value"], pa.float32()),
        })  # fmt: skip
        store.add_index_batch(PLANTED_SAE, corpus.name, windows, acts, n, int(b.mask_BT.sum()))
        rows = {k: [] for k in rows}
    store.finalize_index(PLANTED_SAE)
    return store


def window_sources(store: Store) -> dict[int, str]:
    """Source kind (kjv, stdlib, …) of every window of the planted store."""
    progress = store.index_progress(PLANTED_SAE)
    assert progress is not None
    ids = store.indexed_window_ids(PLANTED_SAE)
    return {w.window_id: w.source.split(":")[0] for w in store.get_windows(progress.corpus, ids)}


def planted_token_set(store: Store) -> np.ndarray:
    """Feature 0's planted tokens (for assertions)."""
    return np.array(sorted(PLANTED_TOKENS))
