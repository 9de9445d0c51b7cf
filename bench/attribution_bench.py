"""DePass vs baselines on SmolLM2 layer 3 (spec attribution.md A.5 D2 and D3) and the 128-token timing.

    .venv/bin/python -m bench.attribution_bench                 # 50 pairs, trains a small SAE once if none is given
    .venv/bin/python -m bench.attribution_bench --pairs 10 --sae runs/my-sae --json /tmp/attr.json

D2: for each (feature, text) pair (the feature active at the text's last position t) the tokens 1..t-1 are ranked by
each method; BOS and the last token are never removed (DePass evaluation code, arXiv 2510.18462). Deleting the top-k%
(k = 10..100%) tokens from the sequence (SmolLM2 has no mask token) gives the deletion curve, keeping only the top-k%
the insertion (keep-top) curve; each point is |a - a'| / a x 100 capped at 100, a = the SAE's activation at the last
token. AUC = the mean over the 10 points: higher is better for deletion, lower for insertion.
D3: zero DePass's top-3 heads (blocks <= 3) in hook_z and read the relative drop of the activation; compared with
AtP's top-3 (gradient x hook_z, the linear estimate of zeroing) and random 3 (mean of 10 draws).
Timing: DePass of one 128-token text for one feature at layer 3, median of 3, on torch's 2 threads.

Without --sae a TopK SAE (576 -> 2304, k 32) is trained on 190k tokens of the default corpus (otherwise the
settings of tests/sae/test_sae_quality_smollm2.py) and kept under $WORKBENCH_HOME/bench/attribution-sae for later runs. The pairs
come from windows after the ones it trained on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sae_workbench.evaluation.attribution import (
    MLP_RULES,
    TokenScores,
    attention_rollout,
    depass_components,
    depass_tokens,
    from_depass,
    grad_x_input,
    integrated_gradients,
    random_scores,
)
from sae_workbench.evaluation.attribution.readout import feature_readout

HOOK = "blocks.3.hook_resid_post"
LAST_BLOCK = 3
CONTEXT = 128
SHARD = 8192
N_SHARDS = 24  # the SAE trains on these windows (196k tokens); pairs come from later ones
FRACTIONS = [k / 10 for k in range(1, 11)]
N_RANDOM_HEADS = 10


def _train_sae(model: Any, folder: Path) -> None:
    """Cache 6 shards of layer-3 residuals from the default corpus and train a small TopK SAE into `folder`."""
    from sae_workbench.activation_cache.caching import cache_activations
    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.sae.data import cache_source
    from sae_workbench.sae.train import TrainConfig, train_sae

    with tempfile.TemporaryDirectory() as tmp:
        cache_activations(
            model, [HOOK], resolve_corpus("default"), Path(tmp) / "cache", n_tokens=SHARD * N_SHARDS,
            context_size=CONTEXT, shard_tokens=SHARD, progress=True,
        )  # fmt: skip
        cfg = TrainConfig(expansion=4, k=32, n_tokens=190_000, shuffle_chunks=4, log_every=20)
        result = train_sae(
            cache_source(Path(tmp) / "cache", HOOK), model.cfg.d_model, cfg, Path(tmp) / "sae",
            model_name="smollm2-135m", hook=HOOK, progress=True,
        )  # fmt: skip
        folder.parent.mkdir(parents=True, exist_ok=True)
        result.folder.rename(folder)


def _load_sae(model: Any, path: str | None) -> Any:
    """The SAE at `path`, or the bench's own (trained on first use)."""
    from sae_workbench.paths import home
    from sae_workbench.sae.io import load_sae

    folder = Path(path) if path else home() / "bench" / "attribution-sae"
    if path is None and not (folder / "cfg.json").exists():
        _train_sae(model, folder)
    return load_sae(folder).eval()


def _windows(model: Any, n: int) -> list[torch.Tensor]:
    """`n` 128-token windows of the default corpus after the SAE's training windows."""
    from sae_workbench.corpus import iter_windows, resolve_corpus

    start = SHARD * N_SHARDS // CONTEXT + 8
    out: list[torch.Tensor] = []
    for batch in iter_windows(
        resolve_corpus("default"), model.tokenizer, CONTEXT, start_window=start, decode=False
    ):
        out += [torch.from_numpy(row.astype(np.int64)) for row in batch.tokens_BT]
        if len(out) >= n:
            return out[:n]
    return out


@torch.no_grad()
def _acts_at(model: Any, sae: Any, seqs: list[torch.Tensor], feature: int) -> list[float]:
    """The SAE activation of `feature` at each sequence's last token (right-padded batch: causal, so exact)."""
    width = max(len(s) for s in seqs)
    batch = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        batch[i, : len(s)] = s
    _, cache = model.run_with_cache(batch, names_filter=[HOOK], stop_at_layer=LAST_BLOCK + 1)
    last = torch.tensor([len(s) - 1 for s in seqs])
    x_BD = cache[HOOK][torch.arange(len(seqs)), last]
    return sae.encode(x_BD)[:, feature].tolist()


def pick_pairs(model: Any, sae: Any, n_pairs: int, seed: int = 0) -> list[tuple[int, torch.Tensor]]:
    """(feature, text cut to end at t) pairs: a random position t in 16..64, a random one of its top-5 features."""
    rng = np.random.default_rng(seed)
    used: set[int] = set()
    pairs: list[tuple[int, torch.Tensor]] = []
    special = {int(model.tokenizer.bos_token_id), int(model.tokenizer.eos_token_id)}
    for tokens in _windows(model, 4 * n_pairs):
        if len(pairs) == n_pairs:
            break
        t = int(rng.integers(16, 65))
        if any(int(x) in special for x in tokens[1 : t + 1]):
            continue  # a document boundary inside the text
        with torch.no_grad():
            _, cache = model.run_with_cache(
                tokens[None, : t + 1], names_filter=[HOOK], stop_at_layer=LAST_BLOCK + 1
            )
            acts = sae.encode(cache[HOOK][0, t][None])[0]
        top = [int(f) for f in torch.topk(acts, 5).indices if acts[f] > 0 and int(f) not in used]
        if not top:
            continue
        feature = top[int(rng.integers(len(top)))]
        used.add(feature)
        pairs.append((feature, tokens[: t + 1].clone()))
    return pairs


def curves(
    model: Any, sae: Any, feature: int, tokens: torch.Tensor, scores: TokenScores
) -> tuple[list[float], list[float]]:
    """(deletion, insertion) relative-change curves over FRACTIONS for one method's ranking."""
    t = tokens.numel() - 1
    cand = np.arange(1, t)
    order = cand[np.argsort(-np.asarray(scores.scores_N)[cand], kind="stable")]
    seqs = []
    for keep_top in (False, True):
        for frac in FRACTIONS:
            top = set(order[: math.ceil(frac * len(order))].tolist())
            keep = [i for i in range(t + 1) if (i in top) == keep_top or i in (0, t)]
            seqs.append(tokens[keep])
    clean = _acts_at(model, sae, [tokens], feature)[0]
    changed = _acts_at(model, sae, seqs, feature)
    rel = [min(100.0, abs(clean - a) / clean * 100) for a in changed]
    return rel[: len(FRACTIONS)], rel[len(FRACTIONS) :]


def _ci(values: list[float]) -> str:
    """mean ± the 95% half-width (normal approximation) of a list of per-pair values."""
    m = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{m:.1f} ± {half:.1f}"


def _pre_with_heads_zeroed(
    model: Any, sae: Any, tokens: torch.Tensor, feature: int, heads_B: list[list[tuple[int, int]]]
) -> list[float]:
    """The feature's activation at the last token with each batch row's (layer, head) list zeroed in hook_z."""
    B = len(heads_B)

    def zero(layer: int) -> Callable[..., torch.Tensor]:
        def fn(z: torch.Tensor, hook: Any) -> torch.Tensor:
            z = z.clone()
            for b, heads in enumerate(heads_B):
                for ell, h in heads:
                    if ell == layer:
                        z[b, :, h] = 0.0
            return z

        return fn

    hooks = [(f"blocks.{ell}.attn.hook_z", zero(ell)) for ell in range(LAST_BLOCK + 1)]
    grabbed: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        model.run_with_hooks(
            tokens[None].expand(B, -1), fwd_hooks=[*hooks, (HOOK, lambda x, hook: grabbed.update(x=x))],
            stop_at_layer=LAST_BLOCK + 1,
        )  # fmt: skip
        return sae.encode(grabbed["x"][:, -1])[:, feature].tolist()


def atp_head_scores(model: Any, sae: Any, tokens: torch.Tensor, feature: int) -> dict[tuple[int, int], float]:
    """AtP: grad(pre) · z per head, summed over positions: the first-order drop from zeroing the head."""
    readout = feature_readout(sae, feature)
    zs: dict[int, torch.Tensor] = {}

    def keep(layer: int) -> Callable[..., None]:
        def fn(z: torch.Tensor, hook: Any) -> None:
            z.retain_grad()
            zs[layer] = z

        return fn

    grabbed: dict[str, torch.Tensor] = {}
    hooks = [(f"blocks.{ell}.attn.hook_z", keep(ell)) for ell in range(LAST_BLOCK + 1)]
    model.run_with_hooks(
        tokens[None],
        fwd_hooks=[*hooks, (HOOK, lambda x, hook: grabbed.update(x=x))],
        stop_at_layer=LAST_BLOCK + 1,
    )
    pre = readout.pre_activation_N(grabbed["x"][0, -1:].float())[0]
    pre.backward()
    out = {}
    for ell, z in zs.items():
        assert z.grad is not None
        per_head = (z.grad * z).sum(dim=(0, 1, 3)).detach()
        out.update({(ell, h): float(per_head[h]) for h in range(per_head.numel())})
    model.zero_grad(set_to_none=True)
    return out


def head_check(
    model: Any, sae: Any, feature: int, tokens: torch.Tensor, rng: np.random.Generator
) -> dict[str, float]:
    """Relative drop of the activation from zeroing 3 heads chosen by DePass, AtP and at random."""
    comp = depass_components(model, sae, HOOK, tokens, feature)
    depass = {(ell, h): s for ell, row in enumerate(comp.head_scores_LH) for h, s in enumerate(row)}
    atp = atp_head_scores(model, sae, tokens, feature)
    all_heads = sorted(depass)
    top3 = [sorted(all_heads, key=lambda k: -d[k])[:3] for d in (depass, atp)]
    rand = [
        [all_heads[i] for i in rng.choice(len(all_heads), 3, replace=False)] for _ in range(N_RANDOM_HEADS)
    ]
    acts = _pre_with_heads_zeroed(model, sae, tokens, feature, [[], *top3, *rand])
    clean = acts[0]
    drop = [(clean - a) / clean * 100 for a in acts[1:]]
    return {"depass": drop[0], "atp": drop[1], "random": statistics.fmean(drop[2:])}


def time_128(model: Any, sae: Any) -> dict[str, tuple[float, float]]:
    """Median (wall, process CPU) seconds of 3 DePass runs on one 128-token text, for its last token's top feature."""
    tokens = _windows(model, 1)[0]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens[None], names_filter=[HOOK], stop_at_layer=LAST_BLOCK + 1)
        feature = int(sae.encode(cache[HOOK][0, -1][None])[0].argmax())
    out = {}
    runs: dict[str, Callable[[], Any]] = {
        f"tokens:{rule}": (lambda rule=rule: depass_tokens(model, sae, HOOK, tokens, feature, rule=rule))
        for rule in MLP_RULES
    }
    runs["components:softmax"] = lambda: depass_components(model, sae, HOOK, tokens, feature)
    for name, fn in runs.items():
        walls, cpus = [], []
        for _ in range(3):
            start, cpu = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
        out[name] = (statistics.median(walls), statistics.median(cpus))
    return out


def _print_timing(timing: dict[str, tuple[float, float]], load_before: str) -> None:
    """The 128-token timing table."""
    print("\n### Timing, one 128-token text, one feature, layer 3, torch threads 2 (median of 3)\n")
    print(
        f"load average at the start: {load_before}; at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
    )
    print("| run | wall s | CPU s (both threads) |\n|---|---|---|")
    for k, (wall, cpu) in timing.items():
        print(f"| {k} | {wall:.2f} | {cpu:.2f} |")


def _print_heads(heads: dict[str, list[float]]) -> None:
    """The D3 table."""
    print(
        f"\n### D3 head check: relative drop of the activation (%) from zeroing 3 heads of blocks 0-{LAST_BLOCK}"
    )
    print("\n| heads zeroed | drop % (mean ± 95%) |\n|---|---|")
    for k, v in heads.items():
        print(
            f"| top-3 {k} | {_ci(v)} |"
            if k != "random"
            else f"| random 3 (mean of {N_RANDOM_HEADS}) | {_ci(v)} |"
        )
    diff = [a - b for a, b in zip(heads["depass"], heads["random"], strict=True)]
    print(f"| DePass − random | {_ci(diff)} |")


def main() -> None:
    """Run D2, D3 and the timing; print Markdown tables."""
    from tqdm import tqdm

    from sae_workbench.models import load_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=50)
    ap.add_argument("--sae", default=None, help="SAELens folder of an SAE on blocks.3.hook_resid_post")
    ap.add_argument("--ig-steps", type=int, default=100)
    ap.add_argument("--json", default=None, help="also write every per-pair figure here")
    ap.add_argument("--timing-only", action="store_true", help="only the 128-token timing (no D2/D3 pairs)")
    ap.add_argument(
        "--methods",
        default=None,
        help="comma-separated D2 methods (default: all but the bos_as_token variant); depass:softmax is always run. "
        "depass:softmax:bos_as_token is the softmax rule with the BOS rule off (what these windows, which start "
        "with <|endoftext|>, got before c7059de)",
    )
    ap.add_argument("--no-heads", action="store_true", help="skip D3 (the head check)")
    ap.add_argument("--no-timing", action="store_true", help="skip the 128-token timing")
    args = ap.parse_args()
    torch.set_num_threads(2)
    started = time.perf_counter()
    model = load_model("smollm2-135m")
    sae = _load_sae(model, args.sae)
    print(f"model + SAE ready in {time.perf_counter() - started:.0f} s (SAE d_sae={sae.cfg.d_sae})")
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    timing = {} if args.no_timing else time_128(model, sae)
    if args.timing_only:
        _print_timing(timing, load_before)
        return
    pairs = pick_pairs(model, sae, args.pairs)
    rng = np.random.default_rng(0)
    methods: dict[str, Callable[[int, torch.Tensor], TokenScores]] = {
        **{
            f"depass:{rule}": (
                lambda f, x, rule=rule: from_depass(depass_tokens(model, sae, HOOK, x, f, rule=rule))
            )
            for rule in MLP_RULES
        },
        "grad_x_input": lambda f, x: grad_x_input(model, sae, HOOK, x, f),
        "integrated_gradients": lambda f, x: integrated_gradients(
            model, sae, HOOK, x, f, steps=args.ig_steps
        ),
        "attention_rollout": lambda f, x: attention_rollout(model, HOOK, x),
        "random": lambda f, x: random_scores(x, rng),
        "depass:softmax:bos_as_token": lambda f, x: from_depass(
            depass_tokens(model, sae, HOOK, x, f, ignore_bos=False)
        ),
    }
    if args.methods is None:
        methods.pop("depass:softmax:bos_as_token")
    else:
        wanted = {"depass:softmax", *(m.strip() for m in args.methods.split(",") if m.strip())}
        unknown = wanted - set(methods)
        if unknown:
            ap.error(f"unknown methods {sorted(unknown)}; choose from {sorted(methods)}")
        methods = {k: v for k, v in methods.items() if k in wanted}
    dele: dict[str, list[float]] = {m: [] for m in methods}
    ins: dict[str, list[float]] = {m: [] for m in methods}
    secs: dict[str, float] = dict.fromkeys(methods, 0.0)
    heads: dict[str, list[float]] = {"depass": [], "atp": [], "random": []}
    per_pair = []
    for feature, tokens in tqdm(pairs, desc="pairs"):
        row: dict[str, Any] = {"feature": feature, "n_tokens": tokens.numel()}
        for name, method in methods.items():
            start = time.perf_counter()
            scores = method(feature, tokens)
            secs[name] += time.perf_counter() - start
            d, i = curves(model, sae, feature, tokens, scores)
            dele[name].append(statistics.fmean(d))
            ins[name].append(statistics.fmean(i))
            row[name] = {"deletion": d, "insertion": i}
        if not args.no_heads:
            hc = head_check(model, sae, feature, tokens, rng)
            for k, v in hc.items():
                heads[k].append(v)
            row["heads"] = hc
        per_pair.append(row)
    n = len(pairs)
    lengths = [p[1].numel() for p in pairs]
    print(
        f"\n### D2 deletion / insertion, {n} (feature, text) pairs at {HOOK}, texts {min(lengths)}-{max(lengths)} tokens"
    )
    print("\n| method | deletion AUC ↑ | insertion AUC ↓ | DePass(softmax) − method, deletion | s / pair |")
    print("|---|---|---|---|---|")
    ref = dele["depass:softmax"]
    for name in methods:
        diff = [a - b for a, b in zip(ref, dele[name], strict=True)]
        print(
            f"| {name} | {_ci(dele[name])} | {_ci(ins[name])} | {_ci(diff) if name != 'depass:softmax' else '—'} | {secs[name] / n:.2f} |"
        )
    if not args.no_heads:
        _print_heads(heads)
    if timing:
        _print_timing(timing, load_before)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"pairs": per_pair, "timing": timing}, indent=1))


if __name__ == "__main__":
    main()
