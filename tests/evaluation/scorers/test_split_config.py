"""One split configuration (issue 33 item 1): `score` scores an explanation on the records its author saw (its record
length, its negatives) unless told otherwise, and says when it was told; every score records its record length."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sae_workbench import defaults
from sae_workbench.cli import options
from sae_workbench.evaluation.scorers.job import ScoreConfig, TestSetBuilder, run_scoring
from sae_workbench.examples.sampling import NegativeSource
from sae_workbench.examples.testsets import SplitConfig
from sae_workbench.explainers.base import ExplainConfig
from sae_workbench.store import Store

from .planted_docs import ALPHA, SAE_ID, build_docs_store, explanation

RANDOM = NegativeSource.RANDOM_NEGATIVE


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two-windows-per-document store, built once."""
    path = tmp_path_factory.mktemp("docs") / "store.duckdb"
    build_docs_store(path)
    return path


def copy(docs: Path, tmp_path: Path) -> Store:
    """A fresh copy of the module's store."""
    path = tmp_path / "store.duckdb"
    path.write_bytes(docs.read_bytes())
    return Store.open(path)


def test_score_takes_the_record_length_and_negatives_of_the_explanation(docs: Path, tmp_path: Path) -> None:
    store = copy(docs, tmp_path)
    made = SplitConfig(negatives=RANDOM, record_length=32)
    eid = store.add_explanation(explanation(ALPHA, made, example_ids=[]))
    (expl,) = [e for e in store.explanations(sae_id=SAE_ID) if e.id == eid]
    tests = TestSetBuilder(store, SAE_ID, ScoreConfig("simulation")).build(expl)  # nothing told
    assert {len(r) for r in tests.positives + tests.negatives} == {32}
    assert tests.provenance["record_length"] == 32
    assert tests.provenance["negative_source"] == RANDOM.value
    told = TestSetBuilder(store, SAE_ID, ScoreConfig("simulation", record_length=0)).build(expl)
    assert {len(r) for r in told.positives} == {63}  # whole windows when told so (BOS dropped)


def test_cli_score_scores_32_token_records_without_being_told(docs: Path, tmp_path: Path) -> None:
    from sae_workbench import cli

    if not any(c.name == "score" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    app = cli.app
    store = copy(docs, tmp_path)
    path = store.path
    store.add_explanation(explanation(ALPHA, SplitConfig(negatives=RANDOM, record_length=32), example_ids=[]))
    args = ["score", "--store", str(path), "--sae", SAE_ID, "--scorer", "simulation", "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "told otherwise" not in result.output
    store = Store.open(path, read_only=True)
    (score,) = store.scores(scorer="simulation")
    assert score.provenance["record_length"] == 32
    assert score.negative_source == RANDOM.value
    result = CliRunner().invoke(app, [*args, "--record-length", "0"])
    assert result.exit_code == 0, result.output
    assert "told otherwise: scoring with record length whole windows" in result.output
    store = Store.open(path, read_only=True)
    lengths = sorted(str(s.provenance["record_length"]) for s in store.scores(scorer="simulation"))
    assert lengths == ["32", "None"]


def test_score_preset_paper_scores_32_token_records(docs: Path, tmp_path: Path) -> None:
    """The paper preset sets the record length of every test-record scorer (it changed only cosy before)."""
    from sae_workbench import cli

    if not any(c.name == "score" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    store = copy(docs, tmp_path)
    store.add_explanation(explanation(ALPHA, SplitConfig(negatives=RANDOM, record_length=16), example_ids=[]))
    args = ["score", "--store", str(store.path), "--sae", SAE_ID, "--scorer", "detection", "--no-progress"]
    result = CliRunner().invoke(cli.app, [*args, "--preset", "paper"])
    assert result.exit_code == 0, result.output
    assert "told otherwise: scoring with record length 32" in result.output
    (score,) = Store.open(store.path, read_only=True).scores(scorer="detection")
    assert score.provenance["record_length"] == defaults.RECORD_LEN == 32


def test_every_score_records_its_record_length(docs: Path, tmp_path: Path) -> None:
    store = copy(docs, tmp_path)
    store.add_explanation(explanation(ALPHA, SplitConfig(negatives=RANDOM, record_length=16), example_ids=[]))
    run_scoring(store, SAE_ID, ScoreConfig("detection"), progress=False)
    for score in store.scores():
        assert "record_length" in score.provenance
        assert score.provenance["record_length"] == 16


def test_explain_and_score_nest_one_split_config() -> None:
    split = options.split_config("RANDOM_NEGATIVE", 3, 32, 10)
    explain = ExplainConfig("lexical", split_config=split)
    score = ScoreConfig("simulation", split_config=split)
    assert explain.split() is split and score.split() is split
    assert (explain.negatives, explain.seed, explain.record_len) == ("RANDOM_NEGATIVE", 3, 32)
    assert split.embed_crop == split.record_length == defaults.RECORD_LEN


def test_score_declares_its_record_length_and_negatives_in_the_options_module() -> None:
    """Score's record length was a local `--record-length` under another parameter name, so the shared-options scan
    never saw it."""
    from sae_workbench.cli.score import score

    hints = typing.get_type_hints(score, include_extras=True)
    for param, flag in (("record_len", "--record-len"), ("negatives", "--negatives")):
        assert param in inspect.signature(score).parameters, param
        (info,) = hints[param].__metadata__
        assert isinstance(info, typer.models.OptionInfo)
        assert any(info is getattr(v, "__metadata__", (None,))[0] for v in vars(options).values()), param
        assert flag in (info.default, *(info.param_decls or ()))


def test_the_literal_32_lives_in_defaults_only() -> None:
    """Every default record length (explainers, split, embedding crop) reads defaults.RECORD_LEN."""
    import re

    root = Path(__file__).resolve().parents[3]
    offenders = []
    for rel in ("explainers", "evaluation/scorers", "workbench/examples", "workbench/cli"):
        for file in (root / rel).rglob("*.py"):
            for n, line in enumerate(file.read_text().splitlines(), 1):
                if re.search(r"(record_len|record_length|embed_crop|EMBED_CROP)\b[^=\n]*=\s*32\b", line):
                    offenders.append(f"{file.relative_to(root)}:{n}")
    assert not offenders
