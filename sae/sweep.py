"""Sweeps of training runs over a grid of settings, locally or on Ray (one run is `sae.train.train_job`).

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
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sae_workbench.errors import WorkbenchError
from sae_workbench.raycluster import Backend, RayConfig, check_backend, init_ray
from sae_workbench.sae.train import TrainJob, TrainOutcome, train_job

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


class SweepSpecError(WorkbenchError):
    """A --sweep specification names an unknown setting or a value of the wrong type."""


class SweepFailedError(WorkbenchError):
    """At least one run of a sweep failed after its retries; the others are saved."""


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
