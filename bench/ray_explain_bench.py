"""Explaining on Ray with 1 and 2 local workers vs the local backend, same features, same run.

    .venv/bin/python -m bench.ray_explain_bench                      # 96 features per row (~3-5 min on 2 cores)
    .venv/bin/python -m bench.ray_explain_bench --features 16        # quick

The planted store of the tests (real corpus windows, SmolLM2 tokenizer) with its live features replicated to
`--features` (bench/explain_bench.py `replicate`) is copied fresh for every row, so each row explains every feature.
Two explainers: the offline lexical one (CPU only), and the one-shot LLM explainer against the scripted
OpenAI-compatible server (tests/fake_llm.py, in a child process) answering after a fixed `--latency` per call, with
`--concurrency` calls in flight: the local job's limit, and the Ray workers' global limit (one limiter actor), so an
LLM-bound row can only gain from Ray by overlapping the driver's reads with the workers' calls. Ratio = local wall /
row wall (above 1: faster than local). Ray overhead = the cluster's start (once per run, `init_ray` on 127.0.0.1)
and, per row, starting the workers and shipping the explainer (the wall of a 1-feature run on fresh actors).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from bench.explain_bench import replicate
from sae_workbench.explainers.job import ExplainConfig, ExplainJob
from sae_workbench.explainers.ray_backend import RayExplainBackend
from sae_workbench.llm.config import LLMConfig
from sae_workbench.models import load_model
from sae_workbench.raycluster import RayConfig, import_ray, init_ray
from sae_workbench.store import Store
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.explainers.test_ray_explain import scripted
from tests.fake_llm import FakeLLM

NEGATIVES = "RANDOM_NEGATIVE"
"""No sentence-embedding pass: the row measures scheduling and explaining, not MiniLM."""


def _serve(latency: float, conn: Connection) -> None:
    """Child process: the scripted server answering after `latency` seconds; sends its URL, stops on a message."""
    with FakeLLM(responder=scripted(delay_s=latency)) as server:
        conn.send(server.base_url)
        conn.recv()


def run_row(
    pristine: Path, folder: Path, name: str, features: list[int], llm: LLMConfig | None, workers: int
) -> tuple[float, int]:
    """(wall seconds, LLM calls) of explaining `features` on a fresh copy of the store; workers 0 = local."""
    path = folder / f"{name}-{workers}-{len(features)}-{time.monotonic_ns()}.duckdb"
    shutil.copy(pristine, path)
    store = Store.open(path)
    remote = RayExplainBackend(workers) if workers else None
    config = ExplainConfig(name, negatives=NEGATIVES)
    concurrency = llm.concurrency if llm is not None else 8
    job = ExplainJob(store, PLANTED_SAE, config, llm, progress=False, remote=remote, concurrency=concurrency)
    t0 = time.perf_counter()
    summary = job.run(features)
    wall = time.perf_counter() - t0
    assert summary.explained == len(features), summary
    return wall, summary.usage.calls


def main(argv: list[str] | None = None) -> None:
    """Build, run every row, print the tables."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--features", type=int, default=96, help="Features explained per row.")
    ap.add_argument("--latency", type=float, default=0.2, help="Seconds the scripted server takes per call.")
    ap.add_argument(
        "--concurrency", type=int, default=8, help="LLM calls in flight (local and global on Ray)."
    )
    args = ap.parse_args(argv)
    load_before = os.getloadavg()[0]
    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(args.latency, child), daemon=True)
    server.start()
    base_url = parent.recv()
    rows: list[tuple[str, str, float, int]] = []
    overhead: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        store = build_planted_store(folder, load_model("tiny").tokenizer)
        features = replicate(store, args.features)
        build_s = time.perf_counter() - t0
        pristine = folder / "store.duckdb"
        t0 = time.perf_counter()
        started = init_ray(RayConfig(num_cpus=2, num_gpus=0))
        ray_start_s = time.perf_counter() - t0
        try:
            llm = LLMConfig(model="fake", base_url=base_url, concurrency=args.concurrency)
            for name, cfg in (("lexical", None), ("oneshot", llm)):
                for workers in (0, 1, 2):
                    label = "local" if workers == 0 else f"ray × {workers}"
                    wall, calls = run_row(pristine, folder, name, features, cfg, workers)
                    rows.append((name, label, wall, calls))
            for workers in (1, 2):  # start + ship + one feature, on fresh actors
                overhead[workers] = run_row(pristine, folder, "lexical", features[:1], None, workers)[0]
            local_one = run_row(pristine, folder, "lexical", features[:1], None, 0)[0]
        finally:
            if started:
                import_ray().shutdown()
            parent.send("stop")
            server.join(timeout=10)
    load_after = os.getloadavg()[0]
    local = {name: wall for name, label, wall, _ in rows if label == "local"}
    print(f"## Explain on Ray vs local ({args.features} features per row)\n")
    print("| explainer | backend | wall s | features/s | LLM calls | ratio vs local |")
    print("|---|---|---:|---:|---:|---:|")
    for name, label, wall, calls in rows:
        print(
            f"| {name} | {label} | {wall:.2f} | {args.features / wall:.1f} | {calls} | {local[name] / wall:.2f} |"
        )
    print()
    print("| fact | value |")
    print("|---|---:|")
    print(f"| Ray local cluster start s (init_ray, 2 CPUs, 127.0.0.1) | {ray_start_s:.1f} |")
    for workers, wall in overhead.items():
        print(f"| 1-feature run on {workers} fresh worker(s) s (actor start + ship + explain) | {wall:.2f} |")
    print(f"| 1-feature run, local backend s | {local_one:.2f} |")
    print(f"| scripted server latency per call s | {args.latency} |")
    print(f"| LLM calls in flight (local; global on Ray) | {args.concurrency} |")
    print(f"| build store s | {build_s:.1f} |")
    print(f"| load average (1 min) before / after | {load_before:.2f} / {load_after:.2f} |")
    print(f"| CPUs | {os.cpu_count()} |")


if __name__ == "__main__":
    main()
