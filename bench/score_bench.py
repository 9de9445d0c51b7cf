"""Scorer overhead per explanation, excluding LLM time (offline lexical backends; the LLM simulator against the
local fake OpenAI server, which answers instantly, so its row is pure client + HTTP + parsing overhead).

    .venv/bin/python -m bench.score_bench [--windows 1000] [--features 12]

Builds a planted store over real default-corpus windows (tests/test_scoring_planted.py): feature 0 fires on " def"
in Python code, features 2.. fire on common tokens, each with a correct explanation. Prints seconds per scored
explanation for each scorer × negative source and the ratio to simulation/RANDOM (lexical), measured in one run.
The one-off MiniLM embedding of every window for close negatives is reported on its own row.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from sae_workbench.evaluation.scorers.job import ScoreBackends, ScoreConfig, run_scoring
from tests.evaluation.scorers.test_scoring_planted import SAE_ID, build_planted_store

EXTRA_TOKENS = (
    " the",
    " and",
    " self",
    " return",
    " of",
    " is",
    " to",
    " in",
    " import",
    " for",
    " if",
    " not",
)


def _fake_llm_backends(server) -> tuple[ScoreBackends, object]:
    """Simulation through explainers' LLMSimulator on the fake server (scripted all-zero predictions)."""
    from sae_workbench.explainers.simulate import LLMSimulator
    from sae_workbench.llm.client import LLMClient
    from sae_workbench.llm.config import LLMConfig

    client = LLMClient(LLMConfig(model="fake", base_url=server.base_url, timeout_s=5))
    return ScoreBackends(simulator=LLMSimulator(client)), client


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--windows", type=int, default=1000)
    parser.add_argument("--features", type=int, default=12, help="extra planted features (≤ 12)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    from tests.fake_llm import FakeLLM, Reply

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        store = build_planted_store(Path(tmp) / "s.duckdb", args.windows, EXTRA_TOKENS[: args.features])
        build_s = time.perf_counter() - t0
        rows: list[tuple[str, str, float, int]] = []

        def timed(scorer: str, source: str, backends: ScoreBackends | None = None, label: str = "") -> None:
            # Fresh seed per row so nothing is skipped as already scored.
            config = ScoreConfig(scorer, source, seed=len(rows) + 1)
            result = run_scoring(store, SAE_ID, config, backends, progress=False)
            rows.append((label or scorer, source, result.seconds, result.scored + result.failed))

        timed("simulation", "RANDOM")
        t0 = time.perf_counter()
        timed("simulation", "SIMILAR_NEGATIVE", label="simulation (first SIMILAR: embeds all windows)")
        for scorer in ("simulation", "detection", "fuzzing", "embedding"):
            for source in ("RANDOM", "SIMILAR_NEGATIVE"):
                timed(scorer, source)

        def responder(body):
            user = body["messages"][-1]["content"]
            n_tok = [int(part.split(" tokens)")[0]) for part in user.split("(")[1:] if " tokens)" in part]
            return Reply(json.dumps({"predictions": [[0] * n for n in n_tok]}))

        with FakeLLM(responder=responder) as server:
            backends, _client = _fake_llm_backends(server)
            timed("simulation", "RANDOM", backends, label="simulation (LLM simulator, fake server)")
            timed("simulation", "SIMILAR_NEGATIVE", backends, label="simulation (LLM simulator, fake server)")

    base = rows[0][2] / max(rows[0][3], 1)
    print(f"planted store: {args.windows} windows, {args.features + 2} features; build {build_s:.1f}s\n")
    print("| scorer | negatives | explanations | s total | ms / explanation | × simulation/RANDOM |")
    print("|---|---|---|---|---|---|")
    for label, source, secs, n in rows:
        per = secs / max(n, 1)
        print(f"| {label} | {source} | {n} | {secs:.2f} | {1000 * per:.1f} | {per / base:.2f} |")


if __name__ == "__main__":
    main()
