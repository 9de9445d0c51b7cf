"""`workbench absorption`: the feature absorption eval (first-letter task) or the toy model.

    workbench absorption --toy
    workbench absorption --sae runs/topk-8x --store runs/wb.duckdb --json runs/absorption.json
    workbench absorption --sae runs/topk-8x --preset paper      # SAEBench's settings (10 ICL examples)

Residuals at the word tokens are cached on disk by model, layer and settings (a killed run resumes from the last
saved chunk); with --store, a finished result for the same SAE and settings is reused unless --force.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import typer

from sae_workbench import defaults
from sae_workbench.cli import loaders, options
from sae_workbench.errors import WorkbenchError

log = logging.getLogger(__name__)


class AbsorptionCLIError(WorkbenchError):
    """Bad combination of absorption command options."""


def _print_toy(seed: int) -> None:
    """Run the three toy variants and print what they show."""
    from sae_workbench.evaluation.absorption.toy import run_toy_variants

    typer.echo("toy model (Chanin et al. 2409.14507): 4 orthogonal features in R^50, p(f0)=0.25, others 0.05")
    typer.echo(
        f"{'variant':20s} {'absorption':>10s} {'full':>6s} {'enc(f0)·(f0−f1)':>16s} {'dec(f1)·(f0+f1)':>16s}"
    )
    for name, r in run_toy_variants(seed).items():
        typer.echo(
            f"{name:20s} {r.absorption_fraction:10.3f} {r.full_absorption_rate:6.3f} "
            f"{r.parent_encoder_cos_f0_minus_f1:16.3f} {r.child_decoder_cos_f0_plus_f1:16.3f}"
        )
    typer.echo(
        "expected: independent ≈ 0; hierarchical ≈ P(f1|f0) = 0.2 with enc ≈ f0−f1, dec ≈ f0+f1; tied ≈ 0"
    )


def _layer_for(sae: Any, layer: int | None) -> int:
    """The residual layer to probe: --layer, else the SAE's own hook layer, else the default hook's (SmolLM2: 3)."""
    from sae_workbench.models import hook_layer

    hook = getattr(getattr(sae.cfg, "metadata", None), "hook_name", None)
    if layer is not None:
        return layer
    if hook:
        if not hook.endswith("hook_resid_post"):
            raise AbsorptionCLIError(
                f"the SAE reads {hook}; the first-letter probes read the residual stream (hook_resid_post)."
            )
        return hook_layer(hook)
    return hook_layer(defaults.DEFAULT_HOOK)


def config_key(eval_config: dict[str, Any]) -> str:
    """Short hash of an eval config, so a store keeps one result per SAE and settings."""
    return hashlib.sha256(json.dumps(eval_config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def absorption(
    toy: bool = typer.Option(False, "--toy", help="Run the synthetic toy model instead of a real SAE."),
    sae: options.OptionalSaePath = None,
    model: options.SaeModel = None,
    layer: int | None = typer.Option(
        None, help="Residual layer to probe (default: the SAE's hook layer, else the default hook's)."
    ),
    store: options.OptionalStore = None,
    json_out: Path | None = typer.Option(None, "--json", help="Also write SAEBench-style eval JSON here."),
    max_words: int | None = typer.Option(
        None, help="Cap on first-letter words (default: all, ~47k for SmolLM2)."
    ),
    preset: str = typer.Option(
        "default",
        help="default (5 ICL examples, to halve CPU time) or paper (SAEBench's settings throughout: 10 ICL "
        "examples). Both train the letter probes at SAEBench's batch 64. Options given below override the "
        "preset's values; the preset is recorded.",
    ),
    n_icl_examples: int | None = typer.Option(
        None, help="In-context examples per prompt (default: the preset's; default 5, paper/SAEBench 10)."
    ),
    min_letters: int | None = typer.Option(
        None, help="Refuse unless this many letter probes pass --min-probe-f1 (default: SAEBench's 20)."
    ),
    min_probe_f1: float | None = typer.Option(
        None, help="A letter counts when its probe's F1 exceeds this (default: SAEBench's 0.6)."
    ),
    dtype: str = typer.Option(
        "float32", help="Model dtype (bfloat16 is ~2.5× faster on CPU, 0.8% different)."
    ),
    seed: options.OptionalSeed = None,
    force: bool = typer.Option(False, help="Recompute even if the store already has this result."),
    force_model: options.ForceModel = False,
    progress: options.Progress = True,
) -> None:
    """Measure feature absorption (Chanin et al. 2409.14507) with SAEBench's metrics, or run the toy model."""
    if toy:
        _print_toy(defaults.DEFAULT_SEED if seed is None else seed)
        return
    if sae is None:
        raise AbsorptionCLIError(
            "pass --sae PATH (an SAE trained on --model), or --toy for the synthetic toy model."
        )
    from sae_workbench.evaluation.absorption.eval import AbsorptionConfig, run_absorption
    from sae_workbench.evaluation.absorption.saebench import (
        EVAL_TYPE_ABSORPTION,
        absorption_eval_config,
        absorption_eval_json,
        word_token_offset,
        write_eval_json,
    )
    from sae_workbench.models import load_model
    from sae_workbench.sae.io import load_sae, sae_id_of

    # Settings not given keep the preset's values (SAEBench's, cited in the configs).
    preset_cfg = AbsorptionConfig.named(preset)
    step = loaders.step_lines(progress)
    step(f"loading SAE {sae}")
    loaded = load_sae(sae)
    model = loaders.model_for_sae(loaded, model, step)
    probing = replace(preset_cfg.probing, layer=_layer_for(loaded, layer), max_words=max_words)
    probing = replace(
        probing,
        n_icl_examples=probing.n_icl_examples if n_icl_examples is None else n_icl_examples,
        seed=probing.seed if seed is None else seed,
    )
    cfg = replace(preset_cfg, probing=probing)
    cfg = replace(
        cfg,
        min_letters=cfg.min_letters if min_letters is None else min_letters,
        min_probe_f1=cfg.min_probe_f1 if min_probe_f1 is None else min_probe_f1,
    )
    hook = cfg.probing.hook()
    sae_id = sae_id_of(loaded, model, hook, sae)
    key = config_key(absorption_eval_config(cfg, model, llm_dtype=dtype))
    db = None
    if store is not None:
        from sae_workbench.store import Store

        db = Store.open(store)
        done = [
            e for e in db.evals(sae_id, EVAL_TYPE_ABSORPTION) if e.eval.get("workbench_config_key") == key
        ]
        if done and not force:
            m = done[-1].eval["eval_result_metrics"]["mean"]
            typer.echo(f"already in {store} (eval {done[-1].id}); --force recomputes. {json.dumps(m)}")
            return
    step(f"loading model {model} ({dtype})")
    subject = load_model(model, dtype=dtype)
    step(f"first-letter probes at {hook}, then the SAE's k-sparse probes")
    result = run_absorption(subject, loaded, cfg, force_model=force_model, progress=progress)
    doc = absorption_eval_json(
        result,
        cfg,
        sae_id=sae_id,
        model_name=model,
        llm_dtype=dtype,
        prompt_token_pos=word_token_offset(subject.tokenizer, cfg.probing.template),
        sae_cfg=loaded.cfg.to_dict(),
    )
    doc["workbench_config_key"] = key
    doc["workbench_preset"] = cfg.preset
    if db is not None:
        db.register_sae(
            sae_id, model, hook, int(loaded.cfg.d_in), int(loaded.cfg.d_sae), loaded.cfg.to_dict()
        )
        eval_id = db.add_eval(sae_id, EVAL_TYPE_ABSORPTION, doc)
        typer.echo(f"stored as eval {eval_id} for SAE {sae_id} in {store}")
    if json_out is not None:
        write_eval_json(doc, json_out)
        typer.echo(f"wrote {json_out}")
    m = result.metrics
    typer.echo(
        f"mean_absorption_fraction_score={m.mean_absorption_fraction_score:.4f} "
        f"mean_full_absorption_score={m.mean_full_absorption_score:.4f} "
        f"mean_num_split_features={m.mean_num_split_features:.2f} "
        f"({sum(x.included for x in result.letters)}/26 letters with probe F1 > {cfg.min_probe_f1})"
    )
    top = result.absorbing_features[:5]
    for f in top:
        typer.echo(
            f"  feature {f.feature_id} absorbs '{f.letter}' on {f.num_tokens} tokens, e.g. {f.tokens[:5]}"
        )
    log.debug("config %s", asdict(cfg))
