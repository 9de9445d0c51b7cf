"""Top-20 latency from the feature-partitioned Parquet store vs the single DuckDB file, same rows, same run.

    .venv/bin/python -m bench.partition_bench                    # 10M synthetic rows (~2-3 min on 2 cores)
    .venv/bin/python -m bench.partition_bench --rows 1000000     # quick

The rows are bench/store_bench.py's synthetic TopK-like activations (k=32, 4608 features, Zipf frequencies, log-normal
values), written to one store file and finalized; a copy of the file is graduated (`Store.graduate`) to a local
Parquet root (4608 / 256 = 18 buckets). Both stores then answer the same queries for the same features: top-20
examples (the rank-prefix path on Parquet), window maxima (the dashboard's per-feature read) and the feature's
activation count; median ms per call, each call on its own connection (a store attach each) and inside one
session. Ratio = partitioned / single file (below 1: Parquet faster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.store_bench import D_SAE, K, T, append_rows, synthetic_rows, timed
from sae_workbench.store import Store


def build(path: Path, n_rows: int) -> tuple[Store, np.ndarray]:
    """A finalized store with `n_rows` synthetic rows of one SAE; also returns the rows' feature column."""
    store = Store.open(path)
    feat, window, position, value = synthetic_rows(n_rows)
    store.register_sae("bench", "smollm2-135m", "blocks.3.hook_resid_post", 576, D_SAE, {"k": K})
    store.start_index("bench", "synthetic", T, K, {})
    append_rows(store, feat, window, position, value)
    store.finalize_index("bench")
    return store, feat


def main() -> None:
    """Build, graduate, time, print the Markdown table."""
    parser = argparse.ArgumentParser(
        description="Top-20 latency: partitioned Parquet vs the single store file."
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=30, help="features timed (drawn by frequency)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="partition_bench_") as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        single, feat = build(folder / "single.duckdb", args.rows)
        build_s = time.perf_counter() - start
        print(f"built the single file in {build_s:.1f} s", file=sys.stderr, flush=True)
        shutil.copy(single.path, folder / "parted.duckdb")
        parted = Store.open(folder / "parted.duckdb")
        start = time.perf_counter()
        (report,) = parted.graduate(str(folder / "root"), windows=False)
        graduate_s = time.perf_counter() - start
        print(f"graduated in {graduate_s:.1f} s", file=sys.stderr, flush=True)
        parquet_mib = sum(f.stat().st_size for f in (folder / "root").rglob("*.parquet")) / 2**20
        rng = np.random.default_rng(3)
        counts = np.bincount(feat, minlength=D_SAE)
        features = rng.choice(D_SAE, args.features, replace=False, p=counts / counts.sum()).tolist()
        for f in features:  # same answers before timing anything
            assert parted.top_examples("bench", f, 20) == single.top_examples("bench", f, 20), f

        def per_call(store: Store, fn: str) -> float:
            """Median ms per feature of one read, a fresh attach per call."""
            calls = {
                "top": lambda f: store.top_examples("bench", f, 20),
                "maxima": lambda f: store.window_maxima("bench", f),
            }[fn]
            return float(np.median([timed(lambda f=f: calls(f), args.repeat) for f in features]))

        def in_session(store: Store) -> float:
            """Median ms per feature of top-20 inside one held session."""
            with store.session():
                return float(np.median([timed(lambda f=f: store.top_examples("bench", f, 20), args.repeat) for f in features]))  # fmt: skip

        rows = [
            ("top-20, own connection", per_call(single, "top"), per_call(parted, "top")),
            ("top-20, in a session", in_session(single), in_session(parted)),
            ("window maxima (dashboard read), own connection", per_call(single, "maxima"), per_call(parted, "maxima")),
        ]  # fmt: skip
        single_mib = single.path.stat().st_size / 2**20
    load_after = os.getloadavg()[0]
    print(f"## Top-20 from partitioned Parquet vs the single file ({report.n_rows:,} rows)\n")
    print("| query (median over features) | single file ms | partitioned ms | ratio |")
    print("|---|---:|---:|---:|")
    for name, a, b in rows:
        print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f} |")
    print()
    print("| fact | value |")
    print("|---|---:|")
    print(f"| activation rows | {report.n_rows:,} |")
    print(f"| features timed (drawn by frequency) | {len(features)} |")
    print(f"| buckets (256 features each) | {report.n_buckets} |")
    print(f"| build single file s | {build_s:.1f} |")
    print(f"| graduate s | {graduate_s:.1f} |")
    print(f"| store file MiB (before graduating) | {single_mib:.1f} |")
    print(f"| Parquet MiB (zstd) | {parquet_mib:.1f} |")
    print(f"| load average (1 min) before / after | {load_before:.1f} / {load_after:.1f} |")


if __name__ == "__main__":
    main()
