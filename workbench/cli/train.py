"""`workbench train`: train an SAE (streaming from model + corpus, or from an activation cache), save it in SAELens
format, compute held-out metrics and print them.

    workbench train --tokens 2000000 --out runs/topk-8x
    workbench train --cache runs/cache/l3 --architecture batchtopk --k 32 --out runs/btk
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

log = logging.getLogger(__name__)

HELD_OUT_WINDOWS = 64
# CE/KL recovered needs three full forwards per window (clean, SAE-spliced, zero-ablated); 16 windows (~2k
# predictions) keep it to about a minute on 2 CPU cores for SmolLM2.
CE_WINDOWS = 16
EVAL_BATCH_WINDOWS = 8


def train(
    model: str = typer.Option(
        "smollm2-135m", help="Model: smollm2-135m, tiny, a local HF folder or a TL name."
    ),
    hook: str = typer.Option("blocks.3.hook_resid_post", help="Hook whose activations the SAE reconstructs."),
    corpus: str = typer.Option(
        "default", help="Corpus for streaming and held-out metrics ('default', a file, hf:…)."
    ),
    cache: Path | None = typer.Option(
        None, help="Train from this activation cache folder instead of streaming."
    ),
    architecture: str = typer.Option(
        "topk", help="topk, batchtopk, matryoshka_batchtopk, jumprelu, standard, gated."
    ),
    d_sae: int | None = typer.Option(None, help="Number of features (default: expansion × d_model)."),
    expansion: int = typer.Option(8, help="Features per model dimension when --d-sae is not given."),
    k: int = typer.Option(32, help="Active features per token (TopK family)."),
    tokens: int = typer.Option(2_000_000, help="Training tokens (BOS/special positions excluded)."),
    lr: float | None = typer.Option(None, help="Learning rate (default: per architecture)."),
    batch_size: int = typer.Option(1024, help="Tokens per optimiser step."),
    context_size: int = typer.Option(128, help="Window size in tokens (streaming)."),
    out: Path = typer.Option(Path("runs/sae"), help="Output folder (SAELens format + logs + metrics.json)."),
    seed: int = typer.Option(0, help="Seed of initialisation and shuffling."),
    resume: bool = typer.Option(
        False, help="Continue an interrupted run in --out from its latest checkpoint."
    ),
    checkpoint_every: int = typer.Option(100, help="Steps between checkpoints (0: none)."),
    nan_policy: str = typer.Option(
        "stop", help="NaN/inf activations: 'stop' (error naming the shard) or 'skip'."
    ),
    device: str = typer.Option(
        "cpu", help="Torch device for the model forward and SAE training (cpu, cuda, cuda:1, mps)."
    ),
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
        HELD_OUT_WINDOWS, help="Held-out windows for metrics (after the training data)."
    ),
    ce_windows: int = typer.Option(
        CE_WINDOWS,
        help="Of those, windows for CE-loss / KL recovered (3 full model passes each; 0: skip).",
    ),
) -> None:
    """Train an SAE with sae-lens, save it in SAELens format, and print held-out metrics (with their directions)."""
    import torch

    from sae_workbench.corpus import default_bos_id, iter_windows, resolve_corpus
    from sae_workbench.models import hook_width, load_model, validate_hooks
    from sae_workbench.sae.data import cache_source, streaming_source
    from sae_workbench.sae.metrics import METRICS, evaluate_sae, write_metrics
    from sae_workbench.sae.train import TrainConfig, train_sae

    lm = load_model(model, device=device)
    validate_hooks(lm, [hook])
    assert lm.tokenizer is not None
    the_corpus = resolve_corpus(corpus)
    bos_id = default_bos_id(lm.tokenizer)
    d_in = hook_width(lm, hook)
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
        shuffle_chunks=1 if cache else 16,
    )
    windows_per_chunk = 32
    if cache is not None:
        source = cache_source(cache, hook)
        from sae_workbench.activations import ActivationCache

        start_window = ActivationCache(cache).manifest.n_windows
    else:
        source = streaming_source(
            lm,
            hook,
            the_corpus,
            context_size=context_size,
            windows_per_chunk=windows_per_chunk,
            bos_id=bos_id,
        )
        start_window = 0
    meta = {"context_size": context_size, "prepend_bos": False, "bos_id": bos_id, "dataset_path": corpus}
    result = train_sae(
        source, d_in, cfg, out, model_name=model, hook=hook, metadata=meta, resume=resume, device=device
    )
    typer.echo(
        f"trained {result.n_tokens:,} tokens in {result.seconds:.0f}s ({result.tokens_per_s:,.0f} tok/s); sae_id {result.sae_id}"
    )

    # Held-out slice: windows after everything streaming training could have used.
    # 5% margin for masked special tokens, plus a shuffle block of margin (the batcher stops within a chunk of the
    # budget; the margin is kept so held-out slices stay the same as before).
    if cache is None:
        start_window = int(tokens / (context_size - 1) * 1.05) + windows_per_chunk * cfg.shuffle_chunks
    from sae_workbench.sae.io import load_sae

    sae = load_sae(out, device=device)
    batches = (
        (torch.from_numpy(b.tokens_BT).long(), torch.from_numpy(b.mask_BT))
        for b in iter_windows(
            the_corpus,
            lm.tokenizer,
            context_size,
            bos_id=bos_id,
            batch_size=EVAL_BATCH_WINDOWS,
            start_window=start_window,
            n_tokens=(start_window + eval_windows) * context_size,
            decode=False,
        )
    )
    metrics = evaluate_sae(
        sae,
        lm,
        hook,
        batches,
        ce_windows=min(ce_windows, eval_windows),
        batch_windows=EVAL_BATCH_WINDOWS,
        total_windows=eval_windows,
        progress=True,
    )
    eval_cfg = {
        "model": model,
        "hook": hook,
        "corpus": corpus,
        "first_window": start_window,
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
