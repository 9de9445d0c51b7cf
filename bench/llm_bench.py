"""Throughput and tokens of the LLM explainers and scorers on the REAL local model (issue 32 item 8): the local
llama-cpp-python server serving SmolLM2-135M-Instruct (`workbench llm serve`'s default: context 8192, one thread per
answer, 2 requests in flight), on live features of the planted tiny-model store of the tests.

    .venv/bin/python -m bench.llm_bench --features 3 --forms json_object,none

Rows: one-shot, tree (1 root, 1 child per node, width 1, depth 1: the smallest search) and PRISM (k 2) explaining
`--features` features; detection, fuzzing, simulation and complexity scoring the one-shot explanations: every
explainer and LLM scorer prompt. Columns: explanations (or scores)
per minute of wall time on this machine, LLM calls and prompt / completion tokens per feature as the server counted
them (its GGUF tokenizer: the model's own), the share of answers that parsed and the re-asks, and the cost of 1M
features at a hosted price. Every row runs once per `--forms` entry on a fresh store: with the schema sent the way
this server takes it (json_object + schema) and free-form (none: the prompt alone asks for the JSON; issue 32 item 2).
The price is an assumption, stated in the output: gpt-4o-mini at $0.15 per 1M input tokens and $0.60 per 1M output
tokens (OpenAI's pricing page, https://openai.com/api/pricing/, as listed from its July 2024 launch); another model
reads the same token counts under different prices, and its tokenizer counts somewhat differently.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring, score_backends
from sae_workbench.explainers.job import ExplainConfig, ExplainJob
from sae_workbench.explainers.prism import PrismConfig, PrismExplainer
from sae_workbench.explainers.tree import TreeConfig, TreeExplainer
from sae_workbench.llm.cache import StoreCache
from sae_workbench.llm.server import LocalLLMServer, ServerSettings
from sae_workbench.models import load_model
from sae_workbench.status import Status
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store

PRICE_IN_PER_M = 0.15
"""Assumed hosted price, USD per 1M input tokens (gpt-4o-mini, OpenAI pricing page, July 2024)."""
PRICE_OUT_PER_M = 0.60
"""Assumed hosted price, USD per 1M output tokens (same source)."""


def _cost_per_million(prompt_per_feature: float, completion_per_feature: float) -> float:
    """USD for 1M features at the assumed price."""
    return prompt_per_feature * PRICE_IN_PER_M + completion_per_feature * PRICE_OUT_PER_M


def _row(form: str, name: str, n: int, seconds: float, usage: Any, ok: int, malformed_failures: int) -> str:
    """One Markdown table row (`usage`: the row's Usage totals)."""
    per_min = 60.0 * ok / seconds if seconds > 0 else 0.0
    p, c = usage.prompt_tokens / max(n, 1), usage.completion_tokens / max(n, 1)
    # every re-ask answers a malformed answer; a feature that failed as malformed ended on one more
    malformed = usage.reasks + malformed_failures
    parsed = (usage.calls - malformed) / usage.calls if usage.calls else float("nan")
    return (f"| {form} | {name} | {n} | {ok} | {usage.calls} | {parsed:.0%} | {usage.reasks} | {seconds:.0f} | "
            f"{per_min:.2f} | {usage.calls / max(n, 1):.1f} | {p:,.0f} | {c:,.0f} | ${_cost_per_million(p, c):,.0f} |")  # fmt: skip


def _malformed(rows: Any) -> int:
    """Rows (explanations or scores) that failed because the answer never parsed."""
    return sum(1 for r in rows if r.status is Status.LLM_MALFORMED_OUTPUT)


def _form_rows(
    server: LocalLLMServer, form: str, live: list[int], max_tokens: int, folder: Path, scored: str = "oneshot"
) -> list[str]:
    """Explain and score `live` on a fresh planted store with schemas sent as `form` ('none': free-form JSON)."""
    folder.mkdir(parents=True, exist_ok=True)
    store = build_planted_store(folder, load_model("tiny").tokenizer)
    cfg = server.llm_config(max_tokens=max_tokens, structured_output=form)
    tree = TreeExplainer(ExplainConfig("tree", negatives="RANDOM_NEGATIVE").split(),
                         search=replace(TreeConfig(), roots=1, branching=1, width=1, depth=1))  # fmt: skip
    methods: list[tuple[str, Any]] = [
        ("oneshot", ExplainConfig("oneshot", negatives="RANDOM_NEGATIVE")), ("tree", tree),
        ("prism", PrismExplainer(PrismConfig(percentile=90.0, n_texts=10, k=2))),
    ]  # fmt: skip
    lines = []
    for name, method in methods:
        t0 = time.perf_counter()
        s = ExplainJob(store, PLANTED_SAE, method, cfg, progress=False, use_cache=False).run(live)
        rows = [e for e in store.explanations(PLANTED_SAE, explainer=name) if e.feature in live]
        lines.append(_row(form, f"explain {name}", len(live), time.perf_counter() - t0, s.usage, s.explained,
                          _malformed(rows)))  # fmt: skip
        print(lines[-1], flush=True)  # as it comes: a long run keeps what it measured
    if (
        scored == "lexical"
    ):  # offline explanations: the scorers' prompts get measured whatever the explainers parsed
        ExplainJob(
            store, PLANTED_SAE, ExplainConfig("lexical", negatives="RANDOM_NEGATIVE"), progress=False
        ).run(live)
    for scorer in ("detection", "fuzzing", "simulation", "complexity"):
        backends = score_backends(cfg, cache=StoreCache(store))
        t0 = time.perf_counter()
        run_scoring(store, PLANTED_SAE, ScoreConfig(scorer, "RANDOM_NEGATIVE"), backends, explainer=scored,
                    progress=False)  # fmt: skip
        seconds = time.perf_counter() - t0
        assert backends.llm_client is not None
        scores = store.scores(sae_id=PLANTED_SAE, scorer=scorer)
        ok = sum(1 for sc in scores if sc.status is Status.OK)
        lines.append(_row(form, f"score {scorer} ({scored})", len(live), seconds, backends.llm_client.ledger.total,
                          ok, _malformed(scores)))  # fmt: skip
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    """Start the server, explain and score a few features under each schema form, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--features", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=512, help="completion budget per request")
    ap.add_argument("--forms", default="json_object,none",
                    help="schema forms, comma-separated: json_object (llama-cpp-python's), none (free-form JSON)")  # fmt: skip
    ap.add_argument("--scored", default="oneshot", choices=("oneshot", "lexical"),
                    help="whose explanations the scorer rows score (lexical: offline, so every scorer prompt is "
                    "measured even when the explainers' answers never parse)")  # fmt: skip
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    folder = Path(tempfile.mkdtemp(prefix="llm-bench-"))
    live = [f for f in range(5) if f != 2][: args.features]  # feature 2 of the planted store never fires
    lines = ["| schema form | row | features | ok | calls | answers parsed | re-asks | wall s | ok per minute | "
             "calls / feature | prompt tokens / feature | completion tokens / feature | 1M features at the assumed "
             "price |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    with LocalLLMServer(ServerSettings(), run_dir=folder / "llm-server") as server:
        model = server.model
        for form in args.forms.split(","):
            lines += _form_rows(server, form, live, args.max_tokens, folder / form, args.scored)
    print(f"## LLM explainers and scorers on the real local model ({model}, 2 cores)\n")
    print("\n".join(lines))
    print(f"\nModel {model} on llama-cpp-python's server (context 8192, 1 thread per answer, 2 in flight); completion "
          f"budget {args.max_tokens}; tokens as the server counted them (the model's GGUF tokenizer). Answers parsed = "
          f"answers whose JSON parsed against the prompt's schema / all answers (each re-ask follows a malformed one; a "
          f"feature failed as malformed ended on one more). Cost column: assumed gpt-4o-mini price "
          f"${PRICE_IN_PER_M}/1M input, ${PRICE_OUT_PER_M}/1M output tokens (OpenAI pricing page, July 2024) applied "
          f"to these counts. Load average at start {load0:.1f}, at the end {os.getloadavg()[0]:.1f}.")  # fmt: skip


if __name__ == "__main__":
    main()
