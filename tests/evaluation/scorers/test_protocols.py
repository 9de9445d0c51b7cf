"""The Explainer/Scorer protocols and the one shared split, on a real store with planted features.

- A toy explainer and a toy scorer, one file each (tests/explainers/toy_explainer.py, tests/evaluation/scorers/toy_scorer.py),
  join the registries with one line each and run through the explain and score jobs.
- No scored test window was ever in an explainer's input: for every explainer (lexical, one-shot through the scripted
  LLM server, offline tree, offline PRISM) and every negative source of the explain run, scored under every negative
  source (fidelity audit §0 #1: 6 of 10 one-shot test positives used to be windows the explainer was shown).
"""

from __future__ import annotations

import pytest

from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring
from sae_workbench.evaluation.scorers.registry import SCORERS
from sae_workbench.examples.sampling import NegativeSource
from sae_workbench.examples.testsets import SplitConfig, draw_split
from sae_workbench.explainers.job import ExplainConfig, ExplainJob
from sae_workbench.explainers.prism import PrismConfig, PrismExplainer
from sae_workbench.explainers.registry import EXPLAINERS
from sae_workbench.llm.config import LLMConfig
from sae_workbench.status import Status
from tests.evaluation.scorers.toy_scorer import ToyScorer
from tests.explainers.test_explain_llm import smart
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.explainers.toy_explainer import ToyExplainer
from tests.fake_llm import FakeLLM

SOURCES = [s.value for s in NegativeSource]


@pytest.fixture(scope="module")
def planted(tmp_path_factory, tiny_model):
    return build_planted_store(tmp_path_factory.mktemp("protocols"), tiny_model.tokenizer)


def test_a_toy_explainer_and_scorer_join_with_one_line_each(planted, monkeypatch):
    monkeypatch.setitem(EXPLAINERS, "toy", ToyExplainer)
    monkeypatch.setitem(SCORERS, "toy", ToyScorer)
    config = ExplainConfig("toy", negatives="RANDOM_NEGATIVE")
    summary = ExplainJob(planted, PLANTED_SAE, config, progress=False).run([0, 2, 3])
    assert (summary.explained, summary.dead) == (2, 1)
    by_feature = {e.feature: e for e in planted.explanations(PLANTED_SAE, explainer="toy")}
    # planted: feature 3 fires on LORD only; feature 0's strongest token is LORD (5.0 vs God 3.0, Israel 2.0);
    # tokens keep their case (examples.records.norm)
    assert by_feature[3].rules == [{"activates_on": '"LORD"', "strength": 5}]
    assert by_feature[0].rules == [{"activates_on": '"LORD"', "strength": 5}]
    assert by_feature[2].status is Status.DEAD and by_feature[2].text == ""

    result = run_scoring(planted, PLANTED_SAE, ScoreConfig("toy", "RANDOM_NEGATIVE"), progress=False)
    assert (result.scored, result.dead, result.failed) == (2, 1, 0)
    scores = {s.explanation_id: s for s in planted.scores(sae_id=PLANTED_SAE, scorer="toy")}
    lord_only = scores[by_feature[3].id]
    # every test positive of feature 3 peaks on LORD, and a RANDOM_NEGATIVE window of feature 3 has no LORD
    assert lord_only.status is Status.OK and lord_only.metrics["hit_rate"] == 1.0
    assert lord_only.metrics["n_positives"] == 10 and lord_only.score_key
    assert scores[by_feature[2].id].status is Status.DEAD
    again = run_scoring(planted, PLANTED_SAE, ScoreConfig("toy", "RANDOM_NEGATIVE"), progress=False)
    assert (again.scored, again.skipped) == (0, 3)


def _llm(server: FakeLLM) -> LLMConfig:
    return LLMConfig(model="fake", base_url=server.base_url, backoff_base_s=0.01, backoff_max_s=0.05)


@pytest.mark.slow
def test_no_scored_window_was_an_explainer_input(planted):
    features = [0, 3, 4]
    small_prism = PrismConfig(percentile=90.0, n_texts=40, k=2)
    with FakeLLM(responder=smart) as server:
        for source in SOURCES:
            for name in ("lexical", "oneshot", "tree", "prism"):
                llm = _llm(server) if name == "oneshot" else None
                config = ExplainConfig(name, negatives=source)
                method = PrismExplainer(small_prism) if name == "prism" else config
                ExplainJob(planted, PLANTED_SAE, method, llm, progress=False).run(features)
    methods = (
        "lexical",
        "oneshot",
        "tree",
        "prism",
    )  # the module's store also holds the toy test's explanations
    explanations = {e.id: e for e in planted.explanations(PLANTED_SAE) if e.explainer in methods}
    assert len(explanations) == len(SOURCES) * 3 * len(features) + len(features)  # PRISM ignores the source
    for source in SOURCES:
        for name in methods:
            run_scoring(
                planted, PLANTED_SAE, ScoreConfig("simulation", source), explainer=name, progress=False
            )
    scores = [
        s for s in planted.scores(sae_id=PLANTED_SAE, scorer="simulation") if s.explanation_id in explanations
    ]
    assert len(scores) == len(SOURCES) * len(explanations)
    corpus = planted.index_progress(PLANTED_SAE).corpus
    for s in scores:
        e = explanations[s.explanation_id]
        # What the explainer was shown, measured here, not read from the ids the explanation reports (which the
        # scorer filters by, so comparing with them could not fail): the train and valid thirds of the split the
        # explanation records, redrawn (the tree reads train and valid, the others train); for PRISM the texts each
        # cluster sent to the describer.
        if e.explainer == "prism":
            shown = {int(w) for c in e.extra["clusters"] for w in c["shown_ids"]}
        else:
            split = draw_split(planted, PLANTED_SAE, e.feature, SplitConfig.from_params(e.sampling["split"]))
            # tree: train and valid; lexical: train (positives, and negatives as background); one-shot: train
            # positives (its prompt shows no negative)
            read = {"tree": [*split.train.ids, *split.valid.ids], "lexical": list(split.train.ids),
                    "oneshot": list(split.train.positives)}[e.explainer]  # fmt: skip
            shown = set(read) | set(e.example_ids) | set(e.negative_ids)
        tested = set(s.provenance["positive_ids"]) | set(s.provenance["negative_ids"])
        assert s.status is Status.OK, (e.explainer, s.metrics)
        assert not tested & shown, (e.explainer, e.sampling, s.negative_source, sorted(tested & shown))
        docs = {w.source for w in planted.get_windows(corpus, sorted(shown))}
        assert not {w.source for w in planted.get_windows(corpus, sorted(tested))} & docs, (e.explainer, s.id)
        # PRISM reads the top texts of the whole corpus, so it saw test positives the spares cannot all replace
        # here (the planted corpus's top chunk is the 30 split positives themselves, no spares): fewer are scored.
        held = s.provenance["held_out"]
        # ten positives, or the split says how many it could not hold out (never a related window instead)
        assert len(s.provenance["positive_ids"]) + held["test_positives_short"] == 10, (e.explainer, held)
        same_split = (
            e.explainer in ("oneshot", "tree") and e.sampling["split"]["negatives"] == s.negative_source
        )
        if same_split:  # the split's own test third, untouched
            split = draw_split(
                planted, PLANTED_SAE, e.feature, ScoreConfig("simulation", s.negative_source).split()
            )
            assert s.provenance["test_windows_seen"] == 0
            related = sum(held[f"held_out_{k}"] for k in ("same_document", "adjacent", "near_duplicate"))
            kept = [i for i in split.test.positives if i in s.provenance["positive_ids"]]
            # the split's own test third, less only the windows held out for a shown window's document, neighbour
            # or text run
            assert len(kept) + related >= len(split.test.positives), (e.explainer, held)
