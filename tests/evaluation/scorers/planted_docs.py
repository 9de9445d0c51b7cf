"""A synthetic store whose documents each span two adjacent windows (issue 33's checks).

Windows are 64 tokens (BOS + 63 word tokens), cut two per document (`doc{d}`, offsets 0 and 63), so window 2d and
2d + 1 are adjacent and share a document. Feature 0 fires on the token " alpha" in both windows of the first
`n_active_docs` documents, with the same value in both (1 + d / n_docs), so its top windows come in adjacent pairs
from the same documents. Feature 1 fires on " beta" in the first window of each of the first `n_beta_windows`
documents (all at one value: many equally active windows, one per document). Nothing here depends on a model or a tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sae_workbench.examples.testsets import SplitConfig
from sae_workbench.store import ExplanationRecord, Store

SAE_ID = "planted-docs"
CORPUS = "planted-docs-corpus"
CONTEXT = 64
ALPHA, BETA = 0, 1
VOCAB = tuple(f" w{i}" for i in range(300))


def build_docs_store(
    path: Path, n_docs: int = 400, n_active_docs: int = 60, n_beta_windows: int = 200
) -> Store:
    """The store described in the module docstring (2 × `n_docs` windows)."""
    rng = np.random.default_rng(7)
    n = 2 * n_docs
    words = rng.integers(0, len(VOCAB), size=(n, CONTEXT - 1))
    strings = [["<bos>"] + [VOCAB[j] for j in row] for row in words]
    rows: list[tuple[int, int, int, float]] = []  # (feature, window, position, value)
    for w in range(n):
        doc = w // 2
        if doc < n_active_docs:
            pos = 5 + (w * 7) % 50
            strings[w][pos] = " alpha"
            rows.append((ALPHA, w, pos, 1.0 + doc / n_docs))
        if w < 2 * n_beta_windows and w % 2 == 0:
            pos = 40 + w % 20
            strings[w][pos] = " beta"
            rows.append((BETA, w, pos, 2.0))
    store = Store.open(path)
    store.register_sae(SAE_ID, "tiny", "blocks.0.hook_resid_post", 64, 2, {"planted": True})
    store.start_index(SAE_ID, CORPUS, CONTEXT, None, {"planted": "two windows per document"})
    window_ids = np.arange(n, dtype=np.int64)
    windows = {
        "window_ids": window_ids,
        "tokens_BT": np.concatenate([np.zeros((n, 1), np.int64), words + 1], axis=1),
        "mask_BT": np.ones((n, CONTEXT), dtype=bool),
        "texts": ["".join(s[1:]) for s in strings],
        "token_strings": strings,
        "sources": [f"doc{w // 2}" for w in range(n)],
        "offsets": np.array([(w % 2) * (CONTEXT - 1) for w in range(n)], dtype=np.int64),
    }
    feats, wins, poss, vals = zip(*rows, strict=True)
    acts = pa.table(
        {
            "feature": np.asarray(feats, np.int32),
            "window_id": np.asarray(wins, np.int64),
            "position": np.asarray(poss, np.int16),
            "value": np.asarray(vals, np.float32),
        }
    )
    store.add_index_batch(SAE_ID, CORPUS, windows, acts, n, n * (CONTEXT - 1))
    store.finalize_index(SAE_ID)
    return store


def explanation(
    feature: int,
    split: SplitConfig,
    example_ids: list[int],
    negative_ids: list[int] | None = None,
    extra: dict[str, Any] | None = None,
    name: str = "planted",
) -> ExplanationRecord:
    """A stored-shape explanation of `feature` ("the word alpha"/"beta") made on `split`, shown `example_ids`."""
    word = "alpha" if feature == ALPHA else "beta"
    return ExplanationRecord(
        sae_id=SAE_ID,
        feature=feature,
        explainer=name,
        explainer_version="test",
        prompt_version="",
        llm_model="",
        llm_params={},
        sampling={"record_len": split.record_length, "split": split.params()},
        example_ids=example_ids,
        negative_ids=negative_ids or [],
        text=f"the word {word}",
        rules=[{"activates_on": f'"{word}"', "strength": 5}],
        config_key=f"{name}-{feature}-{split.record_length}-{split.negatives.value}",
        extra=extra or {},
    )
