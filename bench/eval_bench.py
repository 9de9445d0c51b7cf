"""Evaluation benchmarks. Absorption part: wall time of the absorption eval on SmolLM2 + a 4608-feature SAE.

    .venv/bin/python -m bench.eval_bench absorption --max-words 24000            # random TopK SAE (576→4608, k=32)
    .venv/bin/python -m bench.eval_bench absorption --sae runs/my-sae            # a trained SAELens folder

Stages are timed separately; the baseline row is SAEBench's way of reading the residual (right-padded batches of
prompts, a forward through every layer) on a subsample of the same prompts, measured in the same run, so the
collection speed-up is a ratio and not an absolute number (this machine is shared; see design.md).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from dataclasses import replace

import torch

from sae_workbench.evaluation.absorption import eval as ab
from sae_workbench.evaluation.absorption import probes as pr


def _random_topk_sae(d_in: int, hook: str, model_name: str, seed: int = 0) -> object:
    """A randomly initialised sae-lens TopK SAE (576→4608, k=32), the shape the workbench trains by default."""
    from sae_lens import SAE, TopKSAEConfig

    torch.manual_seed(seed)
    cfg = TopKSAEConfig(d_in=d_in, d_sae=8 * d_in, k=32)
    cfg.metadata.hook_name = hook
    cfg.metadata.model_name = model_name
    return SAE.from_dict(cfg.to_dict())


def _saebench_style_seconds(model: object, acts_cfg: pr.ProbingConfig, n: int) -> tuple[float, float]:
    """(seconds, seconds of ours) to read n prompts: right-padded full forwards vs length-grouped stop_at_layer."""
    from sae_workbench.corpus import default_bos_id

    tok = model.tokenizer  # type: ignore[attr-defined]
    vocab = pr.alphabetic_vocab(tok)
    words = random.Random(0).sample(vocab, n)
    ids, positions, _ = pr._prompts(tok, words, acts_cfg, default_bos_id(tok), random.Random(1))
    hook = acts_cfg.hook()
    started = time.perf_counter()
    with torch.no_grad():
        for s in range(0, n, acts_cfg.batch_size):
            rows = ids[s : s + acts_cfg.batch_size]
            width = max(len(r) for r in rows)
            padded = torch.tensor([r + [0] * (width - len(r)) for r in rows])
            model.run_with_cache(padded, names_filter=hook)  # type: ignore[attr-defined]
    theirs = time.perf_counter() - started
    started = time.perf_counter()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        pr._read_resid(model, ids, positions, acts_cfg, Path(tmp), "bench")
    return theirs, time.perf_counter() - started


def bench_absorption(args: argparse.Namespace) -> None:
    """Time each stage of the absorption eval and print a Markdown table."""
    from sae_workbench.models import load_model

    torch.set_num_threads(args.threads)
    t0, c0 = time.perf_counter(), time.process_time()
    model = load_model(args.model)
    t_load, c_load = time.perf_counter() - t0, time.process_time() - c0
    cfg = ab.AbsorptionConfig(probing=pr.ProbingConfig(layer=args.layer, max_words=args.max_words))
    hook = cfg.probing.hook()
    if args.sae:
        from sae_workbench.sae.io import load_sae

        sae, sae_desc = load_sae(args.sae), f"trained SAE {args.sae}"
    else:
        sae, sae_desc = (
            _random_topk_sae(model.cfg.d_model, hook, model.cfg.model_name),
            "random TopK 576→4608 k=32",
        )
    rows: list[tuple[str, float, float]] = [("load model", t_load, c_load)]
    # The eval keeps collected residuals on disk (under $WORKBENCH_HOME) and a rerun loads them: collect into a
    # fresh home so the figure is a first run's, then time the reload from it on its own row (not in the total).
    with tempfile.TemporaryDirectory(prefix="eval-bench-home-") as home:
        previous = os.environ.get("WORKBENCH_HOME")
        os.environ["WORKBENCH_HOME"] = home
        try:
            t, c = time.perf_counter(), time.process_time()
            acts = pr.collect_probe_activations(model, cfg.probing)
            name = f"collect residuals ({len(acts.train_words)}+{len(acts.test_words)} prompts), first run"
            rows.append((name, time.perf_counter() - t, time.process_time() - c))
            t, c = time.perf_counter(), time.process_time()
            pr.collect_probe_activations(model, cfg.probing)
            reload = (time.perf_counter() - t, time.process_time() - c)
        finally:
            if previous is None:
                del os.environ["WORKBENCH_HOME"]
            else:
                os.environ["WORKBENCH_HOME"] = previous
    t, c = time.perf_counter(), time.process_time()
    try:
        result = ab.evaluate_absorption(sae, acts, cfg)
    except ab.ProbeTooWeakError as err:
        print(f"refused: {err}")
        result = ab.evaluate_absorption(sae, acts, replace(cfg, min_letters=0))
    name = "26 probes + SAE encode + k-sparse probing + scoring"
    rows.append((name, time.perf_counter() - t, time.process_time() - c))
    total = sum(s for _, s, _ in rows)
    print(f"\nmodel {args.model}, layer {args.layer}, {sae_desc}, {args.threads} threads")
    f1s = [x.probe_f1 for x in result.letters]
    print(f"probe F1 > 0.6: {sum(f > 0.6 for f in f1s)}/26 (min {min(f1s):.2f}, max {max(f1s):.2f})")
    m = result.metrics
    print(
        f"mean_absorption_fraction_score={m.mean_absorption_fraction_score:.3f} "
        f"mean_full_absorption_score={m.mean_full_absorption_score:.3f} mean_num_split_features={m.mean_num_split_features:.2f}\n"
    )
    print("| stage | wall s | CPU s (all threads) | share of wall |\n|---|---|---|---|")
    for name, s, cpu in rows:
        print(f"| {name} | {s:.1f} | {cpu:.1f} | {s / total:.2f} |")
    print(f"| total | {total:.1f} | {sum(c for _, _, c in rows):.1f} | 1.00 |")
    print(f"| (a rerun: residuals loaded from the on-disk cache instead of collected) | {reload[0]:.1f} | "
          f"{reload[1]:.1f} | — |")  # fmt: skip
    if args.baseline_prompts:
        theirs, ours = _saebench_style_seconds(model, cfg.probing, args.baseline_prompts)
        print(
            f"\n| residual collection, {args.baseline_prompts} prompts | seconds | ratio vs SAEBench-style |\n|---|---|---|"
        )
        print(f"| SAEBench-style: right-padded, all layers (baseline) | {theirs:.1f} | 1.00 |")
        print(
            f"| ours: grouped by length, stop_at_layer={cfg.probing.layer + 1} | {ours:.1f} | {ours / theirs:.2f} |"
        )


def main() -> None:
    """Parse arguments and run the chosen benchmark."""
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="bench", required=True)
    p = sub.add_parser("absorption", help="absorption eval wall time")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--layer", type=int, default=3)
    p.add_argument("--sae", default=None, help="SAE folder; default: a random TopK SAE")
    p.add_argument("--max-words", type=int, default=20000)
    p.add_argument("--baseline-prompts", type=int, default=512)
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args()
    if args.bench == "absorption":
        bench_absorption(args)


if __name__ == "__main__":
    main()
