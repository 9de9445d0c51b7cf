"""Kill a real `workbench cache` process (SIGKILL) after its first shard, rerun the same command, and compare with an
uninterrupted run (in-process, same model and settings): every shard identical. Slow: two CLI start-ups."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sae_workbench.activation_cache.caching import cache_activations
from sae_workbench.activation_cache.reader import ActivationCache
from sae_workbench.corpus import resolve_corpus
from tests.core.test_activation_cache import write_corpus

WORKBENCH = Path(sys.executable).parent / "workbench"


def cache_command(corpus: Path, out: Path) -> list[str]:
    return [
        str(WORKBENCH),
        "cache",
        "--model",
        "tiny",
        "--hook",
        "blocks.0.hook_resid_post",
        "--hook",
        "blocks.1.hook_resid_post",
        "--corpus",
        str(corpus),
        "--tokens",
        str(48 * 16),
        "--context-size",
        "16",
        "--batch-size",
        "2",
        "--shard-tokens",
        "32",
        "--dtype",
        "float32",
        "--out",
        str(out),
        "--no-progress",
    ]


def listed_shards(folder: Path) -> int:
    try:
        return len(json.loads((folder / "manifest.json").read_text())["shards"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


@pytest.mark.slow
def test_sigkill_then_rerun_equals_uninterrupted_run(tiny_model, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    # Same thread count in every process so the forward passes are bitwise reproducible.
    env = dict(os.environ, OMP_NUM_THREADS=str(torch.get_num_threads()), WORKBENCH_LOG="WARNING")
    killed, reference = tmp_path / "killed", tmp_path / "reference"

    proc = subprocess.Popen(
        cache_command(corpus, killed), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while listed_shards(killed) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = listed_shards(killed)
    assert proc.returncode == -signal.SIGKILL, "the cache run finished before it could be killed"
    assert 1 <= n_before < 24, n_before  # 24 shards of 2 windows in a complete run

    done = subprocess.run(cache_command(corpus, killed), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"this run wrote {(48 - 2 * n_before) * 16:,} tokens" in done.stdout
    cache_activations(
        tiny_model,
        ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"],
        resolve_corpus(str(corpus)),
        reference,
        n_tokens=48 * 16,
        context_size=16,
        batch_size=2,
        dtype="float32",
        shard_tokens=32,
        progress=False,
    )

    a, b = ActivationCache(killed), ActivationCache(reference)
    a.verify()
    assert a.n_tokens == b.n_tokens == 48 * 16
    assert [s.sha256 for s in a.manifest.shards] == [s.sha256 for s in b.manifest.shards]
    for i in range(a.n_shards):
        sa, sb = a.load_shard(i), b.load_shard(i)
        assert torch.equal(sa.tokens_WT, sb.tokens_WT) and torch.equal(sa.window_ids_W, sb.window_ids_W)
        for hook in a.manifest.hooks:
            assert torch.equal(sa.acts[hook], sb.acts[hook])
    assert not [p for p in killed.iterdir() if ".tmp" in p.name]
