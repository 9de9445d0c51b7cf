"""Throughput of `workbench cache` vs the bare forward pass to the same layer, on the same batches, in one run.

    .venv/bin/python -m bench.cache_throughput                 # SmolLM2-135M, blocks.3.hook_resid_post, 6 rounds
    .venv/bin/python -m bench.cache_throughput --tokens-per-round 16384 --rounds 4 --dtype float16 --dtype float32

Each round runs the bare forward (`model(tokens, stop_at_layer=4)` on pre-tokenized windows) and then a full
`cache_activations` call (tokenizing, forward, fp16/fp32 conversion, masks, shard writing, checksums, manifest) over
the same first N tokens of the default corpus into a fresh folder; the order alternates between rounds so drift on
this shared machine hits both sides. The cache side is timed as the wall time of the whole call. Target (issue 2):
caching ≥ 90% of the bare forward throughput.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from sae_workbench.activation_cache.caching import cache_activations
from sae_workbench.corpus import default_bos_id, iter_windows, resolve_corpus
from sae_workbench.models import DEFAULT_HOOK, DEFAULT_MODEL, load_model, stop_layer


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--hook", default=DEFAULT_HOOK)
    parser.add_argument("--tokens-per-round", type=int, default=65_536)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--context-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--shard-tokens", type=int, default=16_384)
    parser.add_argument("--dtype", action="append", choices=["float16", "float32"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--json", default=None, help="also write the table as JSON here (for bench/run_all.py)"
    )
    args = parser.parse_args()
    dtypes: list[str] = args.dtype or ["float16"]

    model = load_model(args.model, device=args.device)
    assert model.tokenizer is not None
    corpus = resolve_corpus("default")
    stop = stop_layer([args.hook])
    batches = [
        torch.from_numpy(b.tokens_BT).long().to(args.device)
        for b in iter_windows(
            corpus,
            model.tokenizer,
            args.context_size,
            bos_id=default_bos_id(model.tokenizer),
            n_tokens=args.tokens_per_round,
            batch_size=args.batch_size,
            decode=False,
        )
    ]
    n_tokens = sum(b.numel() for b in batches)

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    def bare() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for tokens_BT in batches:
                model(tokens_BT, stop_at_layer=stop)
        sync()
        return time.perf_counter() - started

    def cached(dtype: str, root: Path, r: int) -> float:
        started = time.perf_counter()
        stats = cache_activations(
            model,
            [args.hook],
            corpus,
            root / f"{dtype}-{r}",
            n_tokens=n_tokens,
            context_size=args.context_size,
            batch_size=args.batch_size,
            dtype=dtype,
            shard_tokens=args.shard_tokens,
            progress=False,
        )
        seconds = time.perf_counter() - started
        assert stats.new_tokens == n_tokens, (stats.new_tokens, n_tokens)
        return seconds

    bare()  # warm-up (allocator, kernels)
    steps = ["bare forward", *[f"cache {d}" for d in dtypes]]
    times: dict[str, list[float]] = {step: [] for step in steps}
    with tempfile.TemporaryDirectory(prefix="cache-bench-") as tmp:
        for r in range(args.rounds):
            for step in steps if r % 2 == 0 else reversed(steps):
                times[step].append(
                    bare() if step == "bare forward" else cached(step.split()[1], Path(tmp), r)
                )

    total = n_tokens * args.rounds
    base = total / sum(times["bare forward"])
    context = (
        f"model {args.model}, hook {args.hook} (stop_at_layer={stop}), device {args.device}, "
        f"{torch.get_num_threads()} threads, {args.rounds} rounds × {n_tokens:,} tokens, batch {args.batch_size}×"
        f"{args.context_size}, shards of {args.shard_tokens:,} tokens"
    )
    columns = ["mode", "tokens", "seconds", "tok/s", "vs bare", "median round ratio"]
    rows: list[list[str]] = []
    for step, seconds in times.items():
        rate = total / sum(seconds)
        # The per-round ratio pairs runs made seconds apart, so it is less exposed to load drift than the totals.
        ratios = sorted(b / x for b, x in zip(times["bare forward"], seconds, strict=True))
        mid = len(ratios) // 2
        median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
        rows.append(
            [step, f"{total:,}", f"{sum(seconds):.2f}", f"{rate:,.0f}", f"{rate / base:.1%}", f"{median:.1%}"]
        )
    print(context)
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        from bench.results_md import Table, write_tables_json

        write_tables_json(args.json, [Table(columns, rows)], [context])


if __name__ == "__main__":
    main()
