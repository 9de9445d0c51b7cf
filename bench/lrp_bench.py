"""Position-aware LRP vs AttnLRP vs gradient×input vs integrated gradients vs DePass on SmolLM2 layer 3 (spec
pe-lrp.md §3 and §6 P5, issue 35), on the same (feature, text) pairs as bench/attribution_bench.py, plus the speed row.

    .venv/bin/python -m bench.lrp_bench --pairs 50                 # the bench SAE of attribution_bench (trained once)
    .venv/bin/python -m bench.lrp_bench --pairs 10 --ig-steps 32 --json /tmp/lrp.json

Curves (spec §3, Bakish et al. 2025's perturbation protocol, on the feature's activation instead of a logit): the
tokens 1..t-1 are ranked by each method's signed score (BOS and the last token t always stay). At each fraction
f ∈ {0, 0.1, …, 1}:
- MERF insertion: only the top-f most relevant tokens are present, the others replaced by the filler token;
- LERF insertion: only the f least relevant tokens are present;
- pruning: the f tokens of least |relevance| are replaced (the reference's IMDB variant; with the signed order it
  uses for Wikipedia, pruning at f keeps exactly MERF's tokens at 1 − f, so its AUC would repeat MERF's).
Replacing (not deleting) keeps every position where it was, which matters for a positional attribution; the filler is
"#", the token the reference code uses for Llama-3 (eval_pert_arc.py:217-219; SmolLM2 has no UNK). Each point is
a'/a, the activation relative to the clean one; AUC is the trapezoid area over f (MERF ↑, LERF ↓, pruning ↑), AU-MSE
the area of (a'/a − 1)² (MERF and pruning ↓). Mean with a 95% interval (normal approximation) over pairs.

pa_lrp ranks by its pair map (token + position relevance of each position: replacing a token removes both);
pa_lrp:paper by the paper's absolute-value map (llama_engine.py:222-278; not conservative).
Speed: one 128-token text, one feature, layer 3, median of 3: pa_lrp against DePass tokens (softmax) in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.attribution_bench import HOOK, _acts_at, _ci, _load_sae, _windows, pick_pairs
from sae_workbench.evaluation.attribution import (
    TokenScores,
    depass_tokens,
    from_depass,
    grad_x_input,
    integrated_gradients,
    random_scores,
)
from sae_workbench.evaluation.attribution.pa_lrp import LrpAttribution, lrp_attribution

FRACTIONS = [k / 10 for k in range(11)]
CURVES = ("merf", "lerf", "prune")


def lrp_scores(r: LrpAttribution, method: str) -> TokenScores:
    """An LRP result as TokenScores: the pair map (token + position), or the paper's map for `...:paper`."""
    values = r.paper_map_N if method.endswith(":paper") else r.pair_scores_N
    return TokenScores(method, r.feature, r.position, values)


def spec_curves(
    model: Any, sae: Any, feature: int, tokens: torch.Tensor, scores: TokenScores, filler: int
) -> dict[str, list[float]]:
    """The MERF, LERF and pruning curves (activation relative to the clean one) over FRACTIONS."""
    t = tokens.numel() - 1
    cand = np.arange(1, t)
    s = np.asarray(scores.scores_N)[cand]
    desc = cand[np.argsort(-s, kind="stable")]
    asc = cand[np.argsort(s, kind="stable")]
    weakest = cand[np.argsort(np.abs(s), kind="stable")]
    seqs = []
    for curve in CURVES:
        for frac in FRACTIONS:
            k = round(frac * len(cand))
            seq = tokens.clone()
            if curve == "prune":
                seq[weakest[:k]] = filler
            else:
                present = set((desc if curve == "merf" else asc)[:k].tolist())
                seq[[i for i in cand.tolist() if i not in present]] = filler
            seqs.append(seq)
    clean = _acts_at(model, sae, [tokens], feature)[0]
    acts = _acts_at(model, sae, seqs, feature)
    n = len(FRACTIONS)
    return {c: [a / clean for a in acts[i * n : (i + 1) * n]] for i, c in enumerate(CURVES)}


def summarise(curves: dict[str, list[float]]) -> dict[str, float]:
    """AUC of each curve and AU-MSE of MERF and pruning (trapezoid over FRACTIONS)."""
    out = {f"{c}_auc": float(np.trapezoid(curves[c], FRACTIONS)) for c in CURVES}
    for c in ("merf", "prune"):
        out[f"{c}_aumse"] = float(np.trapezoid([(v - 1.0) ** 2 for v in curves[c]], FRACTIONS))
    return out


def time_128(model: Any, sae: Any) -> dict[str, float]:
    """Median wall seconds of 3 runs on one 128-token text (its last token's top feature): pa_lrp and DePass."""
    tokens = _windows(model, 1)[0]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens[None], names_filter=[HOOK], stop_at_layer=4)
        feature = int(sae.encode(cache[HOOK][0, -1][None])[0].argmax())
    runs: dict[str, Callable[[], Any]] = {
        "pa_lrp": lambda: lrp_attribution(model, sae, HOOK, tokens, feature, mode="pa_lrp"),
        "depass tokens:softmax": lambda: depass_tokens(model, sae, HOOK, tokens, feature),
    }
    out = {}
    for name, fn in runs.items():
        walls = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            walls.append(time.perf_counter() - start)
        out[name] = statistics.median(walls)
    return out


def main() -> None:
    """Run the §3 curves for every method over the pairs and the speed row; print Markdown tables."""
    from tqdm import tqdm

    from sae_workbench.models import load_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=50)
    ap.add_argument("--sae", default=None, help="SAELens folder of an SAE on blocks.3.hook_resid_post")
    ap.add_argument("--ig-steps", type=int, default=100)
    ap.add_argument("--json", default=None, help="also write every per-pair figure here")
    ap.add_argument("--no-timing", action="store_true", help="skip the 128-token speed row")
    ap.add_argument(
        "--methods", default=None, help="comma-separated subset (pa_lrp, attnlrp and grad_x_input always run)"
    )
    args = ap.parse_args()
    torch.set_num_threads(2)
    started = time.perf_counter()
    model = load_model("smollm2-135m")
    sae = _load_sae(model, args.sae)
    tokenizer = model.tokenizer
    assert tokenizer is not None, "the bench needs the model's tokenizer"
    filler = tokenizer.encode("#", add_special_tokens=False)
    assert len(filler) == 1, filler
    print(
        f"model + SAE ready in {time.perf_counter() - started:.0f} s (SAE d_sae={sae.cfg.d_sae}); filler {filler}"
    )
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    timing = {} if args.no_timing else time_128(model, sae)
    pairs = pick_pairs(model, sae, args.pairs)
    rng = np.random.default_rng(0)
    lrp_cache: dict[str, LrpAttribution] = {}

    def lrp(mode: str, method: str) -> Callable[[int, torch.Tensor], TokenScores]:
        def run(f: int, x: torch.Tensor) -> TokenScores:
            key = f"{mode}/{f}/{x.numel()}"
            if key not in lrp_cache:
                lrp_cache[key] = lrp_attribution(model, sae, HOOK, x, f, mode=mode)  # type: ignore[arg-type]
            return lrp_scores(lrp_cache[key], method)

        return run

    methods: dict[str, Callable[[int, torch.Tensor], TokenScores]] = {
        "pa_lrp": lrp("pa_lrp", "pa_lrp"),
        "pa_lrp:paper": lrp("pa_lrp", "pa_lrp:paper"),
        "attnlrp": lrp("attnlrp", "attnlrp"),
        "cp": lrp("cp", "cp"),
        "grad_x_input": lambda f, x: grad_x_input(model, sae, HOOK, x, f),
        "integrated_gradients": lambda f, x: integrated_gradients(
            model, sae, HOOK, x, f, steps=args.ig_steps
        ),
        "depass:softmax": lambda f, x: from_depass(depass_tokens(model, sae, HOOK, x, f)),
        "random": lambda f, x: random_scores(x, rng),
    }
    if args.methods is not None:
        wanted = {
            "pa_lrp",
            "attnlrp",
            "grad_x_input",
            *(m.strip() for m in args.methods.split(",") if m.strip()),
        }
        unknown = wanted - set(methods)
        if unknown:
            ap.error(f"unknown methods {sorted(unknown)}; choose from {sorted(methods)}")
        methods = {k: v for k, v in methods.items() if k in wanted}
    stats: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
    secs = dict.fromkeys(methods, 0.0)
    closure: list[float] = []
    per_pair = []
    for feature, tokens in tqdm(pairs, desc="pairs"):
        row: dict[str, Any] = {"feature": feature, "n_tokens": tokens.numel()}
        for name, method in methods.items():
            start = time.perf_counter()
            scores = method(feature, tokens)
            secs[name] += time.perf_counter() - start
            curves = spec_curves(model, sae, feature, tokens, scores, filler[0])
            for k, v in summarise(curves).items():
                stats[name].setdefault(k, []).append(v)
            row[name] = curves
        r = lrp_cache[f"pa_lrp/{feature}/{tokens.numel()}"]
        closure.append(abs(r.closure_error) / max(1.0, abs(r.target)))
        row["pa_lrp_residual"] = r.residual_terms() | {"target": r.target}
        per_pair.append(row)
        lrp_cache.clear()
    n = len(pairs)
    lengths = [p[1].numel() for p in pairs]
    print(
        f"\n### Spec §3 curves, {n} (feature, text) pairs at {HOOK}, texts {min(lengths)}-{max(lengths)} tokens"
    )
    print(
        f"(filler '#' = id {filler[0]}; IG {args.ig_steps} steps; pa_lrp closure error max {max(closure):.1e} rel)"
    )
    print(
        "\n| method | MERF AUC ↑ | MERF AU-MSE ↓ | LERF AUC ↓ | pruning AUC ↑ | pruning AU-MSE ↓ | s / pair |"
    )
    print("|---|---|---|---|---|---|---|")
    cols = ("merf_auc", "merf_aumse", "lerf_auc", "prune_auc", "prune_aumse")
    fmt = lambda v: _ci([100 * x for x in v])  # noqa: E731 - percent of the clean activation
    for name in methods:
        print(f"| {name} | " + " | ".join(fmt(stats[name][c]) for c in cols) + f" | {secs[name] / n:.2f} |")
    print("\n| pa_lrp − other (P5: ≥ 0 on the AUCs ↑, ≤ 0 on AU-MSE) | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for other in [
        m for m in ("grad_x_input", "attnlrp", "integrated_gradients", "depass:softmax") if m in methods
    ]:
        diffs = [fmt([a - b for a, b in zip(stats["pa_lrp"][c], stats[other][c], strict=True)]) for c in cols]
        print(f"| pa_lrp − {other} | " + " | ".join(diffs) + " |")
    if timing:
        print("\n### Speed: one 128-token text, one feature, layer 3, torch threads 2 (median of 3)\n")
        print(
            f"load average at the start: {load_before}; at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
        )
        print("| run | wall s | ratio to DePass |\n|---|---|---|")
        ref = timing["depass tokens:softmax"]
        for k, wall in timing.items():
            print(f"| {k} | {wall:.2f} | {wall / ref:.2f} |")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"pairs": per_pair, "timing": timing}, indent=1))


if __name__ == "__main__":
    main()
