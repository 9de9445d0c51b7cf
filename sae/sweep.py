"""Training runs as units of work: one run (what `workbench train` does) and sweeps of them, locally or on Ray.

    grid = parse_sweep("k=16,32 d_sae=2304,4608")
    jobs = sweep_jobs(TrainJob(model="smollm2-135m", hook="blocks.3.hook_resid_post", out="runs/sweep"), grid)
    outcomes = run_sweep(jobs, backend="ray")            # one SAE per Ray task (per GPU with --device cuda)

A run is resumable by construction: `train_job(job, resume=None)` skips a run whose folder already holds its finished
SAE and metrics, continues one from its latest sae-lens checkpoint, and starts the rest. On Ray a task that dies is
retried and resumes the same way; rerunning the sweep after a killed driver redoes only what had not finished.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sae_workbench import defaults
from sae_workbench.errors import WorkbenchError
from sae_workbench.raycluster import Backend, RayConfig, check_backend, init_ray

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

SWEEP_KEYS: dict[str, Callable[[str], Any]] = {
    "architecture": str,
    "d_sae": int,
    "expansion": int,
    "k": int,
    "lr": float,
    "tokens": int,
    "batch_size": int,
    "seed": int,
}
"""What a sweep may vary, and how each value is parsed (`tokens` is TrainConfig.n_tokens)."""
TASK_RETRIES = 2
"""Times Ray reruns a training task whose worker died; each retry resumes from the run's checkpoint."""

RunStatus = Literal["trained", "resumed", "done"]


class SweepSpecError(WorkbenchError):
    """A --sweep specification names an unknown setting or a value of the wrong type."""


class SweepFailedError(WorkbenchError):
    """At least one run of a sweep failed after its retries; the others are saved."""


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


def parse_sweep(spec: str) -> dict[str, list[Any]]:
    """`"k=16,32 d_sae=2304,4608"` → {"k": [16, 32], "d_sae": [2304, 4608]}; SweepSpecError on a bad term."""
    grid: dict[str, list[Any]] = {}
    for term in spec.replace(";", " ").split():
        key, sep, values = term.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in SWEEP_KEYS or not values.strip(","):
            raise SweepSpecError(
                f"bad sweep term {term!r}: write key=v1,v2 with key one of {', '.join(SWEEP_KEYS)}"
            )
        try:
            grid[key] = [SWEEP_KEYS[key](v) for v in values.split(",") if v]
        except ValueError as err:
            raise SweepSpecError(f"bad value in {term!r}: {err}") from err
    if not grid:
        raise SweepSpecError("empty sweep: give at least one key=v1,v2 term")
    return grid


def run_name(config: dict[str, Any], varied: Sequence[str]) -> str:
    """A run's folder name from the settings the sweep varies, e.g. `architecture=topk-k=16`."""
    return "-".join(f"{key}={config['n_tokens' if key == 'tokens' else key]}" for key in varied)


def sweep_jobs(base: TrainJob, grid: dict[str, list[Any]]) -> list[TrainJob]:
    """One job per point of the grid, each in its own folder under `base.out`."""
    keys = list(grid)
    jobs = []
    for values in itertools.product(*(grid[k] for k in keys)):
        config = dict(base.config)
        for key, value in zip(keys, values, strict=True):
            config["n_tokens" if key == "tokens" else key] = value
        jobs.append(replace(base, config=config, out=str(Path(base.out) / run_name(config, keys))))
    return jobs


def _finished(out: Path, config: dict[str, Any]) -> bool:
    """True when `out` holds this configuration's finished SAE and its metrics."""
    from sae_workbench.sae.io import TRAIN_RESULT_FILENAME
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
    from sae_workbench.sae.io import TRAIN_RESULT_FILENAME, load_sae
    from sae_workbench.sae.metrics import held_out_metrics, read_metrics, write_metrics
    from sae_workbench.sae.train import LATEST, TrainConfig, train_sae

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


def _train_task(job: TrainJob) -> TrainOutcome:
    """A Ray task's body: one run, resuming whatever an earlier attempt left."""
    return train_job(job, resume=None, progress=False)


def run_sweep(
    jobs: Sequence[TrainJob],
    backend: Backend | str = "local",
    ray_config: RayConfig | None = None,
    on_done: Callable[[TrainOutcome], None] | None = None,
    *,
    model: HookedTransformer | None = None,
    step: Callable[[str], None] | None = None,
    progress: bool = True,
) -> list[TrainOutcome]:
    """Run every job (in order locally; one Ray task each, one GPU each on CUDA); SweepFailedError names failures.
    Locally every job trains on `model` when given (see `train_job`), reports its stages to `step` and shows its
    bars when `progress`; a Ray task loads its own model and shows nothing."""
    backend = check_backend(str(backend))
    jobs = [job.resolved() for job in jobs]
    if len({job.out for job in jobs}) != len(jobs):
        raise SweepSpecError("two runs of the sweep would share a folder; vary at least one setting")
    outcomes: dict[str, TrainOutcome] = {}
    failures: dict[str, str] = {}
    if backend == "local":
        for job in jobs:
            outcome = train_job(job, resume=None, progress=progress, model=model, step=step)
            outcomes[job.out] = outcome
            if on_done is not None:
                on_done(outcome)
        return [outcomes[job.out] for job in jobs]
    init_ray(ray_config)
    import ray

    pending = {}
    for job in jobs:
        gpus = 1 if job.device.startswith("cuda") else 0
        task = ray.remote(num_cpus=1, num_gpus=gpus, max_retries=TASK_RETRIES, retry_exceptions=False)(
            _train_task
        )
        pending[task.remote(job)] = job
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        job = pending.pop(done[0])
        try:
            outcome = ray.get(done[0])
        except Exception as err:  # a run's failure is reported with the others; the rest go on
            failures[job.out] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            continue
        outcomes[job.out] = outcome
        if on_done is not None:
            on_done(outcome)
    if failures:
        lines = "\n".join(f"  {out}: {why}" for out, why in failures.items())
        raise SweepFailedError(
            f"{len(failures)} of {len(jobs)} runs failed (rerun the same command to retry them):\n{lines}"
        )
    return [outcomes[job.out] for job in jobs]


def outcome_dict(outcome: TrainOutcome) -> dict[str, Any]:
    """An outcome as JSON-able fields."""
    return dataclasses.asdict(outcome)
