"""What an explanation's author was shown is held out of its test windows (issue 33 items 2 and 3): by window, text,
document, adjacency and 16-token near-duplicates; "seen" is computed by the scorer from what the explanation records
(PRISM: the windows sent to the describer; a hypothesis: the windows its page showed, or `--seen`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sae_workbench.evaluation.scorers.job import ScoreConfig, TestSetBuilder, run_scoring
from sae_workbench.examples import testsets
from sae_workbench.examples.sampling import NegativeSource
from sae_workbench.examples.testsets import SplitConfig, draw_split
from sae_workbench.status import Status
from sae_workbench.store import Store

from .planted_docs import ALPHA, BETA, CORPUS, SAE_ID, build_docs_store, explanation

RANDOM_NEG = NegativeSource.RANDOM_NEGATIVE


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two-windows-per-document store, built once."""
    path = tmp_path_factory.mktemp("held") / "store.duckdb"
    build_docs_store(path)
    return path


def copy(docs: Path, tmp_path: Path) -> Store:
    """A fresh copy of the module's store."""
    path = tmp_path / "store.duckdb"
    path.write_bytes(docs.read_bytes())
    return Store.open(path)


def _sources(store: Store, ids: list[int]) -> set[str]:
    return {w.source for w in store.get_windows(CORPUS, ids)}


def test_no_test_window_shares_a_document_with_or_is_adjacent_to_a_shown_one(
    docs: Path, tmp_path: Path
) -> None:
    """Feature 0's top windows come in adjacent pairs from the same documents; the explainer saw train + valid."""
    store = copy(docs, tmp_path)
    cfg = SplitConfig(negatives=RANDOM_NEG, record_length=32)
    split = draw_split(store, SAE_ID, ALPHA, cfg)
    shown = [*split.train.positives, *split.valid.positives, *split.train.negatives, *split.valid.negatives]
    eid = store.add_explanation(explanation(ALPHA, cfg, example_ids=list(shown)))
    (expl,) = [e for e in store.explanations(sae_id=SAE_ID) if e.id == eid]
    tests = TestSetBuilder(store, SAE_ID, ScoreConfig("detection")).build(expl)
    test_ids = [*tests.provenance["positive_ids"], *tests.provenance["negative_ids"]]
    # before: the split's own test third, drawn beside train/valid from the same 15 documents
    assert not _sources(store, test_ids) & _sources(store, shown)
    assert not {i + d for i in shown for d in (-1, 1)} & set(test_ids)
    held = tests.provenance["held_out"]
    assert held["held_out_same_document"] > 0  # the partners of shown windows were there and were skipped
    assert len(tests.provenance["positive_ids"]) == 10 and held["test_positives_short"] == 0
    assert held["test_positives_beyond_top_chunk"] > 0  # the top chunk's 15 documents were all shown


def test_too_few_documents_is_reported_not_leaked(tmp_path: Path) -> None:
    """Five active documents, all shown: nothing held out is left, and the metrics say how short the test third is."""
    store = build_docs_store(tmp_path / "store.duckdb", n_docs=40, n_active_docs=5, n_beta_windows=0)
    cfg = SplitConfig(negatives=RANDOM_NEG, record_length=32, per_split=2)
    shown = [0, 2, 4, 6, 8]  # one window of each active document
    eid = store.add_explanation(explanation(ALPHA, cfg, example_ids=shown))
    (expl,) = [e for e in store.explanations(sae_id=SAE_ID) if e.id == eid]
    tests = TestSetBuilder(store, SAE_ID, ScoreConfig("detection", per_split=2)).build(expl)
    assert not _sources(store, tests.provenance["positive_ids"]) & _sources(store, shown)
    assert tests.provenance["held_out"]["test_positives_short"] > 0


def test_no_held_out_negative_is_recorded_no_negatives_not_a_one_class_number(tmp_path: Path) -> None:
    """Every inactive document was shown: no negative is held out. Detection (balanced accuracy) and embedding (AUROC)
    contrast two classes, so they record NO_NEGATIVES with the shortfall; simulation still scores the positives."""
    store = build_docs_store(tmp_path / "store.duckdb", n_docs=12, n_active_docs=4, n_beta_windows=0)
    cfg = SplitConfig(negatives=RANDOM_NEG, record_length=32, per_split=2)
    shown = [2 * d for d in range(4, 12)]  # one window of each of the 8 documents where alpha never fires
    store.add_explanation(explanation(ALPHA, cfg, example_ids=shown))
    for scorer in ("detection", "embedding", "simulation"):
        run_scoring(store, SAE_ID, ScoreConfig(scorer, per_split=2), progress=False)
    by_scorer = {s.scorer: s for s in store.scores(sae_id=SAE_ID)}
    for scorer in ("detection", "embedding"):  # before: ok, balanced accuracy = recall and AUROC null
        assert by_scorer[scorer].status is Status.NO_NEGATIVES, by_scorer[scorer]
        assert by_scorer[scorer].metrics["test_negatives_short"] == 2
    assert by_scorer["simulation"].status is Status.OK
    assert by_scorer["simulation"].provenance["negative_ids"] == []


def test_a_near_duplicate_never_straddles_the_split(docs: Path, tmp_path: Path) -> None:
    """A test window sharing a 16-token run with a shown window (boilerplate in another document) is replaced."""
    store = copy(docs, tmp_path)
    cfg = SplitConfig(negatives=RANDOM_NEG, record_length=32)
    split = draw_split(store, SAE_ID, BETA, cfg)
    victim = split.test.positives[0]
    # the explainer was shown a window of another document (not adjacent) that repeats 20 of victim's tokens
    other = next(i for i in range(799, 400, -1) if abs(i - victim) > 1)
    tokens = store.get_windows(CORPUS, [victim])[0].tokens
    copied = np.concatenate([tokens[:21], store.get_windows(CORPUS, [other])[0].tokens[21:]])
    window = store.get_windows(CORPUS, [victim])[0]
    runs = frozenset(testsets._runs(copied))
    shown = testsets.Shown(frozenset({other}), frozenset({"elsewhere"}), frozenset(), runs)
    assert testsets._reason(window, shown) == "near_duplicate"
    fifteen = np.concatenate([tokens[:16], np.full(48, 9999)])  # BOS + 15 shared tokens
    shown15 = testsets.Shown(frozenset({other}), frozenset(), frozenset(), frozenset(testsets._runs(fifteen)))
    assert testsets._reason(window, shown15) == ""  # 15 shared tokens after BOS are not a near-duplicate


def test_prism_keeps_a_test_third_on_a_feature_with_200_active_windows(docs: Path, tmp_path: Path) -> None:
    """PRISM sends at most 5 x 20 windows to the describer; before, every clustered window (all 200) counted as shown
    and the score had no test positive left."""
    from sae_workbench.explainers.job import ExplainJob
    from sae_workbench.explainers.prism import PrismExplainer

    store = copy(docs, tmp_path)
    ExplainJob(store, SAE_ID, PrismExplainer(), progress=False).run([BETA])
    (expl,) = store.explanations(sae_id=SAE_ID, explainer="prism")
    clustered = {w for c in expl.extra["clusters"] for w in c["window_ids"]}
    sent = {w for c in expl.extra["clusters"] for w in c["shown_ids"]}
    assert set(expl.example_ids) == sent and len(sent) <= 100 < len(clustered) == 200
    run_scoring(store, SAE_ID, ScoreConfig("detection", negatives="RANDOM_NEGATIVE"), progress=False)
    (score,) = store.scores(scorer="detection")
    assert len(score.provenance["positive_ids"]) == 10, score.metrics
    assert not set(score.provenance["positive_ids"]) & sent


def test_a_hypothesis_from_the_feature_page_is_scored_on_windows_the_page_did_not_show(
    docs: Path, tmp_path: Path
) -> None:
    from sae_workbench.app import hypotheses, queries

    store = copy(docs, tmp_path)
    path = str(store.path)
    dash = queries.feature_dashboard(path, SAE_ID, ALPHA)
    page = hypotheses.page_window_ids(dash)
    assert {e.window_id for e in dash.top} <= set(page)
    stored = hypotheses.submit_hypothesis(path, SAE_ID, ALPHA, "the word alpha", '"alpha"', "me", page)
    store = Store.open(path)
    (expl,) = [e for e in store.explanations(sae_id=SAE_ID) if e.id == stored.explanation_id]
    assert expl.extra["shown_ids"] == page  # before: nothing recorded, the test third overlapped the top 12
    run_scoring(store, SAE_ID, ScoreConfig("detection", negatives="RANDOM_NEGATIVE"), progress=False)
    (score,) = store.scores(scorer="detection")
    scored = [*score.provenance["positive_ids"], *score.provenance["negative_ids"]]
    assert not set(scored) & set(page)
    assert not _sources(store, scored) & _sources(store, page)
    assert score.metrics["test_windows_seen"] > 0  # the split's own test third held windows the page showed


def test_cli_seen_names_what_was_read(docs: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sae_workbench import cli

    if not any(c.name == "hypothesis" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    store = copy(docs, tmp_path)
    args = ["hypothesis", "--store", str(store.path), "--sae", SAE_ID, "--feature", "0", "--text", "alpha"]
    result = CliRunner().invoke(cli.app, [*args, "--seen", "3, 5,7"])
    assert result.exit_code == 0, result.output
    (expl,) = store.explanations(sae_id=SAE_ID, explainer="manual")
    assert expl.extra["shown_ids"] == [3, 5, 7]
    bad = CliRunner().invoke(cli.app, [*args, "--text", "other", "--seen", "3,x"])
    assert bad.exit_code != 0 and "--seen" in str(bad.exception or bad.output)
