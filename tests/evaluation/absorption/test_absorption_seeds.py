"""Absorption over seeds (issue 33 item 7): the aggregation checked by hand, and `workbench absorption --seeds`.

The hand cases spell out every mean, sample standard deviation and Student-t quantile; the quantiles are the
textbook table values t_{0.975, 1} = 12.7062047 and t_{0.975, 2} = 4.3026527 (two-sided 95%), not recomputed here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sae_workbench.evaluation.absorption.eval import AbsorptionConfig, LetterAbsorption
from sae_workbench.evaluation.absorption.saebench import (
    absorption_seeds_config,
    absorption_seeds_json,
    letters_from_eval_json,
)
from sae_workbench.evaluation.absorption.seeds import SeedSpreadError, seed_spread, spread_table

T_DF1 = 12.706204736  # t_{0.975, 1}
T_DF2 = 4.302652730  # t_{0.975, 2}
TOL = 1e-8


def _letter(c: str, f1: float, included: bool, split: int, fraction: float, full: float) -> LetterAbsorption:
    """A hand-made per-letter result (10 probe true positives; the counts are not aggregated over seeds)."""
    return LetterAbsorption(c, f1, included, list(range(split)), split, 10, round(10 * full), fraction, full)


# Letter a in all three seeds; b dropped from seed 2 (probe F1 0.5, its 0.9 must not enter any mean); c only in
# seed 0 (absent from the other runs' lists).
SEEDS = {
    0: [_letter("a", 0.9, True, 1, 0.2, 0.1), _letter("b", 0.8, True, 2, 0.5, 0.0), _letter("c", 0.9, True, 1, 0.3, 0.0)],
    1: [_letter("a", 0.7, True, 1, 0.4, 0.3), _letter("b", 0.7, True, 1, 0.1, 0.2)],
    2: [_letter("b", 0.5, False, 3, 0.9, 0.9), _letter("a", 0.8, True, 2, 0.6, 0.2)],
}  # fmt: skip


def _close(ci, mean: float, half: float, n: int) -> None:
    """`ci` is mean ± half over n values."""
    assert ci.n == n
    assert ci.mean == pytest.approx(mean, abs=TOL)
    assert ci.low == pytest.approx(mean - half, abs=1e-7)
    assert ci.high == pytest.approx(mean + half, abs=1e-7)


def test_per_letter_means_and_intervals_by_hand() -> None:
    spread = seed_spread(SEEDS)
    assert spread.seeds == [0, 1, 2] and spread.confidence == 0.95
    a, b, c = spread.letters
    assert [x.first_letter for x in spread.letters] == ["a", "b", "c"]
    # a: fractions 0.2, 0.4, 0.6 -> mean 0.4, s = 0.2; half = t2 * 0.2 / sqrt(3).
    assert (a.n_seeds, a.of_seeds) == (3, 3)
    _close(a.absorption_fraction, 0.4, T_DF2 * 0.2 / math.sqrt(3), 3)
    # full 0.1, 0.3, 0.2 -> mean 0.2, s = 0.1.
    _close(a.full_absorption_rate, 0.2, T_DF2 * 0.1 / math.sqrt(3), 3)
    # split 1, 1, 2 -> mean 4/3, s^2 = (1/9 + 1/9 + 4/9) / 2 = 1/3; half = t2 * sqrt(1/3) / sqrt(3) = t2 / 3.
    _close(a.num_split_features, 4 / 3, T_DF2 / 3, 3)
    _close(a.probe_f1, 0.8, T_DF2 * 0.1 / math.sqrt(3), 3)
    # b: included in seeds 0 and 1 only: fractions 0.5, 0.1 -> mean 0.3, s = 0.4 / sqrt(2); half = t1 * 0.2.
    assert (b.n_seeds, b.of_seeds) == (2, 3)
    _close(b.absorption_fraction, 0.3, T_DF1 * 0.2, 2)
    _close(b.full_absorption_rate, 0.1, T_DF1 * 0.1, 2)
    _close(b.num_split_features, 1.5, T_DF1 * 0.5, 2)
    # Probe F1 is over every run that lists the letter, included or not: 0.8, 0.7, 0.5.
    assert b.probe_f1.n == 3 and b.probe_f1.mean == pytest.approx(2 / 3, abs=TOL)
    # c: one seed -> its value, no interval.
    assert (c.n_seeds, c.absorption_fraction.n, c.absorption_fraction.mean) == (1, 1, 0.3)
    assert math.isnan(c.absorption_fraction.low) and math.isnan(c.absorption_fraction.high)


def test_sae_level_means_are_each_seeds_mean_with_an_interval_over_seeds() -> None:
    spread = seed_spread(SEEDS)
    # Each seed's mean over its included letters: seed 0 (a, b, c), seed 1 (a, b), seed 2 (a).
    fractions = [(0.2 + 0.5 + 0.3) / 3, (0.4 + 0.1) / 2, 0.6]
    assert [spread.per_seed[s].mean_absorption_fraction_score for s in (0, 1, 2)] == pytest.approx(fractions)
    mean = sum(fractions) / 3
    s = math.sqrt(sum((f - mean) ** 2 for f in fractions) / 2)
    _close(spread.mean_absorption_fraction_score, mean, T_DF2 * s / math.sqrt(3), 3)
    fulls = [0.1 / 3, 0.25, 0.2]
    mean_full = sum(fulls) / 3
    s_full = math.sqrt(sum((f - mean_full) ** 2 for f in fulls) / 2)
    _close(spread.mean_full_absorption_score, mean_full, T_DF2 * s_full / math.sqrt(3), 3)
    splits = [4 / 3, 1.0, 2.0]
    mean_split = sum(splits) / 3
    s_split = math.sqrt(sum((f - mean_split) ** 2 for f in splits) / 2)
    _close(spread.mean_num_split_features, mean_split, T_DF2 * s_split / math.sqrt(3), 3)


def test_table_and_document_report_the_count_of_a_partial_letter() -> None:
    spread = seed_spread(SEEDS)
    lines = spread_table(spread)
    (b_line,) = [line for line in lines if line.startswith("b ")]
    assert " 2/3 " in b_line and "fewer seeds" in b_line and "0.300 [" in b_line
    (c_line,) = [line for line in lines if line.startswith("c ")]
    assert "0.300 (1 seed)" in c_line
    (a_line,) = [line for line in lines if line.startswith("a ")]
    assert " 3/3 " in a_line and "fewer seeds" not in a_line
    doc = absorption_seeds_json(
        spread,
        AbsorptionConfig(),
        sae_id="abc",
        model_name="tiny",
        llm_dtype="float32",
        eval_ids={0: 5, 1: 6, 2: None},
    )
    doc = json.loads(json.dumps(doc, allow_nan=False))  # no NaN left: c's missing interval is null
    assert doc["eval_type_id"] == "absorption_first_letter_seeds"
    c_detail = doc["eval_result_details"][2]
    assert c_detail["first_letter"] == "c" and c_detail["n_seeds"] == 1 and c_detail["of_seeds"] == 3
    assert c_detail["mean_absorption_fraction"] == {"mean": 0.3, "low": None, "high": None, "n": 1}
    assert doc["eval_result_metrics"]["mean"]["mean_absorption_fraction_score"]["n"] == 3
    assert [(x["seed"], x["eval_id"]) for x in doc["eval_result_unstructured"]["seeds"]] == [
        (0, 5),
        (1, 6),
        (2, None),
    ]
    config = doc["eval_config"]
    assert config["random_seeds"] == [0, 1, 2] and "random_seed" not in config
    assert "seed" not in config["workbench"]["probing"]
    assert absorption_seeds_config(AbsorptionConfig(), "tiny", [0, 1, 2], llm_dtype="float32") == config


def test_no_seed_or_a_seed_without_an_included_letter_is_refused() -> None:
    with pytest.raises(SeedSpreadError, match="no seeds"):
        seed_spread({})
    with pytest.raises(SeedSpreadError, match="seed 7 has no included letter"):
        seed_spread({0: SEEDS[0], 7: [_letter("a", 0.3, False, 1, 0.2, 0.1)]})


def test_letters_come_back_from_a_single_run_document() -> None:
    from sae_workbench.evaluation.absorption.saebench import StoredAbsorptionError, absorption_eval_json
    from tests.evaluation.absorption.test_absorption_export import _result

    result = _result()
    doc = absorption_eval_json(
        result, AbsorptionConfig(), sae_id="abc", model_name="tiny", llm_dtype="float32", prompt_token_pos=-6
    )
    assert letters_from_eval_json(json.loads(json.dumps(doc))) == result.letters
    with pytest.raises(StoredAbsorptionError, match="--force"):
        letters_from_eval_json({"eval_id": "x", "eval_result_unstructured": None})


# ---- the command on the tiny model ------------------------------------------------------------------------------


def test_seeds_option_is_checked_before_anything_runs() -> None:
    from sae_workbench.cli.absorption import AbsorptionCLIError, absorption, parse_seeds

    assert parse_seeds("0, 1,2") == [0, 1, 2]
    for bad in ("1", "0,0", "0,x", ""):
        with pytest.raises(AbsorptionCLIError, match="--seeds"):
            parse_seeds(bad)
    with pytest.raises(AbsorptionCLIError, match="--seed or --toy"):
        absorption(toy=False, sae=None, seed=3, seeds="0,1")


def test_cli_seeds_store_one_run_per_seed_and_a_summary_and_resume(tmp_path: Path, monkeypatch) -> None:
    """--seed 0, then --seeds 0,1 computes seed 1 only and stores the summary; the same command again computes
    nothing (no model is even loaded) and stores nothing."""
    from sae_workbench import paths
    from sae_workbench.cli import _register_stage_commands, app
    from sae_workbench.sae.io import save_sae
    from sae_workbench.store import Store
    from tests.sae.test_indexing import make_sae

    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(paths.models_dir(), target_is_directory=True)
    monkeypatch.setenv("WORKBENCH_HOME", str(home))
    sae = make_sae(hook="blocks.1.hook_resid_post")
    sae.cfg.metadata.model_name = "tiny"
    sae_dir = save_sae(sae, tmp_path / "sae")
    _register_stage_commands()
    db_path = tmp_path / "wb.duckdb"
    args = ["absorption", "--sae", str(sae_dir), "--model", "tiny", "--max-words", "160", "--n-icl-examples", "2",
            "--min-letters", "1", "--min-probe-f1", "-1", "--store", str(db_path)]  # fmt: skip

    def evals(kind: str):
        return Store.open(db_path, read_only=True).evals(eval_type_id=kind)

    first = CliRunner().invoke(app, [*args, "--seed", "0"])
    assert first.exit_code == 0, (first.output, first.exception)
    (seed0,) = evals("absorption_first_letter")

    out_json = tmp_path / "out" / "abs.json"
    both = CliRunner().invoke(app, [*args, "--seeds", "0,1", "--json", str(out_json)])
    assert both.exit_code == 0, (both.output, both.exception)
    assert f"seed 0: already in {db_path} (eval {seed0.id})" in both.output
    assert both.stderr.count("first-letter probes at") == 1  # only seed 1 ran
    runs = evals("absorption_first_letter")
    assert [r.eval["eval_config"]["random_seed"] for r in runs] == [0, 1]
    (summary,) = evals("absorption_first_letter_seeds")
    doc = summary.eval
    assert [(x["seed"], x["eval_id"]) for x in doc["eval_result_unstructured"]["seeds"]] == [
        (0, runs[0].id),
        (1, runs[1].id),
    ]
    # The seeds saw different words: their probes differ.
    f1 = [[x["probe_f1"] for x in r.eval["eval_result_unstructured"]["letters"]] for r in runs]
    assert f1[0] != f1[1]
    # Per letter, the summary is the mean of the two stored runs' values over the seeds that included it.
    per_run = [{x["first_letter"]: x for x in r.eval["eval_result_details"]} for r in runs]
    for detail in doc["eval_result_details"]:
        values = [
            d[detail["first_letter"]]["mean_absorption_fraction"]
            for d in per_run
            if detail["first_letter"] in d
        ]
        assert detail["n_seeds"] == len(values) and detail["of_seeds"] == 2
        if values:
            assert detail["mean_absorption_fraction"]["mean"] == pytest.approx(sum(values) / len(values))
    sae_means = [r.eval["eval_result_metrics"]["mean"]["mean_absorption_fraction_score"] for r in runs]
    assert doc["eval_result_metrics"]["mean"]["mean_absorption_fraction_score"]["mean"] == pytest.approx(
        sum(sae_means) / 2
    )
    assert json.loads((out_json.parent / "absorption-seeds.json").read_text())["eval_id"] == doc["eval_id"]
    for s, run in enumerate(runs):
        written = json.loads((out_json.parent / f"abs-seed{s}.json").read_text())
        assert written["eval_id"] == run.eval["eval_id"]
    assert "SAE mean_absorption_fraction_score=" in both.output

    again = CliRunner().invoke(app, [*args, "--seeds", "0,1"])
    assert again.exit_code == 0, (again.output, again.exception)
    assert "loading model" not in again.stderr and "first-letter probes at" not in again.stderr
    assert f"summary already in {db_path} (eval {summary.id})" in again.output
    assert len(evals("absorption_first_letter")) == 2 and len(evals("absorption_first_letter_seeds")) == 1
