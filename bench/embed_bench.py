"""Window embedding (what the lexical and tree explainers' SIMILAR negatives need once per corpus) vs a plain batched
`SentenceTransformer.encode` of the same texts, in the same run (issue 37 item 2).

    python -m bench.embed_bench --windows 2048 --repeats 3

A store of `--windows` 128-token windows of real text (the Python standard library's sources, SmolLM2's tokenizer)
is built once; each repeat then times, on a fresh copy of it and interleaved so machine load hits all alike:
- plain encode: `SentenceTransformer.encode(texts, batch_size=64, normalize_embeddings=True)` on the windows'
  32-token crops (the texts `ensure_window_embeddings` embeds), read beforehand — the baseline;
- ensure_window_embeddings: reading the crops from the store, embedding, writing the vectors and their
  memory-mapped copy (examples/sampling.py);
- previous loop: the loop before issue 37 (chunks of 512 windows, each read, encoded and written on its own).
Ratio = row seconds / plain-encode seconds of the same repeat (best repeat shown). Target: ≤ 1.05×.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from sae_workbench.embeddings import DEFAULT_EMBEDDING_MODEL, embed_texts, load_embedding_model
from sae_workbench.examples.sampling import EMBED_CROP, crop_texts, ensure_window_embeddings
from sae_workbench.models import tiny_tokenizer
from sae_workbench.store import Store
from sae_workbench.store.window_embeddings import embedding_key

CONTEXT = 128
SAE = "bench-sae"
CORPUS = "stdlib"


def build_store(path: Path, n_windows: int) -> None:
    """A store whose corpus has `n_windows` windows of stdlib source text (BOS first, no activations)."""
    import sysconfig

    tokenizer = tiny_tokenizer()
    ids: list[int] = []
    for source in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        ids += tokenizer(source.read_text(errors="ignore"))["input_ids"]
        if len(ids) >= n_windows * (CONTEXT - 1):
            break
    tokens_BT = np.zeros((n_windows, CONTEXT), np.int32)  # position 0: id 0, <|endoftext|>, the BOS
    tokens_BT[:, 1:] = np.asarray(ids[: n_windows * (CONTEXT - 1)], np.int32).reshape(n_windows, CONTEXT - 1)
    mask_BT = np.ones_like(tokens_BT, bool)
    mask_BT[:, 0] = False
    strings = [tokenizer.convert_ids_to_tokens(row.tolist()) for row in tokens_BT]
    strings = [[tokenizer.convert_tokens_to_string([t]) for t in row] for row in strings]
    store = Store.open(path)
    store.register_sae(SAE, "tiny", "blocks.0.hook_resid_post", 64, 8, {})
    store.start_index(SAE, CORPUS, CONTEXT, None, {})
    windows = {
        "window_ids": np.arange(n_windows), "tokens_BT": tokens_BT, "mask_BT": mask_BT,
        "texts": ["".join(s[1:]) for s in strings], "token_strings": strings, "sources": ["stdlib"] * n_windows,
        "offsets": np.zeros(n_windows, np.int64),
    }  # fmt: skip
    empty = pa.table({"feature": pa.array([], pa.int32()), "window_id": pa.array([], pa.int64()),
                      "position": pa.array([], pa.int16()), "value": pa.array([], pa.float32())})  # fmt: skip
    store.add_index_batch(SAE, CORPUS, windows, empty, n_windows, n_windows * CONTEXT)
    store.finalize_index(SAE)


def previous_loop(store: Store, chunk: int = 512) -> int:
    """The embedding loop before issue 37: per chunk of 512 windows, read its crops, encode them, write them."""
    key = embedding_key(DEFAULT_EMBEDDING_MODEL, EMBED_CROP)
    missing = store.windows_missing_embeddings(CORPUS, key)
    for start in range(0, len(missing), chunk):
        part = missing[start : start + chunk]
        store.add_window_embeddings(
            CORPUS, key, part, embed_texts(crop_texts(store, CORPUS, part, EMBED_CROP))
        )
    store.window_embeddings(CORPUS, key)  # the memory-mapped copy, as the loop's caller wrote it
    return len(missing)


def main() -> None:
    """Build the store, run the repeats, print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--windows", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp) / "pristine.duckdb"
        build_store(pristine, args.windows)
        store = Store.open(pristine, read_only=True)
        texts = crop_texts(store, CORPUS, np.arange(args.windows), EMBED_CROP)
        del store
        encoder = load_embedding_model(DEFAULT_EMBEDDING_MODEL)
        encoder.encode(texts[:64], batch_size=args.batch_size)  # warm-up (first-call allocations)
        n_tokens = sum(len(ids) for ids in encoder.tokenizer(texts)["input_ids"])
        best: dict[str, float] = {}
        ratios: dict[str, float] = {}
        for repeat in range(args.repeats):
            seconds: dict[str, float] = {}
            started = time.perf_counter()
            encoder.encode(
                texts, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True
            )
            seconds["plain SentenceTransformer.encode (baseline)"] = time.perf_counter() - started
            for name, run in (
                ("ensure_window_embeddings", lambda s: ensure_window_embeddings(s, SAE)),
                ("previous loop (512-window chunks)", previous_loop),
            ):
                copy = Path(tmp) / f"r{repeat}-{len(seconds)}.duckdb"
                shutil.copyfile(pristine, copy)
                fresh = Store.open(copy)
                started = time.perf_counter()
                assert run(fresh) == args.windows
                seconds[name] = time.perf_counter() - started
            base = seconds["plain SentenceTransformer.encode (baseline)"]
            for name, s in seconds.items():
                if s < best.get(name, float("inf")):
                    best[name], ratios[name] = s, s / base
    print(
        f"all-MiniLM-L6-v2, {args.windows} windows (32-token crops, {n_tokens:,} MiniLM tokens), batch "
        f"{args.batch_size}, torch threads {torch.get_num_threads()}, best of {args.repeats}"
    )
    print("| path | seconds | windows/s | ratio vs plain encode |")
    print("|---|---|---|---|")
    for name, s in best.items():
        print(f"| {name} | {s:.2f} | {args.windows / s:,.0f} | {ratios[name]:.2f} |")


if __name__ == "__main__":
    main()
