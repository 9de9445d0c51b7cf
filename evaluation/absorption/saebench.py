"""SAEBench-style eval JSON (the layout of sae_bench/evals/base_eval_output.py) for absorption and core metrics.

Top-level fields: eval_type_id, eval_config, eval_id, datetime_epoch_millis, eval_result_metrics,
eval_result_details, sae_bench_commit_hash, sae_lens_id, sae_lens_release_id, sae_lens_version, sae_cfg_dict,
eval_result_unstructured — plus workbench fields (workbench_sae_id, model_name, hook_name) that SAEBench readers
ignore.

    pos = word_token_offset(model.tokenizer, cfg.probing.template)  # -6 for SmolLM2, as SAEBench's default
    doc = absorption_eval_json(
        result, cfg, sae_id="3f2a…", model_name="smollm2-135m", llm_dtype="float32", prompt_token_pos=pos
    )
    write_eval_json(doc, Path("results/absorption.json"))

The absorption document validates against SAEBench's own JSON schema (data/saebench/, vendored from the sae-bench
package; tests/evaluation/absorption/test_absorption_export.py checks it).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sae_workbench import paths
from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.absorption.eval import AbsorptionConfig, AbsorptionResult, LetterAbsorption
from sae_workbench.evaluation.absorption.probes import build_prompt
from sae_workbench.evaluation.absorption.seeds import SeedSpread

EVAL_TYPE_ABSORPTION = "absorption_first_letter"  # SAEBench EVAL_TYPE_ID_ABSORPTION
# Workbench-only: the summary of several seeds' absorption runs (not a SAEBench eval type; same envelope).
EVAL_TYPE_ABSORPTION_SEEDS = "absorption_first_letter_seeds"
EVAL_TYPE_CORE = "core"  # SAEBench EVAL_TYPE_ID_CORE
# A word whose prompt measures the template's word position (any word that stays one token in context will do).
OFFSET_PROBE_WORD = " apple"
# "Not SAEBench": this export is produced by the workbench, which has no SAEBench commit.
NO_SAEBENCH_COMMIT = "not-sae-bench (sae-workbench export)"

# SAEBench's core metric categories (evals/core/eval_output.py) and the flat metric names each holds.
CORE_CATEGORIES: dict[str, tuple[str, ...]] = {
    "model_behavior_preservation": ("kl_div_score", "kl_div_with_ablation", "kl_div_with_sae"),
    "model_performance_preservation": (
        "ce_loss_score",
        "ce_loss_with_ablation",
        "ce_loss_with_sae",
        "ce_loss_without_sae",
    ),
    "reconstruction_quality": ("explained_variance", "explained_variance_legacy", "mse", "cossim"),
    "shrinkage": ("l2_norm_in", "l2_norm_out", "l2_ratio", "relative_reconstruction_bias"),
    "sparsity": ("l0", "l1"),
    "token_stats": ("total_tokens_eval_reconstruction", "total_tokens_eval_sparsity_variance"),
    "misc_metrics": (
        "freq_over_1_percent",
        "freq_over_10_percent",
        "normalized_freq_over_1_percent",
        "normalized_freq_over_10_percent",
        "average_max_encoder_cosine_sim",
        "average_max_decoder_cosine_sim",
        "frac_alive",
    ),
}


def _sae_lens_version() -> str | None:
    """Installed sae-lens version, or None."""
    try:
        return version("sae-lens")
    except PackageNotFoundError:
        return None


def _envelope(
    eval_type_id: str,
    eval_config: dict[str, Any],
    metrics: dict[str, Any],
    details: list[dict[str, Any]],
    *,
    sae_id: str,
    model_name: str,
    hook_name: str,
    sae_cfg: dict[str, Any] | None,
    unstructured: Any,
    eval_id: str | None,
    now_ms: int | None,
) -> dict[str, Any]:
    """The fields every SAEBench eval output has."""
    return {
        "eval_type_id": eval_type_id,
        "eval_config": eval_config,
        "eval_id": eval_id or str(uuid.uuid4()),
        "datetime_epoch_millis": now_ms if now_ms is not None else int(time.time() * 1000),
        "eval_result_metrics": metrics,
        "eval_result_details": details,
        "sae_bench_commit_hash": NO_SAEBENCH_COMMIT,
        "sae_lens_id": sae_id,
        "sae_lens_release_id": None,
        "sae_lens_version": _sae_lens_version(),
        "sae_cfg_dict": sae_cfg,
        "eval_result_unstructured": unstructured,
        "workbench_sae_id": sae_id,
        "model_name": model_name,
        "hook_name": hook_name,
    }


class SAEBenchExportError(WorkbenchError):
    """The prompt template's word position cannot be expressed as SAEBench's fixed offset."""


def word_token_offset(tokenizer: Any, template: str, word: str = OFFSET_PROBE_WORD) -> int:
    """SAEBench's prompt_token_pos: the word token's index counted from the prompt's end (negative).

    Our probing finds the word's position per prompt from the tokenizer; the text after the word is the same for
    every prompt, so the offset from the end is one number: −6 for "{word} has the first letter:" with SmolLM2's
    tokenizer (" has", " the", " first", " letter", ":"), SAEBench's default.
    """
    head, full = build_prompt(word, [word.strip() or word], template)
    head_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
    full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    if full_ids[: len(head_ids)] != head_ids:
        raise SAEBenchExportError(
            f"the text after {{word}} in {template!r} merges with the word {word!r} when tokenized; "
            "pass another word to word_token_offset"
        )
    return len(head_ids) - 1 - len(full_ids)


def absorption_eval_config(cfg: AbsorptionConfig, model_name: str, *, llm_dtype: str) -> dict[str, Any]:
    """SAEBench's AbsorptionEvalConfig fields, filled from ours (plus the workbench-only settings).

    prompt_token_pos needs the tokenizer and is added by `absorption_eval_json`; without it this dict is the
    run's settings, which the CLI hashes into its resume key before the model is loaded.
    """
    p = cfg.probing
    return {
        "model_name": model_name,
        "random_seed": p.seed,
        "f1_jump_threshold": cfg.f1_jump_threshold,
        "max_k_value": cfg.max_k,
        "prompt_template": p.template,
        "llm_batch_size": p.batch_size,
        "llm_dtype": llm_dtype,
        "k_sparse_probe_l1_decay": cfg.k_sparse_l1_decay,
        "k_sparse_probe_batch_size": 4096,
        "k_sparse_probe_num_epochs": cfg.k_sparse_epochs,
        "min_GT_probe_f1": cfg.min_probe_f1,
        "min_feats_for_eval": cfg.min_letters,
        "workbench": {"probing": dataclasses.asdict(p), "thresholds": dataclasses.asdict(cfg.thresholds)},
    }


def absorption_eval_json(
    result: AbsorptionResult,
    cfg: AbsorptionConfig,
    *,
    sae_id: str,
    model_name: str,
    llm_dtype: str,
    prompt_token_pos: int,
    sae_cfg: dict[str, Any] | None = None,
    eval_id: str | None = None,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """The absorption result as SAEBench's AbsorptionEvalOutput (details: included letters only, as SAEBench).

    llm_dtype is the subject model's dtype name ("float32", "bfloat16"); prompt_token_pos is
    `word_token_offset(tokenizer, cfg.probing.template)`.
    """
    details = [
        {
            "first_letter": x.first_letter,
            "mean_absorption_fraction": x.mean_absorption_fraction,
            "full_absorption_rate": x.full_absorption_rate,
            "num_full_absorption": x.num_full_absorption,
            "num_probe_true_positives": x.num_probe_true_positives,
            "num_split_features": x.num_split_features,
        }
        for x in result.letters
        if x.included
    ]
    unstructured = {
        "letters": [dataclasses.asdict(x) for x in result.letters],
        "absorbing_features": [dataclasses.asdict(f) for f in result.absorbing_features],
    }
    return _envelope(
        EVAL_TYPE_ABSORPTION,
        {
            **absorption_eval_config(cfg, model_name, llm_dtype=llm_dtype),
            "prompt_token_pos": prompt_token_pos,
        },
        {"mean": dataclasses.asdict(result.metrics)},
        details,
        sae_id=sae_id,
        model_name=model_name,
        hook_name=cfg.probing.hook(),
        sae_cfg=sae_cfg,
        unstructured=unstructured,
        eval_id=eval_id,
        now_ms=now_ms,
    )


class StoredAbsorptionError(WorkbenchError):
    """A stored absorption document lacks the per-letter results a summary over seeds needs."""


def letters_from_eval_json(doc: dict[str, Any]) -> list[LetterAbsorption]:
    """Every letter of a stored absorption document (included or not), from its eval_result_unstructured."""
    rows = (doc.get("eval_result_unstructured") or {}).get("letters")
    if not rows:
        raise StoredAbsorptionError(
            f"absorption eval {doc.get('eval_id')} records no per-letter results; rerun it with --force"
        )
    return [LetterAbsorption(**row) for row in rows]


def absorption_seeds_config(
    cfg: AbsorptionConfig, model_name: str, seeds: list[int], *, llm_dtype: str
) -> dict[str, Any]:
    """The per-seed runs' shared settings, with `random_seeds` (the list) in place of random_seed."""
    config = absorption_eval_config(cfg, model_name, llm_dtype=llm_dtype)
    del config["random_seed"]
    config["workbench"]["probing"].pop("seed")
    return {**config, "random_seeds": list(seeds)}


def absorption_seeds_json(
    spread: SeedSpread,
    cfg: AbsorptionConfig,
    *,
    sae_id: str,
    model_name: str,
    llm_dtype: str,
    eval_ids: dict[int, int | None],
    sae_cfg: dict[str, Any] | None = None,
    eval_id: str | None = None,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """The spread over seeds in the SAEBench envelope, every figure as {mean, low, high, n} (NaN → null).

    eval_result_metrics["mean"]: the SAE-level means with their intervals over seeds; eval_result_details: one entry
    per letter (n_seeds = seeds in which it was included, of_seeds = seeds run); eval_result_unstructured["seeds"]:
    each seed's own SAE-level metrics and the store id of its single-run document (`eval_ids`, None unstored).
    """
    details = [
        {
            "first_letter": x.first_letter,
            "n_seeds": x.n_seeds,
            "of_seeds": x.of_seeds,
            "mean_absorption_fraction": dataclasses.asdict(x.absorption_fraction),
            "full_absorption_rate": dataclasses.asdict(x.full_absorption_rate),
            "num_split_features": dataclasses.asdict(x.num_split_features),
            "probe_f1": dataclasses.asdict(x.probe_f1),
        }
        for x in spread.letters
    ]
    metrics = {
        "mean": {
            "mean_absorption_fraction_score": dataclasses.asdict(spread.mean_absorption_fraction_score),
            "mean_full_absorption_score": dataclasses.asdict(spread.mean_full_absorption_score),
            "mean_num_split_features": dataclasses.asdict(spread.mean_num_split_features),
        },
        "confidence": spread.confidence,
        "n_seeds": len(spread.seeds),
    }
    unstructured = {
        "seeds": [
            {"seed": seed, "eval_id": eval_ids.get(seed), "metrics": dataclasses.asdict(m)}
            for seed, m in spread.per_seed.items()
        ]
    }
    doc = _envelope(
        EVAL_TYPE_ABSORPTION_SEEDS,
        absorption_seeds_config(cfg, model_name, spread.seeds, llm_dtype=llm_dtype),
        metrics,
        details,
        sae_id=sae_id,
        model_name=model_name,
        hook_name=cfg.probing.hook(),
        sae_cfg=sae_cfg,
        unstructured=unstructured,
        eval_id=eval_id,
        now_ms=now_ms,
    )
    return _finite(doc)


def group_core_metrics(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Nest a flat core-metrics dict into SAEBench's categories; unknown names go to "workbench_other".

    A dict that is already nested (every value a dict) is returned unchanged.
    """
    if metrics and all(isinstance(v, dict) for v in metrics.values()):
        return metrics
    where = {name: cat for cat, names in CORE_CATEGORIES.items() for name in names}
    out: dict[str, dict[str, Any]] = {}
    for name, value in metrics.items():
        out.setdefault(where.get(name, "workbench_other"), {})[name] = value
    return out


def core_eval_json(
    metrics: dict[str, Any],
    *,
    sae_id: str,
    model_name: str,
    hook_name: str,
    eval_config: dict[str, Any] | None = None,
    feature_details: list[dict[str, Any]] | None = None,
    sae_cfg: dict[str, Any] | None = None,
    eval_id: str | None = None,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """Core SAE metrics (computed by sae/metrics.py) as SAEBench's CoreEvalOutput."""
    return _envelope(
        EVAL_TYPE_CORE,
        {"model_name": model_name, **(eval_config or {})},
        group_core_metrics(metrics),
        feature_details or [],
        sae_id=sae_id,
        model_name=model_name,
        hook_name=hook_name,
        sae_cfg=sae_cfg,
        unstructured=None,
        eval_id=eval_id,
        now_ms=now_ms,
    )


def write_eval_json(doc: dict[str, Any], path: Path) -> Path:
    """Write an eval JSON atomically (non-finite floats become null so any JSON reader accepts it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_bytes(path, json.dumps(_finite(doc), indent=2).encode())
    return path


def _finite(value: Any) -> Any:
    """Replace NaN/inf floats with None, recursively."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
