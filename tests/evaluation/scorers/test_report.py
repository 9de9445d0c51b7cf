"""`workbench report` tables from hand-made scores, and `workbench score` + `report` through the CLI."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sae_workbench.evaluation.scorers.report import collect_rows, negative_deltas, render_csv, render_markdown
from sae_workbench.store import ExplanationRecord, ScoreRecord, Store
from tests.evaluation.scorers.test_scoring_planted import SAE_ID, build_planted_store


def _expl(feature: int, explainer: str) -> ExplanationRecord:
    return ExplanationRecord(
        sae_id="s",
        feature=feature,
        explainer=explainer,
        explainer_version="v",
        prompt_version="",
        llm_model="",
        llm_params={},
        sampling={},
        example_ids=[],
        negative_ids=[],
        text="x",
        config_key=f"{explainer}-{feature}",
    )


@pytest.fixture()
def scored(tmp_path: Path) -> Store:
    """Two explainers × two features × RANDOM/SIMILAR_NEGATIVE simulation scores, plus one failure."""
    store = Store.open(tmp_path / "r.duckdb")
    store.register_sae("s", "tiny", "blocks.0.hook_resid_post", 64, 8, {})
    values = {
        ("lexical", 0): (0.8, 0.5),
        ("lexical", 1): (0.6, 0.3),
        ("tree", 0): (0.9, 0.8),
        ("tree", 1): (0.7, 0.7),
    }
    for (explainer, feature), (rand, close) in values.items():
        eid = store.add_explanation(_expl(feature, explainer))
        for source, v in (("RANDOM", rand), ("SIMILAR_NEGATIVE", close)):
            metrics = {"status": "ok", "pearson": v, "false_positive_tokens": 2 if source == "RANDOM" else 6,
                       "test_windows_seen": feature}  # fmt: skip
            store.add_score(ScoreRecord(eid, "simulation", "simulation-v1", source, metrics))
    eid = store.add_explanation(_expl(2, "tree"))
    store.add_score(ScoreRecord(eid, "simulation", "simulation-v1", "RANDOM", {"status": "no_activations"}))
    # Lexical feature 0 under RANDOM_NEGATIVE too (pairs with SIMILAR_NEGATIVE over feature 0 only), and a dead one.
    lex0 = scored_id(store, "lexical", 0)
    store.add_score(
        ScoreRecord(lex0, "simulation", "simulation-v1", "RANDOM_NEGATIVE", {"status": "ok", "pearson": 0.9})
    )
    eid = store.add_explanation(_expl(3, "lexical"))
    store.add_score(ScoreRecord(eid, "simulation", "simulation-v1", "RANDOM_NEGATIVE", {"status": "dead"}))
    return store


def scored_id(store: Store, explainer: str, feature: int) -> int:
    """Id of an explanation of the fixture."""
    (e,) = store.explanations(sae_id="s", explainer=explainer, feature=feature)
    assert e.id is not None
    return e.id


def test_rows_and_negative_deltas_hand_computed(scored: Store) -> None:
    rows = {(r.explainer, r.negative_source): r for r in collect_rows(scored, "s")}
    lex = rows[("lexical", "SIMILAR_NEGATIVE")]
    assert lex.mean == pytest.approx(0.4) and lex.n_features == 2 and lex.false_positive_tokens == 6
    assert lex.test_windows_seen == pytest.approx(0.5)  # features 0 and 1 had 0 and 1 test windows replaced
    # [0.5, 0.3]: s = 0.1414, t_{.975,1} = 12.706 → half-width 12.706 × 0.1414 / √2 = 1.2706.
    assert lex.ci_high - lex.mean == pytest.approx(12.706204736 * 0.1, rel=1e-6)
    assert rows[("tree", "RANDOM")].n_failed == 1 and rows[("tree", "RANDOM")].n_features == 2
    # A dead feature's score is counted as dead, not as a failure, and never enters the mean.
    lex_rn = rows[("lexical", "RANDOM_NEGATIVE")]
    assert (lex_rn.n_dead, lex_rn.n_failed, lex_rn.n_features, lex_rn.mean) == (1, 0, 1, pytest.approx(0.9))
    deltas = {(d.explainer, d.close_source, d.random_source): d for d in negative_deltas(scored, "s")}
    assert set(deltas) == {
        ("lexical", "SIMILAR_NEGATIVE", "RANDOM"),
        ("lexical", "SIMILAR_NEGATIVE", "RANDOM_NEGATIVE"),
        ("tree", "SIMILAR_NEGATIVE", "RANDOM"),
    }
    assert deltas[("lexical", "SIMILAR_NEGATIVE", "RANDOM")].delta == pytest.approx(-0.3)
    # Paired over feature 0 only: 0.5 − 0.9.
    pair = deltas[("lexical", "SIMILAR_NEGATIVE", "RANDOM_NEGATIVE")]
    assert pair.delta == pytest.approx(-0.4) and pair.n_features == 1
    assert deltas[("tree", "SIMILAR_NEGATIVE", "RANDOM")].delta == pytest.approx(-0.05)
    assert collect_rows(scored, "s", features=[1])[0].mean == pytest.approx(0.6)


def test_markdown_and_csv(scored: Store) -> None:
    rows, deltas = collect_rows(scored, "s"), negative_deltas(scored, "s")
    md = render_markdown(rows, deltas, "T")
    assert "| lexical | simulation | pearson | SIMILAR_NEGATIVE | RANDOM | 0.400 | 0.700 | -0.300 | 2 |" in md
    assert "| tree | simulation | RANDOM | pearson | 0.800 |" in md
    assert "| lexical | simulation | SIMILAR_NEGATIVE | pearson | 0.400 |" in md
    lex_line = next(
        line for line in md.splitlines() if line.startswith("| lexical | simulation | SIMILAR_NEGATIVE")
    )
    assert lex_line.endswith("| 0.5 | – |")  # mean test windows seen; no negatives_fired recorded
    table = list(csv.DictReader(io.StringIO(render_csv(rows, deltas))))
    assert len(table) == 5 + 3
    delta_rows = [r for r in table if r["negative_source"] == "SIMILAR_NEGATIVE-RANDOM"]
    assert math.isclose(float(delta_rows[0]["mean"]), -0.3)
    assert [r["n_dead"] for r in table if r["negative_source"] == "RANDOM_NEGATIVE"] == ["1"]


def test_score_and_report_commands(tmp_path: Path) -> None:
    from sae_workbench.cli import _register_stage_commands, app

    path = tmp_path / "store.duckdb"
    build_planted_store(path, 400)
    _register_stage_commands()
    runner = CliRunner()
    for source in ("random", "random_negative"):
        res = runner.invoke(
            app,
            [
                "score",
                "--store",
                str(path),
                "--sae",
                SAE_ID,
                "--scorer",
                "simulation",
                "--negatives",
                source,
                "--no-progress",
            ],
        )
        assert res.exit_code == 0, res.output
        assert "scored 2, skipped 0" in res.output and "recorded 2 failure(s)" in res.output
    again = runner.invoke(
        app,
        [
            "score",
            "--store",
            str(path),
            "--sae",
            SAE_ID,
            "--scorer",
            "simulation",
            "--negatives",
            "random",
            "--no-progress",
        ],
    )
    assert "scored 0, skipped 4" in again.output
    bad = runner.invoke(app, ["score", "--store", str(path), "--sae", SAE_ID, "--scorer", "nope"])
    assert bad.exit_code != 0 and "unknown scorer" in str(bad.exception)
    out = tmp_path / "report.csv"
    res = runner.invoke(
        app, ["report", "--store", str(path), "--sae", SAE_ID, "--format", "csv", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    table = list(csv.DictReader(out.open()))
    correct = [r for r in table if r["explainer"] == "planted-correct" and r["negative_source"] == "RANDOM"]
    assert float(correct[0]["mean"]) > 0.5
    res = runner.invoke(app, ["report", "--store", str(path), "--sae", SAE_ID])
    assert "| planted-correct | simulation | RANDOM_NEGATIVE | pearson |" in res.output


def test_an_llm_scorer_is_its_own_row_never_averaged_with_the_offline_one(scored: Store) -> None:
    """One explanation scored by the offline rule simulator and again by an LLM simulator (the demo's LLM stage does
    this): two rows, each the mean of its own backend's scores; before, the latest score replaced the offline one in
    the offline row's mean (lexical RANDOM: 0.8/0.6 became 0.1/0.6)."""
    lex0 = scored_id(scored, "lexical", 0)
    llm = {"backend": "llm:SmolLM2-135M-Instruct.Q4_1"}
    for source, v in (("RANDOM", 0.1), ("SIMILAR_NEGATIVE", 0.3)):
        scored.add_score(
            ScoreRecord(
                lex0, "simulation", "v1", source, {"status": "ok", "pearson": v}, provenance=dict(llm)
            )
        )
    rows = {(r.explainer, r.negative_source, r.scored_by): r for r in collect_rows(scored, "s")}
    offline = rows[("lexical", "RANDOM", "")]
    assert (offline.mean, offline.n_features) == (
        pytest.approx(0.7),
        2,
    )  # 0.8 and 0.6, as before the LLM rows
    by_llm = rows[("lexical", "RANDOM", "SmolLM2-135M-Instruct.Q4_1")]
    assert (by_llm.mean, by_llm.n_features) == (pytest.approx(0.1), 1)
    deltas = {(d.explainer, d.random_source, d.scored_by): d for d in negative_deltas(scored, "s")}
    assert deltas[("lexical", "RANDOM", "")].delta == pytest.approx(-0.3)  # unchanged offline pair
    assert deltas[("lexical", "RANDOM", "SmolLM2-135M-Instruct.Q4_1")].delta == pytest.approx(0.2)
    md = render_markdown(list(rows.values()), [])
    assert "| lexical | simulation [SmolLM2-135M-Instruct.Q4_1] | RANDOM | pearson | 0.100 |" in md
    table = list(csv.DictReader(io.StringIO(render_csv(list(rows.values()), []))))
    assert {r["scored_by"] for r in table} == {"", "SmolLM2-135M-Instruct.Q4_1"}
