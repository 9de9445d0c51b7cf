"""Train an SAE with sae-lens's SAETrainer on our own activation data (streaming or cache), with checkpoints,
resume after a kill, NaN/inf handling, a progress bar and a local JSONL log.

    from sae_workbench.sae.data import streaming_source
    source = streaming_source(model, "blocks.3.hook_resid_post", resolve_corpus("default"))
    result = train_sae(source, d_in=576, cfg=TrainConfig(architecture="topk", n_tokens=2_000_000), out=Path("runs/t"),
                       model_name="smollm2-135m", hook="blocks.3.hook_resid_post")

The output folder holds the SAE in SAELens format (cfg.json, sae_weights.safetensors, sparsity.safetensors),
train_config.json, train_log.jsonl, checkpoints/ (the latest complete one; `resume=True` continues from it) and, once
finished, train_result.json: the run's summary and the SAE's id, which `sae.io.sae_id_of` reads back instead of
rehashing the weights.

One run, as `workbench train` does it and each point of a sweep (`sae.sweep`), is `train_job(TrainJob(...))`: load
the model, build the activation source, `train_sae`, then the held-out metrics. It is resumable by construction: it
skips a run whose folder already holds its finished SAE and metrics, continues one from its latest sae-lens
checkpoint, and starts the rest.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
from sae_lens import LoggingConfig, SAETrainer, TrainingSAE
from sae_lens.config import SAETrainerConfig
from sae_lens.registry import SAE_TRAINING_CLASS_REGISTRY
from sae_lens.saes.sae import TrainStepOutput
from sae_lens.saes.topk_sae import TopKTrainingSAEConfig
from tqdm.auto import tqdm

from sae_workbench import defaults, paths
from sae_workbench.errors import WorkbenchError
from sae_workbench.faults import fail_point
from sae_workbench.sae.data import ChunkSource, NanPolicy, ShuffledBatches
from sae_workbench.sae.io import (
    TRAIN_RESULT_FILENAME,
    UnknownArchitectureError,
    compute_sae_id,
    id_record,
    require_model_and_hook,
    save_sae,
)
from sae_workbench.sae.sparse_step import SparseTopKTrainingSAE

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

log = logging.getLogger(__name__)

ARCHITECTURES = ("topk", "batchtopk", "matryoshka_batchtopk", "jumprelu", "standard", "gated")
LATEST = "latest.json"


class ResumeError(WorkbenchError):
    """A run cannot resume: no checkpoint, or the checkpoint was written with another configuration."""


@dataclass(frozen=True)
class TrainConfig:
    """What to train and how. Unset fields (None) take the architecture's default from `ARCH_DEFAULTS`."""

    architecture: str = defaults.TRAIN_ARCHITECTURE
    """One of topk, batchtopk, matryoshka_batchtopk, jumprelu, standard, gated."""
    d_sae: int | None = None
    """Number of features; None → expansion × d_in."""
    expansion: int = defaults.TRAIN_EXPANSION
    """Features per input dimension when d_sae is None."""
    k: int = defaults.TRAIN_K
    """Active features per token (topk) or on average per token (batchtopk, matryoshka)."""
    n_tokens: int = defaults.TRAIN_TOKENS
    """Training tokens (masked positions never count)."""
    batch_size: int = defaults.TRAIN_BATCH_TOKENS
    """Tokens per optimiser step (small enough that a demo-sized run still takes hundreds of steps)."""
    lr: float | None = None
    """Adam learning rate; warms up linearly over `warmup_steps`, decays linearly to 0 over the last 20% of steps."""
    warmup_steps: int | None = None
    """Linear learning-rate warm-up; None → 5% of the steps (at most 1000)."""
    init_b_dec: Literal["mean", "zeros"] = "mean"
    """Decoder bias at the start: "mean" of the first batches' activations (the SAE starts at EV 0), or "zeros"."""
    sparsity_coefficient: float | None = None
    """L1 coefficient (standard, gated) or L0 coefficient (jumprelu); unused by the TopK family."""
    seed: int = defaults.DEFAULT_SEED
    """Seeds the SAE initialisation and the data shuffling."""
    dead_feature_tokens: int = 200_000
    """A feature counts as dead (and gets the aux loss) after this many tokens without firing."""
    shuffle_chunks: int = 16
    """Source chunks shuffled together (streaming: 32 windows each; cache: one shard each)."""
    checkpoint_every: int = 0
    """Save a resumable checkpoint every this many steps (0: only at the end)."""
    nan_policy: NanPolicy = "stop"
    """What to do with NaN/inf activation rows: stop with an error naming the shard/windows, or skip them."""
    calibration_batches: int = 8
    """BatchTopK/Matryoshka: the saved threshold is set from the last this-many training batches so the reloaded
    (JumpReLU) SAE keeps k features per token on average (0: keep sae-lens's running estimate)."""
    log_every: int = 10
    """Steps between JSONL log lines and progress-bar updates."""
    wandb: bool = False
    """Also log to Weights & Biases (off by default; the local JSONL log is always written)."""
    sparse_step: bool | None = None
    """TopK: train with the sparse step (sae.sparse_step; same loss and gradients as sae-lens's dense step, only the
    selected features multiplied). None: on where it is measured faster (the CPU), off on other devices."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra sae-lens training-config fields (e.g. {"aux_loss_coefficient": 0.5}), applied last."""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for train_config.json."""
        return dataclasses.asdict(self)


# Per-architecture defaults. TopK family: aux loss on (Gao et al. 2024, "Scaling and evaluating sparse autoencoders");
# inputs scaled to E‖x‖=√d_in so one learning rate fits any model's residual norm, b_dec started at the data mean,
# batch 1024 and lr TOPK_LR = 2e-3 — measured on SmolLM2 layer 3 (bench/NOTES.md "SAE quality defaults": 300k
# tokens, held-out EV 0.918 vs 0.880 at 4e-4, dead 8% vs 43%). Gao et al.'s 2e-4/√(d_sae/2¹⁴) ≈ 4e-4 for 4608
# features suits runs of many thousand steps; a demo run has a few hundred. BatchTopK/Matryoshka share it (not
# measured separately). BatchTopK: threshold EMA lr 0.1 (design.md: 0.01 left L0≈350 after 100 steps), and the
# saved threshold is recalibrated on the last batches at the end (`calibrate_threshold`). L1/JumpReLU family: inputs
# scaled to E‖x‖=√d_in, L1 λ=5, lr 5e-5 (Anthropic, "Circuits Updates – April 2024"); JumpReLU lr 7e-5
# (Rajamanoharan et al. 2024, "Jumping Ahead"); the L0 coefficient is a starting point to tune per model.
TOPK_LR = 2e-3
NORMALIZE = {"normalize_activations": "expected_average_only_in"}
ARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "topk": {"lr": TOPK_LR, **NORMALIZE},
    "batchtopk": {"lr": TOPK_LR, "topk_threshold_lr": 0.1, **NORMALIZE},
    "matryoshka_batchtopk": {"lr": TOPK_LR, "topk_threshold_lr": 0.1, **NORMALIZE},
    "standard": {"lr": 5e-5, "l1_coefficient": 5.0, "normalize_activations": "expected_average_only_in"},
    "gated": {"lr": 5e-5, "l1_coefficient": 5.0, "normalize_activations": "expected_average_only_in"},
    "jumprelu": {"lr": 7e-5, "l0_coefficient": 1.0, "normalize_activations": "expected_average_only_in"},
}


@dataclass(frozen=True)
class TrainResult:
    """What a finished training run produced."""

    folder: Path
    """SAELens folder of the trained SAE."""
    sae_id: str
    """Content hash of weights + model + hook (see sae.io.compute_sae_id)."""
    model_name: str
    """Model whose activations the SAE reads (part of the id)."""
    hook: str
    """Hook the SAE reads (part of the id)."""
    n_tokens: int
    """Tokens trained on."""
    n_steps: int
    """Optimiser steps."""
    seconds: float
    """Wall time of this process's share of the run (after a resume: since the resume)."""
    tokens_per_s: float
    """Training throughput of this process, including data production (model forward or cache reads)."""
    final: dict[str, float]
    """Last logged training stats (loss, mse, l0, explained_variance, dead_fraction)."""
    skipped_rows: int
    """Activation rows dropped for NaN/inf (nan_policy='skip')."""


def build_training_sae(
    cfg: TrainConfig, d_in: int, metadata: dict[str, Any] | None = None, device: str = "cpu"
) -> TrainingSAE[Any]:
    """A freshly initialised sae-lens training SAE for `cfg` (seeded by cfg.seed) that will train on `device`."""
    if cfg.architecture not in ARCHITECTURES:
        raise UnknownArchitectureError(
            f"unknown architecture {cfg.architecture!r}; choose one of {', '.join(ARCHITECTURES)}."
        )
    sae_cls, cfg_cls = SAE_TRAINING_CLASS_REGISTRY[cfg.architecture]
    d_sae = cfg.d_sae or cfg.expansion * d_in
    fields = {f.name for f in dataclasses.fields(cfg_cls)}
    kwargs: dict[str, Any] = {"d_in": d_in, "d_sae": d_sae}
    defaults = {k: v for k, v in ARCH_DEFAULTS[cfg.architecture].items() if k != "lr"}
    kwargs.update({k: v for k, v in defaults.items() if k in fields})
    if "k" in fields:
        kwargs["k"] = cfg.k
    if cfg.architecture == "matryoshka_batchtopk":
        # Nested prefixes of 1/8, 1/4, 1/2 and all features (Bussmann et al. 2025, "Learning Multi-Level Features
        # with Matryoshka Sparse Autoencoders", use a handful of doubling widths).
        kwargs["matryoshka_widths"] = [d_sae // 8, d_sae // 4, d_sae // 2, d_sae]
    if cfg.sparsity_coefficient is not None:
        key = "l0_coefficient" if cfg.architecture == "jumprelu" else "l1_coefficient"
        if key in fields:
            kwargs[key] = cfg.sparsity_coefficient
    kwargs.update({k: v for k, v in cfg.extra.items() if k in fields})
    config = cfg_cls(**kwargs)
    sparse = cfg.sparse_step if cfg.sparse_step is not None else torch.device(device).type == "cpu"
    torch.manual_seed(cfg.seed)
    if cfg.architecture == "topk" and sparse:
        sae: TrainingSAE[Any] = SparseTopKTrainingSAE(cast(TopKTrainingSAEConfig, config))
    else:
        sae = sae_cls(config)
    for key, value in (metadata or {}).items():
        sae.cfg.metadata[key] = value
    return sae


def _trainer_config(cfg: TrainConfig, out: Path, device: str = "cpu") -> SAETrainerConfig:
    """sae-lens trainer settings, with the pitfalls of design.md handled (explicit lr_end, no W&B unless asked)."""
    lr = cfg.lr if cfg.lr is not None else ARCH_DEFAULTS[cfg.architecture]["lr"]
    steps = cfg.n_tokens // cfg.batch_size
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else min(steps // 20, 1000)
    return SAETrainerConfig(
        total_training_samples=steps * cfg.batch_size,
        train_batch_size_samples=cfg.batch_size,
        lr=lr,
        lr_end=lr,  # sae-lens needs it set; the constant schedule + decay steps ends at 0 regardless
        lr_scheduler_name="constant",
        lr_warm_up_steps=warmup,
        lr_decay_steps=steps // 5,
        device=device,
        dead_feature_window=max(1, cfg.dead_feature_tokens // cfg.batch_size),
        feature_sampling_window=max(1, steps),
        checkpoint_path=str(out / "checkpoints"),
        logger=LoggingConfig(log_to_wandb=cfg.wandb, wandb_project="sae-workbench"),
        n_batches_for_norm_estimate=8,
    )


@torch.no_grad()
def _init_from_data(
    trainer: SAETrainer[Any, Any],
    sae: TrainingSAE[Any],
    batches: ShuffledBatches,
    cfg: TrainConfig,
    n_batches: int,
) -> None:
    """Input scaling factor and b_dec = data mean, from the first `n_batches` training batches, peeked at without
    consuming them (no separate pass over the source; a resumed run never needs them again: both live in the
    checkpoint)."""
    normalise = sae.cfg.normalize_activations == "expected_average_only_in"
    if not normalise and cfg.init_b_dec != "mean":
        return
    # Rows are finite: the batcher has already skipped NaN/inf rows or stopped on them (its nan_policy).
    rows = batches.peek(n_batches * cfg.batch_size).double()
    if rows.shape[0] == 0:
        return
    scale = 1.0
    if normalise:  # sae-lens's ActivationScaler.estimate_scaling_factor: √d_in / E‖x‖
        scale = rows.shape[1] ** 0.5 / float(rows.norm(dim=-1).mean())
        trainer.activation_scaler.scaling_factor = scale
    if cfg.init_b_dec == "mean":
        sae.b_dec.data.copy_((rows.mean(0) * scale).to(sae.b_dec.dtype))


@torch.no_grad()
def calibrate_threshold(sae: TrainingSAE[Any], batches: list[torch.Tensor], k: float) -> torch.Tensor:
    """The JumpReLU threshold at which `batches` keep exactly k features per row on average, i.e. the largest
    pre-activation BatchTopK would have dropped when run on all rows at once (same units as `topk_threshold`)."""
    n_keep = int(k * sum(b.shape[0] for b in batches))
    candidates = []
    for batch in batches:  # the global top n_keep+1 values are among each batch's own top n_keep+1
        _, hidden_pre = sae.encode_with_hidden_pre(batch.to(sae.W_dec.dtype))
        flat = hidden_pre.relu().flatten()
        candidates.append(flat.topk(min(n_keep + 1, flat.numel())).values)
    values = torch.cat(candidates)
    if values.numel() <= n_keep:
        return torch.tensor(0.0, dtype=torch.double)
    return values.topk(n_keep + 1).values[-1].double()


def _step_stats(out: TrainStepOutput) -> dict[str, float]:
    """Loss, L0 and explained variance of one training batch."""
    with torch.no_grad():
        x_ND = out.sae_in.float()
        err = (out.sae_out.float() - x_ND).pow(2).sum(-1).mean()
        var = (x_ND - x_ND.mean(0)).pow(2).sum(-1).mean()
        acts = out.feature_acts
        n_active = (acts.coalesce().values() != 0).sum() if acts.is_sparse else (acts != 0).sum()
        stats = {
            "loss": float(out.loss.item()),
            "l0": float(n_active.item()) / x_ND.shape[0],
            "explained_variance": float(1 - (err / var).item()),
        }
        stats.update({name: float(v.item()) for name, v in out.losses.items()})
    return stats


def _log_to_wandb(
    trainer: SAETrainer[Any, Any], step_out: TrainStepOutput, sparsity_log: dict[str, Any]
) -> None:
    """Send sae-lens's own step metrics (every `wandb_log_frequency` steps) and sparsity window to W&B."""
    import wandb

    step = trainer.n_training_steps
    if sparsity_log:
        wandb.log(sparsity_log, step=step)
    if (step + 1) % trainer.cfg.logger.wandb_log_frequency == 0:
        wandb.log(
            trainer.build_train_step_log_dict(output=step_out, n_training_samples=trainer.n_training_samples),
            step=step,
        )


def _save_checkpoint(trainer: SAETrainer[Any, Any], batches: ShuffledBatches, out: Path) -> Path:
    """Write a complete checkpoint, then point checkpoints/latest.json at it and drop older ones."""
    base = out / "checkpoints"
    name = f"step_{trainer.n_training_steps:08d}"
    tmp = base / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.save_checkpoint(checkpoint_name=tmp.name, base_path=base)
    (tmp / "data_state.json").write_text(json.dumps(batches.state()))
    final = base / name
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    paths.atomic_write_bytes(base / LATEST, json.dumps({"checkpoint": name}).encode())
    for old in base.glob("step_*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _check_resumable(out: Path, cfg: TrainConfig) -> Path:
    """The latest checkpoint folder of a run with the same config, or ResumeError saying what to do."""
    latest = out / "checkpoints" / LATEST
    if not latest.exists():
        raise ResumeError(f"{out} has no checkpoint to resume from; run without --resume to start fresh.")
    saved = json.loads((out / "train_config.json").read_text())
    if saved != json.loads(json.dumps(cfg.to_dict())):
        diff = {k: (saved.get(k), v) for k, v in cfg.to_dict().items() if saved.get(k) != v}
        raise ResumeError(f"{out} was trained with other settings {diff}; resume with the same options.")
    return out / "checkpoints" / json.loads(latest.read_text())["checkpoint"]


def train_sae(
    source: ChunkSource,
    d_in: int,
    cfg: TrainConfig,
    out: Path,
    *,
    model_name: str,
    hook: str,
    metadata: dict[str, Any] | None = None,
    resume: bool = False,
    progress: bool = True,
    device: str = "cpu",
) -> TrainResult:
    """Train an SAE on activations from `source`, checkpointing into `out`; save it there in SAELens format.

    The SAE is initialised on the CPU (the same weights for a seed on any device), then trained on `device`.
    `model_name` and `hook` name what the activations are (both go into the SAE's id and its cfg metadata).
    """
    require_model_and_hook(model_name, hook)  # before any work: both go into the id
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"model_name": model_name, "hook_name": hook, **(metadata or {})}
    sae = build_training_sae(cfg, d_in, meta, device)
    trainer_cfg = _trainer_config(cfg, out, device)
    resume_from = _check_resumable(out, cfg) if resume else None
    data_state = json.loads((resume_from / "data_state.json").read_text()) if resume_from else None
    # The weights in `out` are about to change: an earlier run's id record must not outlive them.
    (out / TRAIN_RESULT_FILENAME).unlink(missing_ok=True)
    batches = ShuffledBatches(
        source,
        cfg.batch_size,
        cfg.seed,
        cfg.shuffle_chunks,
        cfg.nan_policy,
        data_state,
        limit=trainer_cfg.total_training_samples,
    )
    trainer: SAETrainer[Any, Any] = SAETrainer(cfg=trainer_cfg, sae=sae, data_provider=batches)
    if resume_from is not None:
        sae.load_weights_from_checkpoint(resume_from)
        trainer.load_trainer_state(resume_from)
        log.info("resumed from %s at %d tokens", resume_from, trainer.n_training_samples)
    else:
        (out / "train_config.json").write_text(json.dumps(cfg.to_dict(), indent=1))
        (out / "train_log.jsonl").unlink(missing_ok=True)
        _init_from_data(trainer, sae, batches, cfg, trainer_cfg.n_batches_for_norm_estimate)
    if cfg.wandb:
        import wandb

        wandb.init(project="sae-workbench", config=cfg.to_dict(), resume="allow")

    total = trainer_cfg.total_training_samples
    start_samples, started = trainer.n_training_samples, time.perf_counter()
    stats: dict[str, float] = {}
    bar = tqdm(
        total=total, initial=start_samples, unit="tok", unit_scale=True, desc="train", disable=not progress
    )
    recent: deque[torch.Tensor] = deque(maxlen=cfg.calibration_batches)
    with open(out / "train_log.jsonl", "a") as log_file:
        while trainer.n_training_samples < total:
            sparsity_log = trainer.maybe_reset_sparsity()
            batch = next(batches)
            recent.append(batch)
            step_out = trainer.step(batch)
            if cfg.wandb:
                _log_to_wandb(trainer, step_out, sparsity_log)
            trainer.n_training_steps += 1
            step = trainer.n_training_steps
            if step % cfg.log_every == 0 or trainer.n_training_samples >= total:
                stats = _step_stats(step_out)
                stats["dead_fraction"] = float(trainer.dead_neurons.float().mean().item())
                elapsed = time.perf_counter() - started
                rate = (trainer.n_training_samples - start_samples) / max(elapsed, 1e-9)
                record = {"step": step, "tokens": trainer.n_training_samples, **stats, "tokens_per_s": rate}
                record["lr"] = trainer.optimizer.param_groups[0]["lr"]
                log_file.write(json.dumps(record) + "\n")
                log_file.flush()
                bar.set_postfix(
                    loss=f"{stats['loss']:.3g}",
                    L0=f"{stats['l0']:.1f}",
                    EV=f"{stats['explained_variance']:.3f}",
                )
            bar.update(cfg.batch_size)
            if (
                cfg.checkpoint_every
                and step % cfg.checkpoint_every == 0
                and trainer.n_training_samples < total
            ):
                _save_checkpoint(trainer, batches, out)
                fail_point("train.checkpoint")  # tests: a worker dying right after a checkpoint
    bar.close()
    seconds = time.perf_counter() - started
    if hasattr(sae, "topk_threshold") and recent:
        before = float(cast(torch.Tensor, sae.topk_threshold))
        scaled = [trainer.activation_scaler(b.to(sae.W_dec.device)) for b in recent]
        sae.topk_threshold = calibrate_threshold(sae, scaled, cfg.k)
        log.info(
            "BatchTopK threshold: running estimate %.4g → calibrated %.4g", before, float(sae.topk_threshold)
        )

    if trainer.activation_scaler.scaling_factor is not None:
        sae.fold_activation_norm_scaling_factor(trainer.activation_scaler.scaling_factor)
        trainer.activation_scaler.scaling_factor = None
    trainer.set_final_sae_metadata()
    # Saved weights and cfg.json say cpu whatever device trained them (load_sae picks the device).
    sae.to("cpu")
    save_sae(sae, out, trainer.log_feature_sparsity)
    sae_id = compute_sae_id(sae, model_name, hook)  # the one hash of this SAE; readers use the record below
    if cfg.wandb:
        import wandb

        wandb.finish()
    trained = trainer.n_training_samples - start_samples
    result = TrainResult(
        folder=out,
        sae_id=sae_id,
        model_name=model_name,
        hook=hook,
        n_tokens=trainer.n_training_samples,
        n_steps=trainer.n_training_steps,
        seconds=seconds,
        tokens_per_s=trained / max(seconds, 1e-9),
        final=stats,
        skipped_rows=batches.skipped_rows,
    )
    summary = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(result).items()}
    summary.update(id_record(sae, out, model_name, hook, sae_id))
    paths.atomic_write_bytes(out / TRAIN_RESULT_FILENAME, json.dumps(summary, indent=1).encode())
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return result


# ---------------------------------------------------------------------------------------------- one run

RunStatus = Literal["trained", "resumed", "done"]


class JobModelError(WorkbenchError):
    """A training job was handed a loaded model other than the one it names."""


@dataclass(frozen=True)
class TrainJob:
    """Everything one training run needs; every path absolute once `resolved()` (workers may start elsewhere)."""

    model: str = defaults.DEFAULT_MODEL
    hook: str = defaults.DEFAULT_HOOK
    corpus: str = defaults.DEFAULT_CORPUS
    out: str = str(defaults.SAE_DIR)
    cache: str | None = None
    context_size: int = defaults.CONTEXT_SIZE
    device: str = defaults.DEFAULT_DEVICE
    eval_windows: int = defaults.HELD_OUT_WINDOWS
    ce_windows: int = defaults.CE_WINDOWS
    config: dict[str, Any] = field(default_factory=lambda: dict[str, Any]())
    """TrainConfig fields (a plain dict so the job pickles and prints cleanly)."""

    def resolved(self) -> TrainJob:
        """The job with absolute paths."""
        cache = str(Path(self.cache).expanduser().resolve()) if self.cache else None
        return replace(self, out=str(Path(self.out).expanduser().resolve()), cache=cache)


@dataclass(frozen=True)
class TrainOutcome:
    """What one run left in its folder."""

    out: str
    status: RunStatus
    sae_id: str
    n_tokens: int
    seconds: float
    metrics: dict[str, Any]


def _finished(out: Path, config: dict[str, Any]) -> bool:
    """True when `out` holds this configuration's finished SAE and its metrics."""
    from sae_workbench.sae.metrics import METRICS_FILENAME

    saved = out / "train_config.json"
    done = (out / TRAIN_RESULT_FILENAME).exists() and (out / METRICS_FILENAME).exists() and saved.exists()
    return done and json.loads(saved.read_text()) == json.loads(json.dumps(config))


def train_job(
    job: TrainJob,
    resume: bool | None = None,
    progress: bool = True,
    *,
    model: HookedTransformer | None = None,
    step: Callable[[str], None] | None = None,
) -> TrainOutcome:
    """Train, save and measure one SAE. resume: True = from the checkpoint (or an error), False = from scratch,
    None = whatever the folder allows (skip a finished run, continue a checkpointed one, else start).

    `model`: `job.model` already loaded and checked against the job's hook and context size (the CLI's
    `load_subject`), so it is neither loaded nor checked again; None loads and checks it here (a Ray worker).
    `step` is told each stage that has no progress bar of its own (the CLI prints it as a step line)."""
    from sae_workbench.corpus import default_bos_id, resolve_corpus
    from sae_workbench.models import check_context_size, hook_width, load_model, validate_hooks
    from sae_workbench.sae.data import cache_source, first_held_out_window, streaming_source
    from sae_workbench.sae.io import load_sae
    from sae_workbench.sae.metrics import held_out_metrics, read_metrics, write_metrics

    job = job.resolved()
    out = Path(job.out)
    cfg = TrainConfig(**job.config)
    if resume is None:
        if _finished(out, cfg.to_dict()):
            record = json.loads((out / TRAIN_RESULT_FILENAME).read_text())
            return TrainOutcome(
                job.out, "done", str(record["sae_id"]), int(record["n_tokens"]), 0.0, read_metrics(out) or {}
            )
        resume = (out / "checkpoints" / LATEST).exists() and (out / "train_config.json").exists()
    step = step or _silent
    if model is None:
        step(f"loading model {job.model}")
        lm = load_model(job.model, device=job.device)
        validate_hooks(lm, [job.hook])
        check_context_size(lm, job.context_size)
    elif str(model.cfg.model_name) != job.model:
        raise JobModelError(f"train_job was handed model {model.cfg.model_name!r} for a job on {job.model!r}")
    else:
        lm = model
    assert lm.tokenizer is not None
    step(f"corpus {job.corpus}")
    corpus = resolve_corpus(job.corpus)
    bos_id = default_bos_id(lm.tokenizer)
    cache = Path(job.cache) if job.cache else None
    if cache is not None:
        source = cache_source(cache, job.hook)
    else:
        source = streaming_source(lm, job.hook, corpus, context_size=job.context_size, bos_id=bos_id)
    meta = {
        "context_size": job.context_size,
        "prepend_bos": False,
        "bos_id": bos_id,
        "dataset_path": job.corpus,
    }
    step(
        f"{'resuming' if resume else 'training'} a {cfg.architecture} SAE at {job.hook} into {out}"
        + ("" if resume else " (first its initialisation from the data)")
    )
    result = train_sae(
        source, hook_width(lm, job.hook), cfg, out, model_name=job.model, hook=job.hook, metadata=meta,
        resume=resume, device=job.device, progress=progress,
    )  # fmt: skip
    first_window = first_held_out_window(cfg.n_tokens, job.context_size, cfg.shuffle_chunks, cache=cache)
    step(f"held-out metrics on {job.eval_windows} windows after the training data (window {first_window} on)")
    metrics = held_out_metrics(
        load_sae(out, device=job.device), lm, job.hook, corpus, context_size=job.context_size, bos_id=bos_id,
        first_window=first_window, n_windows=job.eval_windows, ce_windows=job.ce_windows, progress=progress,
    )  # fmt: skip
    eval_cfg = {
        "model": job.model, "hook": job.hook, "corpus": job.corpus, "first_window": first_window,
        "windows": job.eval_windows, "ce_windows": min(job.ce_windows, job.eval_windows),
        "context_size": job.context_size, "bos_id": bos_id, "mask": "BOS + special tokens excluded",
        "sae_id": result.sae_id,
    }  # fmt: skip
    write_metrics(out, metrics, eval_cfg)
    status: RunStatus = "resumed" if resume else "trained"
    return TrainOutcome(job.out, status, result.sae_id, result.n_tokens, result.seconds, metrics)


def _silent(text: str) -> None:
    """A `step` that says nothing."""
