"""ProxySPEX on SmolLM2 layer 3 (specs/attribution.md B.4 P3): a feature whose activation on " bank" rises with
"river" in context, its ("river", " bank") interaction, the R^2 table ProxySPEX vs Shapley vs Banzhaf, wall time.

    .venv/bin/python -m bench.interactions_bench                  # the attribution bench's SAE (trained on first use)
    .venv/bin/python -m bench.interactions_bench --sae runs/my-sae --json /tmp/inter.json

1. Contrast: the SAE's activation at the final " bank" of 8 river texts and 8 money texts; the feature with the
   largest mean(river) - mean(money) that fires on every river text is chosen.
2. On the river text where it fires hardest, two token games (mask: the library default, `auto` = the tokenizer's own
   unk, else the mean embedding; `--mask unk` = unk, else eos; `--mask mean`; forward stops at
   block 3; budget min(5000, max(1000, 16 n)); the reference 8 x 5-fold LightGBM grid unless --quick):
   - spec game: players are the tokens before " bank" (BOS and " bank" kept): the " river" singleton is what
     "river" adds given "bank";
   - with target: " bank" is a player too (its embedding masked, its position kept), so the ("river", " bank")
     Möbius term v(both) - v(river) - v(bank) + v(neither) is measured directly.
   Each reports R^2 on 1000 fresh uniform masks for ProxySPEX, Shapley (KernelSHAP at the same budget) and Banzhaf.
3. A summary table, one row per game (what `make bench` checks: the pair term > 0 is spec B.4 P3).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import torch

from bench.attribution_bench import HOOK, _load_sae
from sae_workbench.corpus import default_bos_id
from sae_workbench.evaluation.interactions import explain_game
from sae_workbench.evaluation.interactions.games import token_game
from sae_workbench.models import stop_layer

RIVER = [
    "We walked along the river and sat down on the bank",
    "The fisherman cast his line from the muddy river bank",
    "After the storm the river rose and flooded over its bank",
    "Ducks waddled out of the river and up the grassy bank",
    "The canoe drifted down the river until it hit the bank",
    "Willows grow thick along the river on the far bank",
    "The children skipped stones across the river from the bank",
    "Erosion from the fast river slowly wore away the bank",
]
MONEY = [
    "I deposited my salary and savings at the bank",
    "She needed cash, so she went to withdraw money from the bank",
    "The loan officer approved our mortgage at the bank",
    "He checked his account balance online with the bank",
    "Interest rates on savings were raised by the bank",
    "The robbers stole millions in cash from the bank",
    "My credit card was issued by the bank",
    "They opened a checking account at the local bank",
]
QUICK = {"max_depth": [3], "max_iter": [1000], "learning_rate": [0.1]}


def _tokens(model: Any, text: str) -> torch.Tensor:
    """The window BOS (the index's document separator) then the text's tokens, as the index sees a window start."""
    ids = model.tokenizer.encode(text, add_special_tokens=False)
    return torch.tensor([default_bos_id(model.tokenizer), *ids])


@torch.no_grad()
def _acts_last(model: Any, sae: Any, texts: list[str]) -> np.ndarray:
    """SAE activations (texts, d_sae) at each text's last token."""
    out = []
    for text in texts:
        _, cache = model.run_with_cache(
            _tokens(model, text)[None], names_filter=lambda k: k == HOOK, stop_at_layer=stop_layer([HOOK], 30)
        )
        out.append(sae.encode(cache[HOOK][0, -1:].to(sae.dtype))[0].float().numpy())
    return np.stack(out)


def _pick(model: Any, sae: Any) -> tuple[int, np.ndarray, np.ndarray]:
    """The feature firing on every river " bank" with the largest river - money gap; its activations."""
    river, money = _acts_last(model, sae, RIVER), _acts_last(model, sae, MONEY)
    gap = river.mean(0) - money.mean(0)
    gap[(river > 0).sum(0) < len(RIVER)] = -np.inf
    feature = int(np.argmax(gap))
    return feature, river[:, feature], money[:, feature]


def _term(result: Any, labels: tuple[str, ...]) -> float:
    """The Möbius value of the term whose players carry exactly `labels` (0 when ProxySPEX kept none)."""
    for t in result.top_terms:
        if tuple(t["labels"]) == labels:
            return float(t["value"])
    return 0.0


def main() -> None:
    """Pick the feature, run both games, print the tables."""
    from sae_workbench.models import load_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sae", default=None, help="SAELens folder of an SAE on blocks.3.hook_resid_post")
    ap.add_argument(
        "--quick", action="store_true", help="one LightGBM configuration instead of the 8 x 5-fold grid"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--mask",
        default="auto",
        help="auto (the library default), unk (tokenizer unk, else eos) or mean embedding",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = load_model("smollm2-135m")
    sae = _load_sae(model, args.sae)
    feature, river, money = _pick(model, sae)
    print(f"feature {feature}: activation on ' bank' river {river.mean():.3f} (min {river.min():.3f}) vs money "
          f"{money.mean():.3f} (max {money.max():.3f})")  # fmt: skip
    text = RIVER[int(np.argmax(river))]
    tokens_N = _tokens(model, text)
    print(f"text: {text!r} ({len(tokens_N)} tokens, activation {river.max():.3f})")
    grid = QUICK if args.quick else None
    rows: dict[str, Any] = {
        "feature": feature,
        "text": text,
        "river": river.tolist(),
        "money": money.tolist(),
    }
    summary: list[str] = []
    for name, include in (("spec game (target kept)", False), ("with target as a player", True)):
        game = token_game(model, sae, HOOK, tokens_N, feature, mask=args.mask, include_target=include)
        started, cpu = time.perf_counter(), time.process_time()
        result = explain_game(game, game.n, None, args.seed, game.labels, "FBII", grid)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        river = game.labels.index(" river")
        moebius = dict(result.moebius)
        print(f"\n### {name}: n = {game.n}, budget {result.budget}, {result.evaluations} forwards")
        print(
            f"wall {wall:.1f} s (forwards {result.game_s:.1f} s, the rest LightGBM + KernelSHAP), CPU {cpu:.1f} s"
        )
        print(f"v(all) {result.full_value:.3f}, v(none) {result.empty_value:.3f}; ' river' singleton "
              f"{moebius.get((river,), 0.0):+.3f}")  # fmt: skip
        out: dict[str, Any] = {}
        if include:
            bank = game.labels.index(" bank")
            pair = tuple(sorted((river, bank)))
            fbii = next((t["value"] for t in result.order2 if tuple(t["players"]) == pair), 0.0)
            # At full context the discrete second difference v(N) - v(N-r) - v(N-b) + v(N-r-b) is the sum of every
            # Möbius term holding both players: measured with 4 forwards, and read off ProxySPEX's sparse model.
            full = np.ones(game.n, bool)
            masks = np.array([full, full, full, full])
            masks[1, river] = masks[2, bank] = masks[3, river] = masks[3, bank] = False
            v = game(masks)
            measured = float(v[0] - v[1] - v[2] + v[3])
            sparse = sum(val for players, val in moebius.items() if river in players and bank in players)
            print(f"Möbius (' river', ' bank') pair term {moebius.get(pair, 0.0):+.3f}; FBII order 2 {fbii:+.3f}; "
                  f"in full context v(N)-v(N-r)-v(N-b)+v(N-r-b): measured {measured:+.3f}, ProxySPEX {sparse:+.3f}")  # fmt: skip
            out = {
                "pair": moebius.get(pair, 0.0),
                "fbii": fbii,
                "second_difference": measured,
                "sparse": sparse,
            }
        summary.append(
            f"| {name} | {args.mask} ({game.settings['mask']}) | {game.n} | {result.budget} | {result.evaluations} | "
            + (f"{out['pair']:+.3f} | {out['fbii']:+.3f}" if include else "– | –")
            + f" | {moebius.get((river,), 0.0):+.3f} | {result.r2['proxyspex']:.3f} | {result.r2['shapley']:.3f} | "
            f"{result.r2['banzhaf']:.3f} | {wall:.1f} | {cpu:.1f} |"
        )
        print("| method | test R^2 (1000 fresh masks) |\n|---|---|")
        for method, r2 in result.r2.items():
            print(f"| {method} | {r2:.3f} |")
        print("top terms:", [(t["labels"], round(t["value"], 3)) for t in result.top_terms[:5]])
        rows[name] = {**result.to_dict(), "cpu_s": cpu, **out}
    print("\n### Summary (spec B.4 P3)\n")
    print("| game | mask | players | budget | forwards | (' river', ' bank') Möbius | FBII order 2 | ' river' singleton "
          "| R² ProxySPEX | R² Shapley | R² Banzhaf | wall s | CPU s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(summary))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
