"""Scorers on hand-made records: simulation, detection, fuzzing, embedding, CoSy, polysemanticity; LLM paths
against the local fake OpenAI server."""

import asyncio
import json
import math

import numpy as np
import pytest

from sae_workbench.evaluation.scorers.cosy import (
    CorpusRuleGenerator,
    CorpusSnippet,
    LLMGenerator,
    cosy_score,
)
from sae_workbench.evaluation.scorers.cosy_summary import DescriptionScore, summarise_cosy
from sae_workbench.evaluation.scorers.detection import (
    ClassificationItem,
    LexicalRuleClassifier,
    LLMClassifier,
)
from sae_workbench.evaluation.scorers.embedding import embedding_score
from sae_workbench.evaluation.scorers.fuzzing import fuzzing_items, score_classification
from sae_workbench.evaluation.scorers.polysemanticity import (
    mean_pairwise_cosine,
    prism_polysemanticity,
    rate_complexity,
    tree_polysemanticity,
    tree_polysemanticity_summary,
)
from sae_workbench.evaluation.scorers.simulation import (
    LLMSimulator,
    UnscorableExplanationError,
    scorable_explanation,
    score_simulation,
    simulation_score,
)
from sae_workbench.examples.records import Record
from sae_workbench.explainers.lexical_simulator import LexicalSimulator
from sae_workbench.llm.client import LLMClient, LLMMalformedOutputError
from sae_workbench.llm.config import LLMConfig
from tests.fake_llm import FakeLLM, fake_llm  # noqa: F401


def rec(wid: int, text: str, acts: list[float]) -> Record:
    """A record from space-separated tokens (each token but the first gets a leading space)."""
    words = text.split()
    tokens = tuple([words[0]] + [" " + w for w in words[1:]])
    return Record(wid, tokens, np.array(acts, dtype=np.float32))


POS = [rec(1, "the dog barked", [0, 4, 0]), rec(2, "a dog ran", [0, 2, 0])]
NEG_EASY = [rec(3, "stocks fell today", [0, 0, 0])]
NEG_CLOSE = [rec(4, "my cat barked", [0, 0, 0])]


def run(coro):
    """Run a coroutine on a fresh event loop."""
    return asyncio.run(coro)


def test_simulation_score_pure_hand_case() -> None:
    # Predictions 5 on both "dog" tokens and on "cat" in the negative.
    pred_pos = [np.array([0, 5, 0.0]), np.array([0, 5, 0.0])]
    pred_neg = [np.array([0, 5, 0.0])]
    s = simulation_score(pred_pos, POS, pred_neg, NEG_CLOSE)
    assert s.false_positive_tokens == 1 and s.negative_tokens == 3
    # pooled pred [0,5,0,0,5,0,0,5,0] vs true [0,4,0,0,2,0,0,0,0]
    p = np.array([0, 5, 0, 0, 5, 0, 0, 5, 0.0])
    t = np.array([0, 4, 0, 0, 2, 0, 0, 0, 0.0])
    assert s.pearson == pytest.approx(np.corrcoef(p, t)[0, 1])
    assert s.pearson_positives == pytest.approx(np.corrcoef(p[:6], t[:6])[0, 1])


def test_structured_simulation_scales_by_strength_and_takes_max() -> None:
    expl = scorable_explanation(
        "", [{"activates_on": '"dog"', "strength": 5}, {"activates_on": '"barked"', "strength": 1}]
    )
    s = run(score_simulation(LexicalSimulator(), expl, POS, NEG_CLOSE))
    # "barked" predicted at 5 × 1/5 = 1 → not a false positive (needs > 1).
    assert s.false_positive_tokens == 0
    broad = scorable_explanation('"dog" or "barked" or "cat"')
    sb = run(score_simulation(LexicalSimulator(), broad, POS, NEG_CLOSE))
    assert sb.false_positive_tokens == 2 and sb.pearson < s.pearson


def test_unscorable_explanations() -> None:
    with pytest.raises(UnscorableExplanationError, match="empty"):
        scorable_explanation("  ")
    with pytest.raises(UnscorableExplanationError, match="cannot be parsed"):
        scorable_explanation("x", [{"activates_on": "dog"}])


def test_detection_and_fuzzing_lexical_close_vs_easy_negatives() -> None:
    clf = LexicalRuleClassifier(LexicalSimulator())
    assert clf.name == "lexical-rule-match"
    broad = scorable_explanation('"barked" or "dog"')
    easy = run(score_classification(clf, "detection", broad, POS, NEG_EASY))
    close = run(score_classification(clf, "detection", broad, POS, NEG_CLOSE))
    assert easy.accuracy == 1.0 and close.accuracy == pytest.approx(2 / 3)
    assert close.balanced_accuracy == pytest.approx(0.5)
    correct = scorable_explanation('"dog"')
    fz = run(score_classification(clf, "fuzzing", correct, POS, NEG_CLOSE, seed=0))
    # 2 true highlights (label 1) + 2 mis-highlighted positives + 1 negative (label 0); "dog" never lands on a wrong
    # token, so the correct explanation is right on all five.
    assert fz.n == 5 and fz.tp == 2 and fz.tn == 3


def test_fuzzing_items_hand_case_labels_counts_and_seed() -> None:
    # Active counts 2, 2, 2: inactive tokens {0, 3}, {1}, none.
    two_idle = rec(10, "a b c d", [0, 1, 1, 0])
    one_idle = rec(11, "e f g", [1, 0, 1])
    none_idle = rec(12, "h i", [1, 1])
    neg = rec(13, "j k l m n", [0, 0, 0, 0, 0])
    items = fuzzing_items([two_idle, one_idle, none_idle], [neg], seed=3)
    assert [(it.record.window_id, it.label, it.kind) for it in items] == [
        (10, True, "positive"), (11, True, "positive"), (12, True, "positive"),
        (10, False, "mis_highlighted"), (11, False, "mis_highlighted"),  # 12 has no token where it does not fire
        (13, False, "negative"),
    ]  # fmt: skip
    marks = [it.highlighted.tolist() for it in items]  # type: ignore[union-attr]
    assert marks[:3] == [[False, True, True, False], [True, False, True], [True, True]]
    # Same number of highlights as the true ones, only where the feature does not fire: forced here.
    assert marks[3] == [True, False, False, True]
    assert marks[4] == [False, True, False]  # capped at the one inactive token
    assert sum(marks[5]) == 2  # every positive has 2 active tokens, so the negative gets 2 highlights
    again = fuzzing_items([two_idle, one_idle, none_idle], [neg], seed=3)
    assert [it.highlighted.tolist() for it in again] == marks  # type: ignore[union-attr]
    # The seed is used: a long positive's single mis-highlight lands elsewhere under some other seed.
    long = rec(14, " ".join(f"t{i}" for i in range(30)), [0.0] * 29 + [1.0])
    spots = {int(np.flatnonzero(fuzzing_items([long], [], seed=s)[1].highlighted)[0]) for s in range(5)}  # type: ignore[arg-type]
    assert len(spots) > 1 and 29 not in spots


def test_fuzzing_mis_highlights_separate_correct_from_over_broad() -> None:
    # Length-2 windows force the highlights: the positive's wrong copy marks "barked", the negative's one token.
    pos = [rec(20, "dog barked", [3, 0])]
    neg = [rec(21, "barked", [0])]
    clf = LexicalRuleClassifier(LexicalSimulator())
    correct = run(score_classification(clf, "fuzzing", scorable_explanation('"dog"'), pos, neg, seed=0))
    broad = run(
        score_classification(clf, "fuzzing", scorable_explanation('"dog" or "barked"'), pos, neg, seed=0)
    )
    assert (correct.tp, correct.fp, correct.tn) == (1, 0, 2) and correct.balanced_accuracy == 1.0
    assert (broad.tp, broad.fp, broad.tn) == (1, 2, 0) and broad.balanced_accuracy == 0.5


def test_lexical_fuzzing_rule_needs_every_highlighted_token_predicted_active() -> None:
    # delphi: "an example is only correct if every marked token is representative of the feature".
    r = rec(30, "dog cat dog", [1, 0, 1])
    clf = LexicalRuleClassifier(LexicalSimulator())
    items = [
        ClassificationItem(r, True, np.array([True, False, True])),
        # Half of the highlights right is not right; nothing highlighted is not right either.
        ClassificationItem(r, False, np.array([True, True, False]), "mis_highlighted"),
        ClassificationItem(r, False, np.array([False, False, False]), "negative"),
    ]
    preds = run(clf.classify("fuzzing", scorable_explanation('"dog"'), items))
    assert preds.tolist() == [True, False, False]


def test_fuzzing_items_are_seeded_and_label_correct_highlights() -> None:
    a = fuzzing_items(POS, NEG_CLOSE, seed=3)
    b = fuzzing_items(POS, NEG_CLOSE, seed=3)
    assert [it.label for it in a] == [True, True, False, False, False]
    assert a[0].highlighted is not None and a[0].highlighted.tolist() == [False, True, False]
    assert all(np.array_equal(x.highlighted, y.highlighted) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    assert int(a[4].highlighted.sum()) == 1  # type: ignore[union-attr]
    assert not any(it.highlighted[1] for it in a[2:4])  # type: ignore[index]  # never on the active "dog"


def test_embedding_score_pure() -> None:
    q = np.array([1.0, 0.0])
    s = embedding_score(q, np.array([[1.0, 0.1], [0.9, 0.2]]), np.array([[0.0, 1.0], [0.9, 0.2]]))
    # positive sims ≈ .995, .976; negatives 0, .976 (tie with a positive) → (2 + 1 + 0.5) / 4.
    assert s.auroc == pytest.approx(0.875)


def test_cosy_score_and_prism_summaries() -> None:
    s = cosy_score(np.array([3.0, 5.0]), np.array([0.0, 2.0]))
    assert (
        s.auc == 1.0 and s.mad == pytest.approx(3 / math.sqrt(2)) and s.mannwhitney_p == pytest.approx(1 / 6)
    )
    zero = cosy_score(np.array([1.0]), np.array([0.0, 0.0]))
    assert zero.mad == 0.0 and zero.auc == 1.0
    weak = cosy_score(np.array([0.0, 0.0]), np.array([0.0, 0.0]))
    assert weak.auc == 0.5
    rows = [DescriptionScore(0, s.auc, s.mad), DescriptionScore(0, weak.auc, weak.mad),
            DescriptionScore(1, weak.auc, weak.mad)]  # fmt: skip
    agg_max, agg_mean = summarise_cosy(rows, "max"), summarise_cosy(rows, "mean")
    assert agg_max.auc_mean == pytest.approx((1.0 + 0.5) / 2)
    # PRISM (mean) averages every description row, as the paper's notebook (fidelity audit §4): (1 + .5 + .5) / 3
    assert agg_mean.auc_mean == pytest.approx(2 / 3)
    assert agg_max.mad_mean == pytest.approx(3 / math.sqrt(2) / 2)


def test_corpus_rule_generator_composes_matching_texts() -> None:
    snippets = [CorpusSnippet(i, tuple(r.tokens)) for i, r in enumerate([*POS, *NEG_EASY, *NEG_CLOSE])]
    gen = CorpusRuleGenerator(snippets, seed=0)
    texts = run(gen.generate('"dog"', 10))
    assert sorted(texts) == ["a dog ran", "the dog barked"]
    from sae_workbench.evaluation.scorers.cosy import GeneratorError

    with pytest.raises(GeneratorError):
        run(gen.generate('"zebra"', 10))


def test_polysemanticity_formulas() -> None:
    # Rows at 0°, 0°, 90°: cosines 1, 0, 0 → mean 1/3.
    assert mean_pairwise_cosine(np.array([[1.0, 0], [2.0, 0], [0, 1.0]])) == pytest.approx(1 / 3)
    assert math.isnan(mean_pairwise_cosine(np.array([[1.0, 0]])))
    p = prism_polysemanticity(np.array([[1.0, 0], [1.0, 0]]), np.eye(2).repeat(3, axis=0), seed=0)
    assert p.similarity == pytest.approx(1.0) and p.n_descriptions == 2
    # The random baseline, on pools where it is known by hand. Orthonormal pool: every pair of others has cosine 0.
    assert prism_polysemanticity(np.ones((2, 4)), np.eye(4), seed=0).random_baseline == pytest.approx(
        0.0, abs=1e-12
    )
    # A pool of exactly k others: every draw is the whole pool (rows at 0°, 0°, 90°: cosines 1, 0, 0 → 1/3), and the
    # feature's own descriptions (all at 45°) never enter it.
    pool = np.array([[1.0, 0, 0], [3.0, 0, 0], [0, 1.0, 0]])
    own = np.array([[1.0, 1.0, 0]] * 3)
    assert prism_polysemanticity(own, pool, seed=5).random_baseline == pytest.approx(1 / 3)
    # Three rows along x and three along y, k = 2 drawn without replacement: a pair is the same direction (cosine 1)
    # with probability 2·C(3,2)/C(6,2) = 6/15, else orthogonal (0): expectation 0.4 (with replacement it would be
    # 0.5). 4000 draws: standard error sqrt(.4·.6/4000) = 0.008, so ±0.03 is four of them.
    many = prism_polysemanticity(np.ones((2, 2)), np.eye(2).repeat(3, axis=0), seed=1, n_draws=4000)
    assert many.random_baseline == pytest.approx(0.4, abs=0.03)
    # Fewer others than descriptions: no baseline; one description: no similarity either.
    assert math.isnan(prism_polysemanticity(np.ones((3, 2)), np.eye(2), seed=0).random_baseline)
    assert math.isnan(prism_polysemanticity(np.ones((1, 2)), np.eye(2), seed=0).similarity)
    # best 0.5 at cap 3; running best: .2, .46 (≥ .45 = 0.9 × .5) → 2.
    assert tree_polysemanticity({1: 0.2, 2: 0.46, 3: 0.5, 4: float("nan"), 5: 0.4}) == 2
    assert tree_polysemanticity({1: 0.5, 2: 0.3}) == 1
    assert tree_polysemanticity({1: -0.1, 2: 0.0}) is None
    assert tree_polysemanticity({1: float("nan")}) is None
    ci = tree_polysemanticity_summary([1, 3, None])
    assert ci.n == 2 and ci.mean == 2.0


def _cfg(server: FakeLLM) -> LLMConfig:
    return LLMConfig(model="fake", base_url=server.base_url, timeout_s=2, backoff_base_s=0.001, max_reasks=1)


def test_simulation_scorer_with_the_llm_simulator(fake_llm: FakeLLM) -> None:  # noqa: F811
    # One call for all records (explainers.simulate.LLMSimulator); the first answer is malformed → re-asked.
    fake_llm.push("not json", json.dumps({"predictions": [[0, 5, 0], [0, 5, 0], [0, 0, 5]]}))

    async def go():
        async with LLMClient(_cfg(fake_llm)) as llm:
            sim = LLMSimulator(llm)
            return sim.name, await score_simulation(sim, scorable_explanation("dogs"), POS, NEG_CLOSE)

    name, s = run(go())
    assert name == "llm:fake" and fake_llm.calls == 2
    assert s.false_positive_tokens == 1 and s.pearson_positives == pytest.approx(
        np.corrcoef([0, 5, 0, 0, 5, 0], [0, 4, 0, 0, 2, 0])[0, 1]
    )


def test_llm_classifier_rejects_out_of_range_after_reasks(fake_llm: FakeLLM) -> None:  # noqa: F811
    fake_llm.default = "[0, 2]"

    async def go():
        async with LLMClient(_cfg(fake_llm)) as llm:
            return await score_classification(
                LLMClassifier(llm), "detection", scorable_explanation("d"), POS, []
            )

    with pytest.raises(LLMMalformedOutputError, match=r"\[0, 1\]"):
        run(go())


def test_llm_classifier_batches_and_llm_generator_reasks(fake_llm: FakeLLM) -> None:  # noqa: F811
    def responder(body):
        content = body["messages"][-1]["content"]
        if "Write 3 different" in content and len(body["messages"]) == 1:
            return "one\ntwo"  # wrong count → re-ask
        if "Write 3 different" in content or "could not be parsed" in content:
            return "one\ntwo\nthree"
        n = content.count("Text ")
        return json.dumps([1] * n)

    fake_llm.responder = responder

    async def go():
        async with LLMClient(_cfg(fake_llm)) as llm:
            clf = LLMClassifier(llm, batch_size=2)
            m = await score_classification(clf, "detection", scorable_explanation("dogs"), POS, NEG_EASY)
            texts = await LLMGenerator(llm).generate("dogs", 3)
            ratings = await rate_complexity(llm, [])
            return m, texts, ratings

    m, texts, ratings = run(go())
    assert m.n == 3 and m.tp == 2 and m.fp == 1
    assert texts == ["one", "two", "three"] and ratings == []
    assert fake_llm.calls == 2 + 2  # two detection batches (2 + 1 windows), generator ask + re-ask


def test_rule_text_with_loose_quotes_never_raises() -> None:
    # Several joined descriptions (PRISM's numbered text) or LLM free text can pair quotes across a newline or
    # around a backslash; the lexical matcher must read them rather than crash the scoring batch.
    from sae_workbench.examples.rule_language import match_rule_text, parse_rule_text

    assert parse_rule_text('"a\nb" or "\\x"') == (["a\nb", "\\x"], [])
    assert match_rule_text('1. "def" (x)\n2. "\\q" after "y', [" def", " q"]).tolist() == [True, False]
