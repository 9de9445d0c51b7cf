"""`workbench hypothesis`: a hand-written explanation stored as explainer `manual` (provenance, idempotent, typed
errors) and scored by `workbench score --explainer manual` against a planted ground truth (feature 0 fires on
LORD, God and Israel: tests/explainers/test_explain_support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.explainers.manual import HypothesisError, parse_hypothesis, parse_rule_lines
from sae_workbench.status import Status
from sae_workbench.store import Store, StoreNotFoundError, UnknownSAEError
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store

runner = CliRunner()


@pytest.fixture(scope="module")
def app():
    if not any(c.name == "hypothesis" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    return cli.app


@pytest.fixture(scope="module")
def planted_path(tmp_path_factory, tiny_model) -> Path:
    folder = tmp_path_factory.mktemp("hypothesis")
    build_planted_store(folder, tiny_model.tokenizer)
    return next(folder.glob("*.duckdb"))


def _invoke(app, *args: str):
    return runner.invoke(app, list(args), catch_exceptions=True)


def test_hypotheses_are_stored_with_provenance_once_and_scored_against_the_planted_truth(app, planted_path):
    store = ["--store", str(planted_path), "--sae", PLANTED_SAE, "--feature", "0"]
    right = [*store, "--text", "the names LORD, God and Israel", "--rule", '"LORD"', "--strength", "5",
             "--rule", '"God"', "--strength", "3", "--rule", '"Israel"', "--strength", "2", "--author", "ada"]  # fmt: skip
    wrong = [*store, "--rule", '"def"', "--rule", '"import"', "--author", "bob"]
    first = _invoke(app, "hypothesis", *right)
    assert first.exit_code == 0, first.output
    assert first.output.startswith("stored: explanation")
    again = _invoke(app, "hypothesis", *right)
    assert again.exit_code == 0 and again.output.startswith("already stored")
    assert _invoke(app, "hypothesis", *wrong).exit_code == 0
    rows = Store.open(planted_path, read_only=True).explanations(PLANTED_SAE, explainer="manual")
    assert len(rows) == 2  # the repeated hypothesis was not stored twice
    by_author = {r.extra["provenance"]["author"]: r for r in rows}
    good, bad = by_author["ada"], by_author["bob"]
    assert good.rules == [{"activates_on": '"LORD"', "strength": 5}, {"activates_on": '"God"', "strength": 3},
                          {"activates_on": '"Israel"', "strength": 2}]  # fmt: skip
    assert good.text == "the names LORD, God and Israel" and good.explainer_version == "manual-v1"
    assert good.extra["provenance"]["source"] == "cli" and good.extra["provenance"]["submitted_at"]
    assert good.example_ids == [] and good.negative_ids == [] and good.status is Status.OK
    # Rules only: the text is the rules, strongest first, every strength defaulted to 5.
    assert bad.text == '"def" (strength 5); "import" (strength 5)'

    scored = _invoke(app, "score", "--store", str(planted_path), "--sae", PLANTED_SAE, "--scorer", "detection",
                     "--negatives", "random_negative", "--explainer", "manual", "--features", "0", "--no-progress")  # fmt: skip
    assert scored.exit_code == 0, scored.output
    scores = {
        eid: Store.open(planted_path, read_only=True).scores(explanation_id=eid)[0]
        for eid in (good.id, bad.id)
    }
    acc = {eid: s.metrics["balanced_accuracy"] for eid, s in scores.items()}
    # The planted tokens are the truth: naming them separates firing from non-firing windows; naming code does not.
    assert acc[good.id] >= 0.9 and acc[bad.id] <= 0.6
    # Nothing was shown to a manual explanation, so no test window had to be replaced.
    assert all(s.metrics["test_windows_seen"] == 0 for s in scores.values())


def test_bad_hypotheses_raise_typed_errors(app, planted_path):
    store = ["--store", str(planted_path), "--sae", PLANTED_SAE]
    cases = [
        ([*store, "--feature", "0", "--rule", '"LORD"', "--strength", "9"], HypothesisError, "strength"),
        ([*store, "--feature", "0"], HypothesisError, "text, as rules, or both"),
        ([*store, "--feature", "0", "--rule", "a", "--rule", "b", "--strength", "1"], HypothesisError, "one per rule"),
        ([*store, "--feature", "4000", "--text", "x"], HypothesisError, "out of range"),
        (["--store", str(planted_path), "--sae", "nope", "--feature", "0", "--text", "x"], UnknownSAEError, "nope"),
        (["--store", str(planted_path.with_name("none.duckdb")), "--sae", PLANTED_SAE, "--feature", "0", "--text", "x"],
         StoreNotFoundError, "No store"),
    ]  # fmt: skip
    before = len(Store.open(planted_path, read_only=True).explanations(PLANTED_SAE))
    for args, error, words in cases:
        result = _invoke(app, "hypothesis", *args)
        assert isinstance(result.exception, error), (args, result.exception)
        assert words in str(result.exception)
    assert len(Store.open(planted_path, read_only=True).explanations(PLANTED_SAE)) == before
    assert not planted_path.with_name("none.duckdb").exists()  # no empty store left behind
    with pytest.raises(HypothesisError, match="at most 5"):
        parse_hypothesis("", [(f'"t{i}"', 1) for i in range(6)])


def test_rule_lines_as_typed_in_the_app():
    assert parse_rule_lines('"LORD" after "the" | 4\n\n  "God"  \n"a|b" | 0') == [
        ('"LORD" after "the"', 4),
        ('"God"', 5),
        ('"a|b"', 0),
    ]
    with pytest.raises(HypothesisError, match="line 1"):
        parse_rule_lines('"LORD" |')
