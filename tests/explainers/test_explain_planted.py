"""Planted features in a real store over real corpus windows: lexical recovery, dead features, offline tree search
improving on its roots, and the job's provenance/resume bookkeeping (PRISM at its defaults: test_prism_defaults.py)."""

import pytest

from sae_workbench.examples.rule_language import parse_rule_text
from sae_workbench.explainers.job import ExplainConfig, ExplainJob, config_key
from sae_workbench.status import Status
from tests.explainers.test_explain_support import (
    PLANTED_SAE,
    PLANTED_TOKENS,
    build_planted_store,
)


@pytest.fixture(scope="module")
def planted(tmp_path_factory, tiny_model):
    return build_planted_store(tmp_path_factory.mktemp("planted"), tiny_model.tokenizer)


def test_lexical_recovers_planted_token_set_and_records_dead(planted):
    summary = ExplainJob(planted, PLANTED_SAE, ExplainConfig("lexical"), progress=False).run([0, 2, 3])
    assert (summary.explained, summary.dead) == (2, 1)
    by_feature = {e.feature: e for e in planted.explanations(PLANTED_SAE, explainer="lexical")}
    # The planted feature fires on the words in any case; the rules name exact tokens (case kept: "Lord", "LORD").
    found = {t for r in by_feature[0].rules for t in parse_rule_text(r["activates_on"])[0]}
    assert {t.lower() for t in found} == set(PLANTED_TOKENS)
    strengths: dict[str, int] = {}
    for r in by_feature[0].rules:
        word = parse_rule_text(r["activates_on"])[0][0].lower()
        strengths[word] = max(strengths.get(word, 0), r["strength"])
    assert strengths["lord"] > strengths["god"] > strengths["israel"]
    dead = by_feature[2]
    assert dead.status is Status.DEAD and dead.text == "" and dead.rules is None
    assert by_feature[3].text.startswith("Lexical explainer (activation statistics, not an LLM)")
    # provenance
    e = by_feature[0]
    assert (
        e.explainer_version.startswith("lexical") and e.llm_model == "" and e.example_ids and e.negative_ids
    )
    assert e.config_key == config_key(PLANTED_SAE, 0, ExplainConfig("lexical"), None)
    # a rerun skips everything (resumable, no duplicates)
    again = ExplainJob(planted, PLANTED_SAE, ExplainConfig("lexical"), progress=False).run([0, 2, 3])
    assert (again.skipped, again.explained) == (3, 0)
    assert len(planted.explanations(PLANTED_SAE, explainer="lexical")) == 3


def test_offline_tree_search_improves_on_its_roots(planted):
    cfg = ExplainConfig("tree", negatives="RANDOM_NEGATIVE")
    ExplainJob(planted, PLANTED_SAE, cfg, progress=False).run([4])
    (e,) = planted.explanations(PLANTED_SAE, feature=4, explainer="tree")
    nodes = e.extra["tree"]
    roots = [n for n in nodes if n["parent"] is None]
    assert len(roots) <= 3 and len(nodes) > len(roots)
    best_root_valid = max(n["valid_score"] for n in roots)
    assert e.extra["valid_score"] > best_root_valid + 0.05
    # the returned node is the best by VALIDATION over the whole tree
    assert e.extra["valid_score"] == pytest.approx(max(n["valid_score"] for n in nodes), abs=1e-6)
    splits = e.extra["splits"]
    train, valid, test = (
        set(splits[k]["positives"] + splits[k]["negatives"]) for k in ("train", "valid", "test")
    )
    assert not (train & valid) and not (train & test) and not (valid & test)
    assert len(splits["train"]["positives"]) == 10 and len(splits["valid"]["negatives"]) == 10
    assert e.extra["proposer"] == "lexical-editor" and e.text.startswith("Lexical tree search")


@pytest.mark.parametrize("feature", [0, 1, 3, 4])
def test_store_text_scores_equal_prism_text_score_of_the_records(planted, feature):
    from sae_workbench.examples.loading import load_records
    from sae_workbench.explainers.prism import text_score

    ids, scores = planted.window_text_scores(PLANTED_SAE, feature)
    maxima = planted.window_maxima(PLANTED_SAE, feature)
    assert ids.tolist() == maxima.window_ids.tolist() and len(ids) > 0
    corpus = planted.index_progress(PLANTED_SAE).corpus
    records = load_records(planted, PLANTED_SAE, corpus, feature, ids.tolist())
    expected = [text_score(r) for r in records]
    assert scores == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert (scores > 0).sum() > 0
