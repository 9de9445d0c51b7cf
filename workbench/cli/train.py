"""`workbench train`: train an SAE (streaming from model + corpus, or from an activation cache), save it in SAELens
format, compute held-out metrics and print them.

    workbench train --tokens 2000000 --out runs/topk-8x
    workbench train --cache runs/cache/l3 --architecture batchtopk --k 32 --out runs/btk
    workbench train --sweep "k=16,32 d_sae=2304,4608" --backend ray --out runs/sweep   # 4 SAEs, one per Ray task

A sweep trains one SAE per point of the grid, each in its own folder under --out (e.g. runs/sweep/k=16-d_sae=2304),
each resumable: rerunning the command skips finished runs and continues the others from their checkpoints. With
`--backend ray` each run is a Ray task (one GPU each with --device cuda) on a local or existing cluster.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sae_workbench import defaults
from sae_workbench.cli import loaders, options


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
    sweep: str | None = typer.Option(
        None,
        help='Train one SAE per grid point, e.g. "k=16,32 d_sae=2304,4608" (keys: architecture, d_sae, expansion, '
        "k, lr, tokens, batch_size, seed); runs go to --out/<settings>, each resumable.",
    ),
    backend: options.Backend = defaults.DEFAULT_BACKEND,
    ray_address: options.RayAddress = None,
    progress: options.Progress = True,
) -> None:
    """Train an SAE with sae-lens, save it in SAELens format, and print held-out metrics (with their directions)."""
    from sae_workbench.raycluster import RayConfig, check_backend
    from sae_workbench.sae.metrics import METRICS
    from sae_workbench.sae.sweep import parse_sweep, run_sweep, sweep_jobs
    from sae_workbench.sae.train import TrainConfig, TrainJob, TrainOutcome, train_job

    check_backend(backend)
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
    step = loaders.step_lines(progress)
    # Loaded and checked once, before any run starts; local runs train on this model, a Ray task loads its own.
    step(
        f"loading model {model}"
        + (" (to check the hook before the Ray tasks start)" if backend == "ray" else "")
    )
    subject = loaders.load_subject(model, [hook], context_size, device)
    job = TrainJob(
        model=model, hook=hook, corpus=corpus, out=str(out), cache=str(cache) if cache else None,
        context_size=context_size, device=device, eval_windows=eval_windows, ce_windows=ce_windows,
        config=cfg.to_dict(),
    )  # fmt: skip

    def show(outcome: TrainOutcome) -> None:
        typer.echo(
            f"{outcome.status} {outcome.out}: {outcome.n_tokens:,} tokens in {outcome.seconds:.0f}s; "
            f"sae_id {outcome.sae_id}"
        )
        for name, value in outcome.metrics.items():
            if name in METRICS and isinstance(value, int | float):
                direction = {True: "↑ higher is better", False: "↓ lower is better", None: ""}[
                    METRICS[name].higher_is_better
                ]
                typer.echo(f"  {name:<20} {value:>12.4f}  {direction}")

    if sweep is None:
        if backend == "ray":
            run_sweep([job], "ray", RayConfig(address=ray_address), on_done=show)
        else:
            show(train_job(job, resume=resume, progress=progress, model=subject, step=step))
        typer.echo(f"metrics: {Path(out) / 'metrics.json'}")
        return
    jobs = sweep_jobs(job, parse_sweep(sweep))
    typer.echo(f"sweep: {len(jobs)} runs under {out} on the {backend} backend")
    outcomes = run_sweep(
        jobs,
        backend,
        RayConfig(address=ray_address),
        on_done=show,
        model=subject,
        step=step,
        progress=progress,
    )
    typer.echo(f"sweep done: {sum(o.status != 'done' for o in outcomes)} trained or resumed, "
               f"{sum(o.status == 'done' for o in outcomes)} already finished")  # fmt: skip
