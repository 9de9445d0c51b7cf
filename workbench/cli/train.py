"""`workbench train`: train an SAE (streaming from model + corpus, or from an activation cache), save it in SAELens
format, compute held-out metrics and print them.

    workbench train --tokens 2000000 --out runs/topk-8x
    workbench train --cache runs/cache/l3 --architecture batchtopk --k 32 --out runs/btk
"""

from __future__ import annotations

from pathlib import Path

import typer

from sae_workbench import defaults
from sae_workbench.cli import options


def train(
    model: options.Model = defaults.DEFAULT_MODEL,
    hook: options.Hook = defaults.DEFAULT_HOOK,
    corpus: options.Corpus = defaults.DEFAULT_CORPUS,
    cache: Path | None = typer.Option(
        None, help="Train from this activation cache folder instead of streaming."
    ),
    architecture: str = typer.Option(
        defaults.TRAIN_ARCHITECTURE, help="topk, batchtopk, matryoshka_batchtopk, jumprelu, standard, gated."
    ),
    d_sae: int | None = typer.Option(None, help="Number of features (default: expansion × d_model)."),
    expansion: int = typer.Option(
        defaults.TRAIN_EXPANSION, help="Features per model dimension when --d-sae is not given."
    ),
    k: int = typer.Option(defaults.TRAIN_K, help="Active features per token (TopK family)."),
    tokens: int = typer.Option(
        defaults.TRAIN_TOKENS, help="Training tokens (BOS/special positions excluded)."
    ),
    lr: float | None = typer.Option(None, help="Learning rate (default: per architecture)."),
    batch_size: int = typer.Option(defaults.TRAIN_BATCH_TOKENS, help="Tokens per optimiser step."),
    context_size: options.ContextSize = defaults.CONTEXT_SIZE,
    out: Path = typer.Option(defaults.SAE_DIR, help="Output folder (SAELens format + logs + metrics.json)."),
    seed: options.Seed = defaults.DEFAULT_SEED,
    resume: bool = typer.Option(
        False, help="Continue an interrupted run in --out from its latest checkpoint."
    ),
    checkpoint_every: int = typer.Option(
        defaults.TRAIN_CHECKPOINT_EVERY, help="Steps between checkpoints (0: none)."
    ),
    nan_policy: str = typer.Option(
        "stop", help="NaN/inf activations: 'stop' (error naming the shard) or 'skip'."
    ),
    device: options.Device = defaults.DEFAULT_DEVICE,
    sparse_step: bool | None = typer.Option(
        None,
        "--sparse-step/--dense-step",
        help="TopK: multiply only the selected features in each step (same gradients as sae-lens's dense step; "
        "default: sparse on the CPU, dense elsewhere).",
    ),
    wandb: bool = typer.Option(
        False, help="Also log to Weights & Biases (a local JSONL log is always written)."
    ),
    eval_windows: int = typer.Option(
        defaults.HELD_OUT_WINDOWS, help="Held-out windows for metrics (after the training data)."
    ),
    ce_windows: int = typer.Option(
        defaults.CE_WINDOWS,
        help="Of those, windows for CE-loss / KL recovered (3 full model passes each; 0: skip).",
    ),
) -> None:
    """Train an SAE with sae-lens, save it in SAELens format, and print held-out metrics (with their directions)."""
    from sae_workbench.corpus import default_bos_id, resolve_corpus
    from sae_workbench.models import hook_width
    from sae_workbench.sae.data import cache_source, first_held_out_window, streaming_source
    from sae_workbench.sae.io import load_sae
    from sae_workbench.sae.metrics import METRICS, held_out_metrics, write_metrics
    from sae_workbench.sae.train import TrainConfig, train_sae

    lm = options.load_subject(model, [hook], context_size, device)
    assert lm.tokenizer is not None
    the_corpus = resolve_corpus(corpus)
    bos_id = default_bos_id(lm.tokenizer)
    cfg = TrainConfig(
        architecture=architecture,
        d_sae=d_sae,
        expansion=expansion,
        k=k,
        n_tokens=tokens,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        checkpoint_every=checkpoint_every,
        nan_policy="skip" if nan_policy == "skip" else "stop",
        wandb=wandb,
        sparse_step=sparse_step,
        shuffle_chunks=1 if cache else TrainConfig.shuffle_chunks,  # a cache chunk is a whole shard
    )
    if cache is not None:
        source = cache_source(cache, hook)
    else:
        source = streaming_source(lm, hook, the_corpus, context_size=context_size, bos_id=bos_id)
    meta = {"context_size": context_size, "prepend_bos": False, "bos_id": bos_id, "dataset_path": corpus}
    result = train_sae(
        source,
        hook_width(lm, hook),
        cfg,
        out,
        model_name=model,
        hook=hook,
        metadata=meta,
        resume=resume,
        device=device,
    )
    typer.echo(
        f"trained {result.n_tokens:,} tokens in {result.seconds:.0f}s ({result.tokens_per_s:,.0f} tok/s); "
        f"sae_id {result.sae_id}"
    )

    first_window = first_held_out_window(tokens, context_size, cfg.shuffle_chunks, cache=cache)
    metrics = held_out_metrics(
        load_sae(out, device=device),
        lm,
        hook,
        the_corpus,
        context_size=context_size,
        bos_id=bos_id,
        first_window=first_window,
        n_windows=eval_windows,
        ce_windows=ce_windows,
        progress=True,
    )
    eval_cfg = {
        "model": model,
        "hook": hook,
        "corpus": corpus,
        "first_window": first_window,
        "windows": eval_windows,
        "ce_windows": min(ce_windows, eval_windows),
        "context_size": context_size,
        "bos_id": bos_id,
        "mask": "BOS + special tokens excluded",
        "sae_id": result.sae_id,
    }
    path = write_metrics(out, metrics, eval_cfg)
    for name, value in metrics.items():
        if name in METRICS and isinstance(value, int | float):
            direction = {True: "↑ higher is better", False: "↓ lower is better", None: ""}[
                METRICS[name].higher_is_better
            ]
            typer.echo(f"  {name:<20} {value:>12.4f}  {direction}")
    typer.echo(f"metrics: {path}")
