"""`workbench absorption`: the feature absorption eval (first-letter task) or the toy model.

    workbench absorption --toy
    workbench absorption --sae runs/topk-8x --store runs/wb.duckdb --json runs/absorption.json
    workbench absorption --sae runs/topk-8x --preset paper      # SAEBench's settings (10 ICL examples)
    workbench absorption --sae runs/topk-8x --store runs/wb.duckdb --seeds 0,1,2 --json runs/abs/absorption.json

--seeds runs the eval once per seed (each stored as its own run; a rerun resumes seed by seed) and summarises per
letter and per SAE with 95% Student-t intervals over the seeds (evaluation/absorption/seeds.py says what a seed
changes); the summary is stored as eval type absorption_first_letter_seeds and written to absorption-seeds.json in
--json's folder, beside one SAEBench document per seed (absorption-seed0.json, ...).

Residuals at the word tokens are cached on disk by model, layer and settings (a killed run resumes from the last
saved chunk); with --store, a finished result for the same SAE and settings is reused unless --force.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sae_workbench import defaults
from sae_workbench.cli import loaders, options
from sae_workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from sae_workbench.evaluation.absorption.eval import AbsorptionConfig
    from sae_workbench.store import EvalRecord, Store

log = logging.getLogger(__name__)

SEEDS_JSON = "absorption-seeds.json"
"""File name of the summary over seeds, written in --json's folder."""


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


def parse_seeds(text: str) -> list[int]:
    """'0,1,2' → [0, 1, 2]; at least two distinct integers (one seed has no spread to report)."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise AbsorptionCLIError(
            f"--seeds takes integers separated by commas, e.g. 0,1,2; got {text!r}"
        ) from None
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise AbsorptionCLIError(f"--seeds needs at least two distinct seeds, e.g. 0,1,2; got {text!r}")
    return seeds


def _stored(db: Store | None, sae_id: str, key: str, eval_type: str | None = None) -> EvalRecord | None:
    """The latest stored absorption eval of this SAE with this config key, or None."""
    from sae_workbench.evaluation.absorption.saebench import EVAL_TYPE_ABSORPTION

    if db is None:
        return None
    done = [
        e
        for e in db.evals(sae_id, eval_type or EVAL_TYPE_ABSORPTION)
        if e.eval.get("workbench_config_key") == key
    ]
    return done[-1] if done else None


class _Run:
    """One SAE's absorption runs: the settings shared by every seed, and the subject model, loaded once if needed."""

    def __init__(
        self, cfg: AbsorptionConfig, sae: Any, sae_id: str, model: str, dtype: str, step: Any
    ) -> None:
        """Keep what every seed's run needs; the subject model loads on the first `compute`."""
        self.cfg, self.sae, self.sae_id, self.model, self.dtype, self.step = (
            cfg,
            sae,
            sae_id,
            model,
            dtype,
            step,
        )
        self._subject: Any = None

    def compute(
        self, cfg: AbsorptionConfig, db: Store | None, force_model: bool, progress: bool
    ) -> tuple[dict[str, Any], int | None]:
        """Run the eval with `cfg`, return its SAEBench document and its store id (stored when `db` is given)."""
        from sae_workbench.evaluation.absorption.eval import run_absorption
        from sae_workbench.evaluation.absorption.saebench import (
            EVAL_TYPE_ABSORPTION,
            absorption_eval_config,
            absorption_eval_json,
            word_token_offset,
        )
        from sae_workbench.models import load_model

        if self._subject is None:
            self.step(f"loading model {self.model} ({self.dtype})")
            self._subject = load_model(self.model, dtype=self.dtype)
        self.step(f"first-letter probes at {cfg.probing.hook()}, then the SAE's k-sparse probes")
        result = run_absorption(self._subject, self.sae, cfg, force_model=force_model, progress=progress)
        doc = absorption_eval_json(
            result,
            cfg,
            sae_id=self.sae_id,
            model_name=self.model,
            llm_dtype=self.dtype,
            prompt_token_pos=word_token_offset(self._subject.tokenizer, cfg.probing.template),
            sae_cfg=self.sae.cfg.to_dict(),
        )
        doc["workbench_config_key"] = config_key(
            absorption_eval_config(cfg, self.model, llm_dtype=self.dtype)
        )
        doc["workbench_preset"] = cfg.preset
        return doc, self.store(db, EVAL_TYPE_ABSORPTION, doc)

    def store(self, db: Store | None, eval_type: str, doc: dict[str, Any]) -> int | None:
        """Register the SAE and add `doc` to the store; None without a store."""
        if db is None:
            return None
        c = self.sae.cfg
        db.register_sae(
            self.sae_id, self.model, self.cfg.probing.hook(), int(c.d_in), int(c.d_sae), c.to_dict()
        )
        return db.add_eval(self.sae_id, eval_type, doc)

    @staticmethod
    def write_json(doc: dict[str, Any], path: Path) -> None:
        """Write an eval document and say where."""
        from sae_workbench.evaluation.absorption.saebench import write_eval_json

        write_eval_json(doc, path)
        typer.echo(f"wrote {path}")


def _print_result(doc: dict[str, Any]) -> None:
    """A single run's SAE-level metrics and its top absorbing features, from its document."""
    m = doc["eval_result_metrics"]["mean"]
    typer.echo(
        f"mean_absorption_fraction_score={m['mean_absorption_fraction_score']:.4f} "
        f"mean_full_absorption_score={m['mean_full_absorption_score']:.4f} "
        f"mean_num_split_features={m['mean_num_split_features']:.2f} "
        f"({len(doc['eval_result_details'])}/26 letters with probe F1 > {doc['eval_config']['min_GT_probe_f1']})"
    )
    for f in doc["eval_result_unstructured"]["absorbing_features"][:5]:
        typer.echo(
            f"  feature {f['feature_id']} absorbs '{f['letter']}' on {f['num_tokens']} tokens, e.g. {f['tokens'][:5]}"
        )


def _run_seeds(
    run: _Run,
    seeds: list[int],
    db: Store | None,
    store: Path | None,
    json_out: Path | None,
    force: bool,
    force_model: bool,
    progress: bool,
) -> None:
    """Run (or take from the store) one absorption eval per seed, then summarise them with intervals over seeds."""
    from sae_workbench.evaluation.absorption.saebench import (
        EVAL_TYPE_ABSORPTION_SEEDS,
        absorption_eval_config,
        absorption_seeds_config,
        absorption_seeds_json,
        letters_from_eval_json,
    )
    from sae_workbench.evaluation.absorption.seeds import seed_spread, spread_table

    docs: dict[int, dict[str, Any]] = {}
    eval_ids: dict[int, int | None] = {}
    for s in seeds:
        cfg = replace(run.cfg, probing=replace(run.cfg.probing, seed=s))
        key = config_key(absorption_eval_config(cfg, run.model, llm_dtype=run.dtype))
        done = None if force else _stored(db, run.sae_id, key)
        if done is not None:
            docs[s], eval_ids[s] = done.eval, done.id
            typer.echo(f"seed {s}: already in {store} (eval {done.id})")
        else:
            docs[s], eval_ids[s] = run.compute(cfg, db, force_model, progress)
            where = f"stored as eval {eval_ids[s]}" if db is not None else "not stored (no --store)"
            m = docs[s]["eval_result_metrics"]["mean"]
            typer.echo(
                f"seed {s}: {where}; mean_absorption_fraction_score={m['mean_absorption_fraction_score']:.4f}"
            )
        if json_out is not None:
            run.write_json(
                docs[s], json_out.with_name(f"{json_out.stem}-seed{s}{json_out.suffix or '.json'}")
            )
    spread = seed_spread({s: letters_from_eval_json(doc) for s, doc in docs.items()})
    summary_key = config_key(absorption_seeds_config(run.cfg, run.model, seeds, llm_dtype=run.dtype))
    summary = absorption_seeds_json(
        spread, run.cfg, sae_id=run.sae_id, model_name=run.model, llm_dtype=run.dtype, eval_ids=eval_ids,
        sae_cfg=run.sae.cfg.to_dict(),
    )  # fmt: skip
    summary["workbench_config_key"] = summary_key
    summary["workbench_preset"] = run.cfg.preset
    previous = _stored(db, run.sae_id, summary_key, EVAL_TYPE_ABSORPTION_SEEDS)
    if (
        previous is not None
        and previous.eval["eval_result_unstructured"] == summary["eval_result_unstructured"]
    ):
        summary = previous.eval  # same seeds' runs: the stored summary stands
        typer.echo(f"summary already in {store} (eval {previous.id})")
    else:
        summary_id = run.store(db, EVAL_TYPE_ABSORPTION_SEEDS, summary)
        if summary_id is not None:
            typer.echo(f"summary stored as eval {summary_id} ({EVAL_TYPE_ABSORPTION_SEEDS}) in {store}")
    if json_out is not None:
        run.write_json(summary, json_out.parent / SEEDS_JSON)
    for line in spread_table(spread):
        typer.echo(line)


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
        "float32",
        help="Model dtype. bfloat16 (0.8% different) is ~2.5× faster on a CPU with native bf16 (avx512_bf16, AMX) "
        "and far slower on one without.",
    ),
    seed: options.OptionalSeed = None,
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds",
            help="Run once per seed, e.g. 0,1,2 (instead of --seed), then summarise: per letter and SAE-level "
            "means with 95% Student-t intervals over the seeds. Each seed is stored as its own run (a rerun "
            "resumes seed by seed); the summary goes to the store and to absorption-seeds.json beside --json.",
        ),
    ] = None,
    force: bool = typer.Option(False, help="Recompute even if the store already has this result."),
    force_model: options.ForceModel = False,
    progress: options.Progress = True,
) -> None:
    """Measure feature absorption (Chanin et al. 2409.14507) with SAEBench's metrics, or run the toy model."""
    seed_list = None if seeds is None else parse_seeds(seeds)
    if seed_list is not None and (seed is not None or toy):
        raise AbsorptionCLIError(
            "--seeds runs the real eval once per seed; do not combine it with --seed or --toy."
        )
    if toy:
        _print_toy(defaults.DEFAULT_SEED if seed is None else seed)
        return
    if sae is None:
        raise AbsorptionCLIError(
            "pass --sae PATH (an SAE trained on --model), or --toy for the synthetic toy model."
        )
    from sae_workbench.evaluation.absorption.eval import AbsorptionConfig
    from sae_workbench.evaluation.absorption.saebench import absorption_eval_config
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
    run = _Run(cfg, loaded, sae_id_of(loaded, model, cfg.probing.hook(), sae), model, dtype, step)
    db = None
    if store is not None:
        from sae_workbench.store import Store

        db = Store.open(store)
    if seed_list is None:
        done = (
            None
            if force
            else _stored(db, run.sae_id, config_key(absorption_eval_config(cfg, model, llm_dtype=dtype)))
        )
        if done is not None:
            m = done.eval["eval_result_metrics"]["mean"]
            typer.echo(f"already in {store} (eval {done.id}); --force recomputes. {json.dumps(m)}")
            return
        doc, eval_id = run.compute(cfg, db, force_model, progress)
        if db is not None:
            typer.echo(f"stored as eval {eval_id} for SAE {run.sae_id} in {store}")
        if json_out is not None:
            run.write_json(doc, json_out)
        _print_result(doc)
        log.debug("config %s", asdict(cfg))
        return
    _run_seeds(run, seed_list, db, store, json_out, force, force_model, progress)
