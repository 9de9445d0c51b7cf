"""SAE quality per training setting: train from an activation cache, measure EV / L0 / dead fraction on held-out shards.

    .venv/bin/workbench cache --tokens 600000 --out /tmp/sae_quality_cache
    .venv/bin/python -m bench.sae_quality --cache /tmp/sae_quality_cache --tokens 300000 --settings old,default

The last `--eval-shards` shards of the cache are held out (never trained on); every setting trains on the shards
before them. Prints a Markdown table with each setting's explained variance relative to the first setting's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from sae_workbench.activation_cache.reader import ActivationCache
from sae_workbench.sae.data import Chunk, ChunkSource, cache_source
from sae_workbench.sae.io import load_sae
from sae_workbench.sae.metrics import evaluate_on_activations
from sae_workbench.sae.train import TrainConfig, train_sae

# name -> TrainConfig overrides. "old" is the configuration before the quality work (batch 4096, raw inputs,
# b_dec at zero, no warm-up); "default" is TrainConfig() as shipped.
SETTINGS: dict[str, dict[str, Any]] = {
    "old": {
        "batch_size": 4096,
        "init_b_dec": "zeros",
        "warmup_steps": 0,
        "extra": {"normalize_activations": "none"},
    },
    "old_b1024": {"init_b_dec": "zeros", "warmup_steps": 0, "extra": {"normalize_activations": "none"}},
    "default": {},
    "lr1e-3": {"lr": 1e-3},
    "lr2e-3": {"lr": 2e-3},
    "lr4e-3": {"lr": 4e-3},
    "b512": {"batch_size": 512},
    "aux_1/32": {"extra": {"aux_loss_coefficient": 1 / 32}},
    "dead50k": {"dead_feature_tokens": 50_000},
}


def _train_part(folder: Path, hook: str, n_shards: int) -> ChunkSource:
    """The cache source restricted to its first `n_shards` shards."""
    full = cache_source(folder, hook)

    def chunks_from(start: int) -> Iterator[Chunk]:
        for i, chunk in enumerate(full(start), start=start):
            if i >= n_shards:
                return
            yield chunk

    return chunks_from


def _held_out(folder: Path, hook: str, first_shard: int) -> list[torch.Tensor]:
    """Masked-in activation rows of the held-out shards, in 4096-row pieces."""
    rows = torch.cat([c.acts_ND for c in cache_source(folder, hook)(first_shard)])
    return list(rows.split(4096))


def main() -> None:
    """Train each setting and print the table."""
    parser = argparse.ArgumentParser(description="SAE quality per training setting")
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--hook", default="blocks.3.hook_resid_post")
    parser.add_argument("--tokens", type=int, default=300_000, help="training tokens per setting")
    parser.add_argument("--settings", default="old,default", help=f"comma-separated, of {','.join(SETTINGS)}")
    parser.add_argument("--expansion", type=int, default=8)
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--eval-shards", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    n_shards = ActivationCache(args.cache).n_shards
    train_shards = n_shards - args.eval_shards
    held_out = _held_out(args.cache, args.hook, train_shards)
    d_in = held_out[0].shape[1]
    n_eval = sum(len(x) for x in held_out)
    print(f"held out: {n_eval:,} tokens (shards {train_shards}–{n_shards - 1}); d_in {d_in}")
    rows = []
    for name in args.settings.split(","):
        overrides = dict(SETTINGS[name])
        cfg = TrainConfig(
            **{
                "expansion": args.expansion,
                "k": args.k,
                "n_tokens": args.tokens,
                "shuffle_chunks": 1,
                "seed": args.seed,
                "log_every": 50,
                **overrides,
            }
        )
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            model = ActivationCache(args.cache).manifest.model
            source = _train_part(args.cache, args.hook, train_shards)
            result = train_sae(source, d_in, cfg, Path(tmp), model_name=model, hook=args.hook)
            seconds = time.perf_counter() - started
            metrics = evaluate_on_activations(load_sae(tmp), held_out)
        rows.append((name, cfg, result.n_steps, seconds, metrics))
        print(
            f"{name}: EV {metrics['explained_variance']:.4f} L0 {metrics['l0']:.1f} dead {metrics['dead_fraction']:.3f}"
        )
    base_ev = rows[0][4]["explained_variance"]
    print(
        f"\nTopK {args.expansion}× (d_sae {args.expansion * d_in}), k={args.k}, {args.tokens:,} training tokens, "
        f"{n_eval:,} held-out tokens\n"
    )
    print(
        "| setting | batch | lr | steps | train s | held-out EV | ΔEV vs first | L0 | dead fraction | dense fraction |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, cfg, steps, seconds, m in rows:
        lr = cfg.lr if cfg.lr is not None else "default"
        print(
            f"| {name} | {cfg.batch_size} | {lr} | {steps} | {seconds:.0f} | {m['explained_variance']:.4f} | "
            f"{m['explained_variance'] - base_ev:+.4f} | {m['l0']:.1f} | {m['dead_fraction']:.3f} | "
            f"{m['dense_fraction']:.3f} |"
        )


if __name__ == "__main__":
    main()
