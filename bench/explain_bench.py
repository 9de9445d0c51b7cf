"""Explain-job throughput and overhead per explainer against the scripted local OpenAI-compatible server.

    .venv/bin/python -m bench.explain_bench --features 48 --tree-features 6

Builds the planted store of the tests (real corpus windows, SmolLM2 tokenizer), replicates its live features into
many, and runs each explainer at concurrency 1 and 32 against tests/fake_llm.py answering instantly. Overhead per
feature = (job wall time − time the server spent inside requests) / features, at concurrency 1: it contains
sampling, record loading, prompt building, parsing, simulation bookkeeping and storing — everything but the LLM.
Baseline for the ratio column: the lexical explainer (no LLM) at concurrency 1 in the same run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from explainers.job import ExplainConfig, ExplainJob
from explainers.llm_config import LLMConfig
from explainers.prism import PrismConfig
from tests.fake_llm import FakeLLM
from tests.test_explain_llm import smart
from tests.test_explain_support import PLANTED_SAE, build_planted_store
from workbench.models import load_model
from workbench.store import Store

LIVE = (0, 1, 3, 4)


def replicate(store: Store, n: int) -> list[int]:
    """Copy the planted live features into features 5..5+n (values jittered) and return the new indices."""
    table = store.activation_coordinates(PLANTED_SAE)
    feats = table.column("feature").to_numpy()
    rows: dict[str, list[np.ndarray]] = {"feature": [], "window_id": [], "position": [], "value": []}
    new = list(range(5, 5 + n))
    for i, f in enumerate(new):
        src = LIVE[i % len(LIVE)]
        sel = feats == src
        rows["feature"].append(np.full(int(sel.sum()), f, dtype=np.int32))
        rows["window_id"].append(table.column("window_id").to_numpy()[sel])
        rows["position"].append(table.column("position").to_numpy()[sel])
        rows["value"].append(np.ones(int(sel.sum()), dtype=np.float32) * (1.0 + 0.01 * i))
    batch = pa.table({k: pa.array(np.concatenate(v)) for k, v in rows.items()})
    store.add_activations(PLANTED_SAE, batch)
    store.finalize_index(PLANTED_SAE)
    return new


def run(store: Store, explainer: ExplainConfig, features: list[int], llm: LLMConfig | None, conc: int,
        server: FakeLLM | None) -> dict[str, float]:  # fmt: skip
    """One job; returns wall seconds, server-busy seconds, calls and tokens."""
    before = len(server.requests) if server else 0
    t0 = time.perf_counter()
    job = ExplainJob(store, PLANTED_SAE, explainer, llm, concurrency=conc, progress=False, use_cache=False)
    summary = job.run(features)
    wall = time.perf_counter() - t0
    reqs = server.requests[before:] if server else []
    busy = sum(r.finished - r.started for r in reqs)
    n = len(features)
    return {"wall": wall, "busy": busy, "n": n, "calls": summary.usage.calls,
            "tokens": summary.usage.total_tokens, "fpm": 60 * n / wall}  # fmt: skip


def main() -> None:
    """Build the store, run every explainer at concurrency 1 and 32, print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--features", type=int, default=48)
    ap.add_argument("--tree-features", type=int, default=6)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="explain-bench-"))
    store = build_planted_store(folder, load_model("tiny").tokenizer)
    pool = iter(replicate(store, 4 * args.features + 6 * args.tree_features + 4))

    def take(n: int) -> list[int]:
        """Fresh features for each timed row, so no row resumes another's work."""
        return [next(pool) for _ in range(n)]

    rows = []
    with FakeLLM(responder=smart) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, max_retries=0, concurrency=64)
        plans = [
            ("lexical", ExplainConfig("lexical"), None, args.features),
            ("oneshot", ExplainConfig("oneshot"), llm, args.features),
            ("tree", ExplainConfig("tree", negatives="RANDOM_NEGATIVE"), llm, args.tree_features),
            (
                "tree (offline editor)",
                ExplainConfig("tree", negatives="RANDOM_NEGATIVE"),
                None,
                args.tree_features,
            ),
            (
                "prism",
                ExplainConfig("prism", prism=PrismConfig(percentile=90.0, n_texts=60)),
                llm,
                args.tree_features,
            ),
        ]
        # Warm-up (imports, MiniLM load, first connections) outside the timed rows.
        run(store, ExplainConfig("lexical"), take(2), None, 1, None)
        run(
            store,
            ExplainConfig("prism", prism=PrismConfig(percentile=90.0, n_texts=60)),
            take(1),
            llm,
            1,
            server,
        )
        for name, cfg, cfg_llm, n in plans:
            for conc in (1, 32):
                r = run(store, cfg, take(n), cfg_llm, conc, server if cfg_llm else None)
                rows.append((name, conc, r))
    base = next(r for name, c, r in rows if name == "lexical" and c == 1)
    base_ms = 1000 * (base["wall"] - base["busy"]) / base["n"]
    print("| explainer | conc | features | features/min | LLM calls/feature | tokens/feature | calls per 1k | "
          "tokens per 1k | overhead ms/feature (wall − server) | ratio vs lexical c1 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, conc, r in rows:
        over = 1000 * (r["wall"] - r["busy"]) / r["n"]
        print(f"| {name} | {conc} | {r['n']} | {r['fpm']:.0f} | {r['calls'] / r['n']:.1f} | "
              f"{r['tokens'] / r['n']:.0f} | {1000 * r['calls'] / r['n']:.0f} | {1000 * r['tokens'] / r['n']:.0f} | "
              f"{over:.1f} | {over / base_ms:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
