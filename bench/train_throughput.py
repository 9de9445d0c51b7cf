"""End-to-end SAE training throughput: `workbench train` streaming vs sae-lens's LanguageModelSAETrainingRunner
(same model, hook, SAE config, token count, in one run), and cache-fed vs streaming training.

    .venv/bin/python -m bench.train_throughput --tokens 131072

Each contestant trains a TopK 576→4608 (k=32) SAE on SmolLM2-135M's blocks.3.hook_resid_post from the default corpus
(128-token windows, 4096-token batches). Times include model forward passes (streaming) or cache reads (cache);
the cache is written before its timer starts (its own cost is reported separately).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch

HOOK = "blocks.3.hook_resid_post"


def _windows(model, corpus, n_tokens: int, context_size: int) -> list[list[int]]:
    """Token windows (BOS first) covering n_tokens, for the sae-lens runner's tokenized dataset."""
    from sae_workbench.corpus import iter_windows

    out: list[list[int]] = []
    for b in iter_windows(corpus, model.tokenizer, context_size, batch_size=256, decode=False):
        out.extend(b.tokens_BT.tolist())
        if len(out) * context_size >= n_tokens * 1.2:
            break
    return out


def run_sae_lens(
    model, windows: list[list[int]], n_tokens: int, context_size: int, batch: int, device: str = "cpu"
) -> float:
    """Seconds for sae-lens's LanguageModelSAETrainingRunner to train on n_tokens (model forward included)."""
    from datasets import Dataset
    from sae_lens import (
        LanguageModelSAERunnerConfig,
        LanguageModelSAETrainingRunner,
        LoggingConfig,
        TopKTrainingSAEConfig,
    )

    cfg = LanguageModelSAERunnerConfig(
        sae=TopKTrainingSAEConfig(d_in=576, d_sae=4608, k=32),
        model_name="smollm2-135m",
        hook_name=HOOK,
        dataset_path="local",
        is_dataset_tokenized=True,
        streaming=False,
        context_size=context_size,
        prepend_bos=False,  # windows already start with their BOS token
        training_tokens=n_tokens,
        train_batch_size_tokens=batch,
        n_batches_in_buffer=2
        * -(-batch // context_size),  # needs n × context_size ≥ batch (design.md pitfall)
        store_batch_size_prompts=32,
        lr=4e-4,
        lr_end=4e-4,
        logger=LoggingConfig(log_to_wandb=False),
        output_path=None,
        device=device,
        dtype="float32",
    )
    dataset = Dataset.from_dict({"input_ids": windows})
    started = time.perf_counter()
    LanguageModelSAETrainingRunner(cfg, override_dataset=dataset, override_model=model).run()  # type: ignore[arg-type]
    return time.perf_counter() - started


def main() -> None:
    """Run all contestants and print a table of tokens/s with ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=131_072)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--context-size", type=int, default=128)
    parser.add_argument("--device", default="cpu", help="torch device of every contestant (cpu, cuda)")
    parser.add_argument(
        "--json", default=None, help="also write the table as JSON here (for bench/run_all.py)"
    )
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(2)  # the reference machine's cores

    from sae_workbench.activation_cache.caching import cache_activations
    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.models import load_model
    from sae_workbench.sae.data import cache_source, streaming_source
    from sae_workbench.sae.train import TrainConfig, train_sae

    device = args.device
    model = load_model("smollm2-135m", device=device)
    corpus = resolve_corpus("default")
    n, ctx = args.tokens, args.context_size
    cfg = TrainConfig(
        architecture="topk", d_sae=4608, k=32, n_tokens=n, batch_size=args.batch, checkpoint_every=0
    )
    tmp = Path(tempfile.mkdtemp(prefix="bench-train-"))
    rows: list[tuple[str, float]] = []
    try:
        windows = _windows(model, corpus, n, ctx)
        rows.append(
            (
                "sae-lens LanguageModelSAETrainingRunner",
                n / run_sae_lens(model, windows, n, ctx, args.batch, device),
            )
        )

        started = time.perf_counter()
        train_sae(
            streaming_source(model, HOOK, corpus, context_size=ctx),
            576,
            cfg,
            tmp / "stream",
            model_name="smollm2-135m",
            hook=HOOK,
            progress=False,
            device=device,
        )
        rows.append(("workbench train (streaming)", n / (time.perf_counter() - started)))

        started = time.perf_counter()
        cache_activations(
            model, [HOOK], corpus, tmp / "cache", n_tokens=int(n * 1.1), context_size=ctx, progress=False
        )  # on the model's device
        cache_s = time.perf_counter() - started
        started = time.perf_counter()
        train_sae(
            cache_source(tmp / "cache", HOOK),
            576,
            TrainConfig(**{**cfg.to_dict(), "shuffle_chunks": 1}),
            tmp / "cached",
            model_name="smollm2-135m",
            hook=HOOK,
            progress=False,
            device=device,
        )
        rows.append(("workbench train (from cache)", n / (time.perf_counter() - started)))
        rows.append(("  (writing the cache, fp16)", n * 1.1 / cache_s))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    base = rows[0][1]
    print(
        f"\nSAE training, SmolLM2-135M {HOOK}, TopK 576→4608 k=32, {n:,} tokens, batch {args.batch}, {device}"
    )
    print(f"{'contestant':<44}{'tokens/s':>10}{'vs sae-lens':>13}")
    for name, rate in rows:
        print(f"{name:<44}{rate:>10,.0f}{rate / base:>12.2f}×")
    stream = dict(rows)["workbench train (streaming)"]
    print(f"cache-fed / streaming: {dict(rows)['workbench train (from cache)'] / stream:.2f}×")
    if args.json:
        from bench.results_md import Table, write_tables_json

        table = Table(
            ["contestant", "tokens/s", "vs sae-lens"], [[k, f"{r:,.0f}", f"{r / base:.2f}×"] for k, r in rows]
        )
        cached = dict(rows)["workbench train (from cache)"] / stream
        context = f"SmolLM2-135M {HOOK}, TopK 576→4608 k=32, {n:,} tokens, batch {args.batch}, {device}"
        write_tables_json(args.json, [table], [context, f"cache-fed / streaming: {cached:.2f}×"])


if __name__ == "__main__":
    main()
