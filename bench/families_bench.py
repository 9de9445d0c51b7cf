"""Best match for every feature of two 16k-feature SAEs (d_in 576), blocked vs dense, in one run (issue 36).

    .venv/bin/python -m bench.families_bench                       # 16384 features, d_in 576, 2 torch threads
    .venv/bin/python -m bench.families_bench --d-sae 4096 --quick  # smoke size

SAE A has random unit decoder rows; SAE B is A permuted with 5% Gaussian noise on every row, plus a quarter of its
rows replaced by fresh random ones (features the two "seeds" do not share). Each mode runs in its own child process,
so its peak resident memory (VmHWM) is its own:
- dense (baseline): the full d_a × d_b float32 cosine matrix (1 GiB at 16k), then each row's argmax;
- blocked greedy: `top_k_candidates` in blocks of 1024 rows, each row's maximum (what `match(..., "greedy")` runs);
- blocked Hungarian: the top 32 per row and per column (the sparse candidate graph), then the one-to-one
  assignment on it (what `match(..., "hungarian")` runs).
Same-match columns compare each blocked result with the dense argmax (greedy) and with the planted permutation over
the shared features (Hungarian).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

NOISE = 0.05
"""Per-coordinate noise on B's shared rows, relative to a unit row's coordinate scale (× 1/√d_in)."""
UNSHARED = 0.25
"""Fraction of B's rows replaced by fresh random directions."""


def planted_pair(
    d_sae: int, d_in: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(A rows, B rows, perm, shared mask over A): B[perm[i]] = A[i] + noise where shared[i]."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d_sae, d_in)).astype(np.float32)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    perm = rng.permutation(d_sae)
    B = np.empty_like(A)
    B[perm] = A + (NOISE / np.sqrt(d_in)) * rng.standard_normal(A.shape).astype(np.float32)
    shared = rng.random(d_sae) >= UNSHARED
    B[perm[~shared]] = rng.standard_normal((int((~shared).sum()), d_in)).astype(np.float32)
    return A, B, perm, shared


def vm_hwm_mib() -> float:
    """This process's peak resident memory in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_mode(mode: str, d_sae: int, d_in: int, out: Path) -> None:
    """One mode in this (child) process: time it and write {seconds, rss, best} to `out`."""
    import torch

    from sae_workbench.evaluation.families.matching import (
        greedy_from_candidates,
        hungarian_sparse,
        make_directions,
        top_k_candidates,
    )

    torch.set_num_threads(2)
    A, B, _, _ = planted_pair(d_sae, d_in)
    a, b = make_directions(A), make_directions(B)
    base_rss = vm_hwm_mib()
    t0 = time.perf_counter()
    if mode == "dense":
        S = torch.from_numpy(a.decoder_FD) @ torch.from_numpy(b.decoder_FD).T  # (d_a, d_b) float32
        best = S.argmax(dim=1).numpy()
        del S
    else:
        greedy = mode == "greedy"
        cands = top_k_candidates(a, b, "decoder", k=1 if greedy else 32, block=1024, columns=not greedy)
        if mode == "greedy":
            best = greedy_from_candidates(cands, "decoder").feature_b
        else:
            m = hungarian_sparse(cands, d_sae, d_sae, "decoder")
            assert m is not None, "the candidate graph admits no full matching"
            best = m.partner_of(d_sae)
    seconds = time.perf_counter() - t0
    payload = {"seconds": seconds, "rss": vm_hwm_mib(), "rss_before": base_rss, "best": best.tolist()}
    out.write_text(json.dumps(payload))


def main() -> None:
    """Run the three modes in child processes and print the Markdown table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--d-sae", type=int, default=16384)
    parser.add_argument("--d-in", type=int, default=576)
    parser.add_argument("--quick", action="store_true", help="4096 features (smoke size)")
    parser.add_argument("--mode", choices=("dense", "greedy", "hungarian"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    d_sae = 4096 if args.quick else args.d_sae
    if args.mode:
        run_mode(args.mode, d_sae, args.d_in, args.out)
        return
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("dense", "greedy", "hungarian"):
            out = Path(tmp) / f"{mode}.json"
            cmd = [sys.executable, "-m", "bench.families_bench", "--mode", mode, "--out", str(out),
                   "--d-sae", str(d_sae), "--d-in", str(args.d_in)]  # fmt: skip
            subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
            results[mode] = json.loads(out.read_text())
    _, _, perm, shared = planted_pair(d_sae, args.d_in)
    dense_best = np.asarray(results["dense"]["best"])
    load = os.getloadavg()[0]
    print(f"## Best match for every feature of two {d_sae:,}-feature SAEs (d_in {args.d_in}), 2 threads\n")
    print("| mode | seconds | ratio vs dense | peak RSS MiB | RSS above start MiB | same best match as dense | "
          "shared features recovered |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    dense_s = float(results["dense"]["seconds"])  # type: ignore[arg-type]
    for mode, label in (("dense", "dense matrix + argmax (baseline)"), ("greedy", "blocked top-k, greedy"),
                        ("hungarian", "blocked top-k, Hungarian on the sparse graph")):  # fmt: skip
        r = results[mode]
        best = np.asarray(r["best"])
        s = float(r["seconds"])  # type: ignore[arg-type]
        rss, before = float(r["rss"]), float(r["rss_before"])  # type: ignore[arg-type]
        same = "—" if mode == "hungarian" else f"{np.mean(best == dense_best):.4f}"
        recovered = float(np.mean(best[shared] == perm[shared]))
        print(
            f"| {label} | {s:.2f} | {s / dense_s:.2f} | {rss:,.0f} | {rss - before:,.0f} | {same} | {recovered:.4f} |"
        )
    print(
        f"\nload average (1 min) at the end: {load:.1f}; dense matrix alone: {d_sae * d_sae * 4 / 2**20:,.0f} MiB"
    )


if __name__ == "__main__":
    main()
