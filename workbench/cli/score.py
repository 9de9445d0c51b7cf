"""`workbench score` and `workbench report`: score stored explanations, and compare explainers × scorers.

    workbench score --store runs/store.duckdb --sae <id> --scorer simulation --negatives similar_negative
    workbench score --store S --sae ID --scorer detection --negatives random --llm-model gpt-4o-mini
    workbench score --store S --sae ID --scorer cosy --sae-path runs/sae   # offline corpus-rule-composer generator
    workbench score --store S --sae ID --scorer cosy --sae-path runs/sae --llm-model M --preset paper  # PRISM's
    workbench score --store S --sae ID --scorer polysemanticity            # PRISM: descriptions vs random baseline
    workbench score --store S --sae ID --scorer complexity --llm-model M   # an LLM rates each rule 0..5 (no offline)
    workbench score --store S --sae ID --scorer detection --llm-model M --backend ray --llm-qps 20  # Ray workers
    workbench report --store S --sae ID --format md --out report.md

Offline (no --llm-model) the simulator is the lexical one and detection/fuzzing use lexical rule matching — both
named as such in every stored score. Rerunning a command skips explanations already scored under the same key.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from sae_workbench import defaults
from sae_workbench.cli import llm_options, loaders, options
from sae_workbench.cli.backends import check_llm_backend

log = logging.getLogger(__name__)


def feature_list(spec: str, st: Any, sae: str) -> list[int] | None:
    """The features a spec names (`options.parse_features`, checked against the SAE's width); None = "all"."""
    if spec.strip() == "all":
        return None
    return options.parse_features(spec, st.get_sae(sae).d_sae)


def score(
    store: options.Store,
    sae: options.SaeId,
    scorer: str = typer.Option(
        ...,
        help="simulation, detection, fuzzing, embedding, cosy, polysemanticity (PRISM explanations) or complexity "
        "(an LLM rates each rule 0..5; needs --llm-model).",
    ),
    negatives: options.ScoreNegatives = None,
    explainer: options.ExplainerFilter = None,
    features: options.Features = "all",
    per_split: int = typer.Option(
        defaults.PER_SPLIT,
        help="Positives and negatives per third of the feature's split; the test third is scored (tree paper: 10).",
    ),
    seed: options.Seed = defaults.DEFAULT_SEED,
    record_len: options.ScoreRecordLen = None,
    llm_model: options.LlmModel = None,
    llm_base_url: options.LlmBaseUrl = None,
    api_key_env: options.ApiKeyEnv = defaults.LLM_API_KEY_ENV,
    concurrency: options.Concurrency = defaults.LLM_CONCURRENCY,
    llm_timeout: llm_options.LlmTimeout = None,
    llm_max_tokens: llm_options.LlmMaxTokens = None,
    llm_context: llm_options.LlmContext = None,
    sae_path: Path | None = typer.Option(
        None, help="SAE folder (cosy runs the model + SAE on generated texts)."
    ),
    control_size: int | None = typer.Option(
        None,
        help="CoSy control texts from the held-out corpus slice (default: the preset's, 200; paper: 1000).",
    ),
    preset: options.Preset = defaults.PRESET,
    embedding_model: options.EmbeddingModel = defaults.EMBEDDING_MODEL,
    trust_remote_code: options.TrustRemoteCode = False,
    progress: options.Progress = True,
    backend: options.Backend = defaults.DEFAULT_BACKEND,
    ray_address: options.RayAddress = None,
    ray_workers: options.RayWorkers = None,
    llm_qps: options.LlmQps = None,
) -> None:
    """Score stored explanations with one scorer and one negative source; results go into the store."""
    from sae_workbench.evaluation.scorers.base import ScoreConfigError, ScorerInputs
    from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring, score_backends
    from sae_workbench.evaluation.scorers.registry import scorer_class
    from sae_workbench.llm.config import LLMNotConfiguredError
    from sae_workbench.raycluster import RayConfig
    from sae_workbench.store import Store

    check_llm_backend(backend, llm_qps)
    if trust_remote_code:
        from sae_workbench.embeddings import trust_remote_code as allow_remote_code

        allow_remote_code()
    if preset == "paper" and record_len is None:
        record_len = (
            defaults.RECORD_LEN
        )  # tree paper: every record is 32 tokens, whatever the explanation saw
    length = defaults.RECORD_LEN if record_len is None else record_len
    split = options.split_config(negatives, seed, length, per_split)
    config = ScoreConfig(scorer=scorer, negatives=negatives, per_split=per_split, seed=seed,
                         record_length=record_len, split_config=split)  # fmt: skip
    method = scorer_class(scorer)  # an unknown name fails here, before the store opens
    told = config.told() if method.uses_test_set else {}
    if told:
        said = ", ".join(
            f"{k.replace('_', ' ')} {'whole windows' if v is None else v}" for k, v in told.items()
        )
        typer.echo(f"told otherwise: scoring with {said} instead of each explanation's own", err=True)
    if backend == "ray" and method.local_only:
        raise ScoreConfigError(f"--scorer {scorer} {method.local_only}: use --backend local")
    step = loaders.step_lines(progress)
    inputs = ScorerInputs(sae_id=sae, sae_path=sae_path, preset=preset, control_size=control_size, step=step)
    method.check_inputs(inputs)  # so do the scorer's own options (cosy: --preset, --control-size, --sae-path)
    status = llm_options.llm_endpoint(
        llm_model, llm_base_url, api_key_env, concurrency, llm_timeout, llm_max_tokens, llm_context
    )
    if llm_model and not status.configured:
        raise LLMNotConfiguredError(status.notice)
    llm = status.config
    st = Store.open(store)
    if backend == "ray":
        from sae_workbench.evaluation.scorers.ray_backend import run_scoring_ray

        result = run_scoring_ray(
            st, sae, config, llm=llm, embedding_model=embedding_model, explainer=explainer,
            features=feature_list(features, st, sae), progress=progress, workers=ray_workers, qps=llm_qps,
            ray_config=RayConfig(address=ray_address),
        )  # fmt: skip
        _echo_result(scorer, config, method.uses_negatives, result)
        return
    from sae_workbench.llm.cache import StoreCache

    backends = score_backends(
        llm, cache=StoreCache(st), embedding_model=embedding_model, inputs=replace(inputs, store=st)
    )
    result = run_scoring(
        st,
        sae,
        config,
        backends,
        explainer=explainer,
        features=feature_list(features, st, sae),
        progress=progress,
    )
    _echo_result(scorer, config, method.uses_negatives, result)


def _echo_result(scorer: str, config: Any, uses_negatives: bool, result: Any) -> None:
    """The one-line summary of a scoring run."""
    dead = f", {result.dead} dead feature(s) recorded unscored" if result.dead else ""
    source = config.negatives if uses_negatives else "-"
    typer.echo(
        f"{scorer}/{source}: scored {result.scored}, skipped {result.skipped} (already scored), "
        f"recorded {result.failed} failure(s){dead} in {result.seconds:.1f}s"
    )


def report(
    store: options.Store,
    sae: options.SaeId,
    format: str = typer.Option("md", "--format", help="md or csv."),
    out: Path | None = typer.Option(None, help="Write here instead of stdout."),
    features: options.Features = "all",
) -> None:
    """Explainers × scorers table for a feature set, with how much close negatives lower scores vs random ones."""
    from sae_workbench.evaluation.scorers.job import ScoreConfigError
    from sae_workbench.evaluation.scorers.report import (
        collect_rows,
        complexity_rows,
        cosy_rows,
        model_rows,
        negative_deltas,
        polysemanticity_rows,
        render_csv,
        render_markdown,
    )
    from sae_workbench.paths import atomic_write_bytes
    from sae_workbench.store import Store

    if format not in ("md", "csv"):
        raise ScoreConfigError(f"--format must be md or csv, not {format!r}")
    st = Store.open(store, read_only=True)
    st.get_sae(sae)
    feats = feature_list(features, st, sae)
    rows, deltas = collect_rows(st, sae, feats), negative_deltas(st, sae, feats)
    poly, comp = polysemanticity_rows(st, sae, feats), complexity_rows(st, sae, feats)
    cosy = cosy_rows(st, sae, feats)
    text = (
        render_markdown(rows, deltas, f"Scores of SAE {sae}", poly, comp, cosy, model_rows(st, sae, feats))
        if format == "md"
        else render_csv(rows, deltas, poly, comp, cosy)
    )
    if out is None:
        typer.echo(text, nl=False)
    else:
        atomic_write_bytes(out, text.encode())
        typer.echo(f"wrote {out}")
