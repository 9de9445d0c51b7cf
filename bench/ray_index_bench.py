"""Indexing on Ray vs the local backend: `index_sae` against `index_sae_ray` with 1 and 2 workers, same run.

    .venv/bin/python -m bench.ray_index_bench                               # SmolLM2-135M, 65k tokens (~5 min, 2 cores)
    .venv/bin/python -m bench.ray_index_bench --model tiny --tokens 8192    # quick

Each contestant indexes the same random TopK 576→4608 (k=32) SAE over the same windows of the default corpus into its
own fresh store (feature statistics off: they are the same code after the rows are in). The Ray runs share one local
cluster with as many CPUs as the machine (started before the timers); "1 worker" is one actor with every thread,
"2 workers" two actors with half of them each, the local backend uses every thread in this process. Wall time counts
everything the command does (actor start: a new process importing torch + sae_lens and loading the model, staging
files, commits, the final sort); "steady tok/s" is the rate once every actor is up: per actor, the tokens of the ranges
it committed after its first one over the time from its first commit to its last (an actor runs its ranges one after
another, so that window holds exactly those ranges' work), summed over the actors. Counting every range committed
after the run's first commit instead would credit the second actor's whole first range to a window that starts
after the first actor's commit, inflating the 2-worker rate. "Ray overhead" = Ray wall − local wall. The rows of
every run are checked equal.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

HOOK = "blocks.3.hook_resid_post"


def steady_rate(commits: list[tuple[float, int, int]], workers: int) -> float:
    """Tokens/s once every actor is up: the sum over actors of (tokens of its ranges after its first) / (its last
    commit − its first commit); NaN when an actor committed fewer than two ranges (no steady window to measure)."""
    total = 0.0
    for actor in range(workers):
        mine = [(t, n) for t, a, n in commits if a == actor]
        if len(mine) < 2 or mine[-1][0] <= mine[0][0]:
            return float("nan")
        total += sum(n for _, n in mine[1:]) / (mine[-1][0] - mine[0][0])
    return total


def main() -> None:
    """Run the three contestants, print the Markdown table (and write --json)."""
    parser = argparse.ArgumentParser(description="Indexing on Ray vs the local backend, same run.")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--hook", default=HOOK)
    parser.add_argument("--tokens", type=int, default=65_536)
    parser.add_argument("--context-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--ranges", type=int, default=8, help="Window ranges the tokens are cut into.")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from sae_lens import TopKSAE, TopKSAEConfig

    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.models import load_model
    from sae_workbench.raycluster import RayConfig, ray_session
    from sae_workbench.sae.index_loop import index_sae
    from sae_workbench.sae.index_request import IndexConfig, IndexRequest
    from sae_workbench.sae.ray_index import RayIndexConfig, index_sae_ray
    from sae_workbench.store import Store
    from sae_workbench.store.ranges import StagedRange

    threads = torch.get_num_threads()
    model = load_model(args.model, device=args.device)
    hook = args.hook if args.hook in model.hook_dict else "blocks.0.hook_resid_post"
    torch.manual_seed(0)
    d_in = model.cfg.d_model
    sae = TopKSAE(TopKSAEConfig(d_in=d_in, d_sae=8 * d_in, k=32))
    sae.cfg.metadata.hook_name = hook
    corpus = resolve_corpus("default")
    cfg = IndexConfig(context_size=args.context_size, batch_size=args.batch_size, compute_stats=False)
    windows = args.tokens // args.context_size
    range_tokens = max(1, windows // args.ranges) * args.context_size
    columns = [
        "backend",
        "workers",
        "tokens",
        "wall s",
        "tok/s",
        "steady tok/s",
        "vs local",
        "Ray overhead s",
    ]
    rows: list[list[str]] = []
    counts: list[int] = []
    with tempfile.TemporaryDirectory(prefix="ray-index-bench-") as tmp:
        started = time.perf_counter()
        request = IndexRequest(model, sae, hook, corpus, args.tokens, cfg)
        local = index_sae(Store.open(Path(tmp) / "local.duckdb"), request)
        local_s = time.perf_counter() - started
        counts.append(Store.open(Path(tmp) / "local.duckdb").activation_count(local.sae_id))
        local_rate = local.new_tokens / local_s
        rows.append(["local", "—", f"{local.new_tokens:,}", f"{local_s:.1f}", f"{local_rate:,.0f}",
                     f"{local_rate:,.0f}", "1.00×", "—"])  # fmt: skip
        n_cpus = os.cpu_count() or 1
        with ray_session(RayConfig(num_cpus=n_cpus, num_gpus=1 if args.device.startswith("cuda") else 0)):
            for workers in (1, 2):
                commits: list[tuple[float, int, int]] = []

                def on_commit(staged: StagedRange, actor: int) -> None:
                    commits.append((time.perf_counter(), actor, staged.n_windows * args.context_size))  # noqa: B023

                ray_cfg = RayIndexConfig(
                    workers=workers,
                    range_tokens=range_tokens,
                    device=args.device,
                    threads=max(1, n_cpus // workers),
                )
                store = Store.open(Path(tmp) / f"ray{workers}.duckdb")
                started = time.perf_counter()
                result = index_sae_ray(store, request, ray_cfg, on_commit=on_commit)
                wall = time.perf_counter() - started
                counts.append(store.activation_count(result.sae_id))
                steady = steady_rate(commits, workers)
                rate = result.new_tokens / wall
                rows.append(["ray", str(workers), f"{result.new_tokens:,}", f"{wall:.1f}", f"{rate:,.0f}",
                             f"{steady:,.0f}", f"{rate / local_rate:.2f}× (steady {steady / local_rate:.2f}×)",
                             f"{wall - local_s:+.1f}"])  # fmt: skip
    assert len(set(counts)) == 1, f"row counts differ between backends: {counts}"
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    context = (
        f"model {args.model}, hook {hook}, TopK {d_in}→{8 * d_in} k=32, device {args.device}, {n_cpus} CPUs, "
        f"local backend {threads} threads, {windows} windows × {args.context_size} tokens in ranges of "
        f"{range_tokens // args.context_size} windows, batch {args.batch_size}, {counts[0]:,} rows each (equal), "
        f"load average after {load}"
    )
    print(context)
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        from bench.results_md import Table, write_tables_json

        write_tables_json(args.json, [Table(columns, rows)], [context])


if __name__ == "__main__":
    main()
