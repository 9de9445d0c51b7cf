"""Training sweeps: one SAE per grid point, locally or as Ray tasks, each resumable from its checkpoint."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sae_workbench.faults import FAULT_ENV
from sae_workbench.sae.sweep import SweepSpecError, parse_sweep, run_sweep, sweep_jobs
from sae_workbench.sae.train import TrainJob


def test_sweep_spec_expands_to_one_folder_per_grid_point(tmp_path: Path) -> None:
    grid = parse_sweep("k=4,8 d_sae=64,128 architecture=topk")
    assert grid == {"k": [4, 8], "d_sae": [64, 128], "architecture": ["topk"]}
    jobs = sweep_jobs(TrainJob(out=str(tmp_path), config={"n_tokens": 10, "lr": 0.1}), grid)
    assert len(jobs) == 4
    assert {Path(j.out).name for j in jobs} == {
        f"k={k}-d_sae={d}-architecture=topk" for k in (4, 8) for d in (64, 128)
    }
    assert all(j.config["lr"] == 0.1 and j.config["n_tokens"] == 10 for j in jobs)
    assert sweep_jobs(TrainJob(out=str(tmp_path)), parse_sweep("tokens=100"))[0].config["n_tokens"] == 100
    for bad in ("k=", "width=4", "k=four", ""):
        with pytest.raises(SweepSpecError):
            parse_sweep(bad)
    with pytest.raises(SweepSpecError, match="share a folder"):
        run_sweep([TrainJob(out=str(tmp_path))] * 2)


def _args(corpus: Path, out: Path) -> list[str]:
    return [
        "--model", "tiny", "--hook", "blocks.1.hook_resid_post", "--corpus", str(corpus), "--d-sae", "64",
        "--tokens", "4096", "--batch-size", "512", "--context-size", "32", "--out", str(out), "--eval-windows", "4",
        "--ce-windows", "0", "--checkpoint-every", "2", "--dense-step",
    ]  # fmt: skip


@pytest.mark.slow  # a local Ray cluster in a subprocess, two small trainings, one killed and resumed
def test_ray_sweep_survives_a_worker_dying_after_a_checkpoint_and_reruns_skip(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text(inspect.getsource(inspect))
    out = tmp_path / "sweep"
    marker = tmp_path / "fault-fired"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env[FAULT_ENV] = f"train.checkpoint:{marker}"
    cmd = [sys.executable, "-m", "sae_workbench", "train", *_args(corpus, out), "--sweep", "k=4,8", "--backend", "ray"]  # fmt: skip
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert marker.exists(), "the armed fault never fired: no checkpoint was written"
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    assert [p.name for p in runs] == ["k=4", "k=8"]
    statuses = [
        line.split()[0] for line in first.stdout.splitlines() if line.startswith(("trained ", "resumed "))
    ]
    assert sorted(statuses) == ["resumed", "trained"], (
        first.stdout
    )  # the killed run continued from its checkpoint
    for run in runs:
        result = json.loads((run / "train_result.json").read_text())
        assert result["n_tokens"] >= 4096
        assert json.loads((run / "train_config.json").read_text())["k"] == int(run.name.split("=")[1])
        assert (run / "metrics.json").exists() and not (run / "checkpoints").exists()
        # The resumed run's log continues where the checkpoint left off: no step is logged twice.
        steps = [json.loads(line)["step"] for line in (run / "train_log.jsonl").read_text().splitlines()]
        assert len(steps) == len(set(steps)) and steps == sorted(steps)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 trained or resumed, 2 already finished" in again.stdout
