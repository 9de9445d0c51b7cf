"""Planted features over real default-corpus windows: close negatives must expose an over-broad explanation.

Feature 0 fires on the token "def" (any spelling) only in Python code (stdlib sources and the code samples of the Python docs).
The correct explanation names " def"; the over-broad one fires on any common Python keyword ("Python code"). Under
SIMILAR_NEGATIVE (code windows that do not fire) the correct explanation must win by a wider margin than under
RANDOM negatives. Feature 1 never fires (its score is recorded as no_activations); one explanation is empty.

`build_planted_store` is shared with bench/score_bench.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sae_workbench.evaluation.scorers.detection import LexicalRuleClassifier
from sae_workbench.evaluation.scorers.fuzzing import fuzzing_items, score_classification
from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring
from sae_workbench.evaluation.scorers.simulation import scorable_explanation
from sae_workbench.examples.records import Record
from sae_workbench.explainers.lexical_simulator import LexicalSimulator
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, Store

SAE_ID = "planted-def"
CONTEXT = 32
N_WINDOWS = 1500
SMALL_WINDOWS = 400
DEF_FEATURE, DEAD_FEATURE = 0, 1
CORRECT = ExplanationRecord(
    sae_id=SAE_ID,
    feature=DEF_FEATURE,
    explainer="planted-correct",
    explainer_version="test",
    prompt_version="",
    llm_model="",
    llm_params={},
    sampling={},
    example_ids=[],
    negative_ids=[],
    text="the keyword def that starts a Python function definition",
    rules=[{"activates_on": '"def"', "strength": 5}],
    config_key="planted-correct",
)
BROAD = ExplanationRecord(
    **{
        **CORRECT.__dict__,
        "explainer": "planted-broad",
        "text": "Python source code",
        "rules": [
            {
                "activates_on": '"def" or "return" or "self" or "import" or "none" or "elif" or "=" or "raise"',
                "strength": 5,
            }
        ],
        "config_key": "planted-broad",
    }
)


def build_planted_store(path: Path, n_windows: int = N_WINDOWS, extra_tokens: tuple[str, ...] = ()) -> Store:
    """A store with default-corpus windows (SmolLM2 tokenizer), planted activations and four explanations.

    Feature 2 + i fires on the token `extra_tokens[i]` anywhere and gets a correct explanation (for benchmarks).
    """
    from sae_workbench.corpus import iter_windows, resolve_corpus
    from sae_workbench.models import tiny_tokenizer
    from sae_workbench.sae.vocab import vocab_strings

    tokenizer = tiny_tokenizer()
    strings_V = vocab_strings(tokenizer)
    corpus = resolve_corpus("default")
    store = Store.open(path)
    store.register_sae(
        SAE_ID, "tiny", "blocks.0.hook_resid_post", 64, 2 + len(extra_tokens), {"planted": True}
    )
    store.start_index(SAE_ID, corpus.name, CONTEXT, None, {"planted": "def in Python code"})
    for batch in iter_windows(corpus, tokenizer, CONTEXT, n_tokens=CONTEXT * n_windows, batch_size=1000):
        token_strings = strings_V[batch.tokens_BT]
        is_code = np.array([s.startswith(("stdlib:", "pydoc:")) for s in batch.sources])
        # "def" with or without its leading space (" def", "def"): the lexical rule '"def"' names exactly this token
        # set (quoted tokens match case-sensitively after stripping surrounding whitespace).
        is_def_BT = np.char.strip(token_strings.astype(str)) == "def"
        hit_BT = is_def_BT & is_code[:, None] & batch.mask_BT
        rows, cols = np.nonzero(hit_BT)
        feats = np.full(len(rows), DEF_FEATURE, dtype=np.int32)
        for i, tok in enumerate(extra_tokens):
            r, c = np.nonzero((token_strings == tok) & batch.mask_BT)
            rows, cols = np.r_[rows, r], np.r_[cols, c]
            feats = np.r_[feats, np.full(len(r), 2 + i, dtype=np.int32)]
        # Deterministic spread of values so positives have a ranking (1.0 … 1.9).
        values = 1.0 + ((batch.window_ids[rows] * 7 + cols) % 10) / 10
        acts = pa.table(
            {
                "feature": feats,
                "window_id": batch.window_ids[rows].astype(np.int64),
                "position": cols.astype(np.int16),
                "value": values.astype(np.float32),
            }
        )
        windows = {
            "window_ids": batch.window_ids,
            "tokens_BT": batch.tokens_BT,
            "mask_BT": batch.mask_BT,
            "texts": batch.texts,
            "token_strings": token_strings.tolist(),
            "sources": batch.sources,
            "offsets": batch.offsets,
        }
        store.add_index_batch(
            SAE_ID, corpus.name, windows, acts, int(batch.window_ids[-1]) + 1, int(batch.mask_BT.sum())
        )
    store.finalize_index(SAE_ID)
    store.add_explanation(CORRECT)
    store.add_explanation(BROAD)
    store.add_explanation(
        ExplanationRecord(
            **{**CORRECT.__dict__, "explainer": "planted-empty", "text": "", "rules": None, "config_key": "e"}
        )
    )
    store.add_explanation(
        ExplanationRecord(
            **{**CORRECT.__dict__, "feature": DEAD_FEATURE, "explainer": "planted-dead", "config_key": "d"}
        )
    )
    for i, tok in enumerate(extra_tokens):
        rules = [{"activates_on": json.dumps(tok.strip()), "strength": 5}]
        store.add_explanation(
            ExplanationRecord(
                **{
                    **CORRECT.__dict__,
                    "feature": 2 + i,
                    "text": f"the token {tok!r}",
                    "rules": rules,
                    "config_key": f"x{i}",
                }
            )
        )
    return store


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """The planted store over 1,500 windows (top chunk of 30 positives), built once for this module."""
    return build_planted_store(tmp_path_factory.mktemp("planted") / "store.duckdb")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A 400-window planted store for the fast runner tests."""
    return build_planted_store(tmp_path_factory.mktemp("small") / "store.duckdb", SMALL_WINDOWS)


def _metric(store: Store, scorer: str, source: str, explainer: str, name: str) -> float:
    """A stored metric of one explainer's explanation of feature 0."""
    (expl,) = store.explanations(sae_id=SAE_ID, feature=DEF_FEATURE, explainer=explainer)
    (score,) = [s for s in store.scores(explanation_id=expl.id, scorer=scorer) if s.negative_source == source]
    assert score.status is Status.OK, score.metrics
    return float(score.metrics[name])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scorer", "metric"),
    [
        ("simulation", "pearson"),
        ("detection", "balanced_accuracy"),
        # Not fuzzing: it separates the two explanations (correct 1.0 vs broad 0.95 at seed 0) through its
        # mis-highlighted positives, which are the same windows and highlights under either source, so the gap is the
        # same under both. Only the negatives differ, and their random highlights almost never land on a token the
        # broad rule names (about 0.6% of SIMILAR_NEGATIVE tokens here, 0.3% of RANDOM ones). That documented
        # behaviour is tested exactly by test_fuzzing_gap_comes_from_the_mis_highlighted_positives_under_any_source
        # (hand-made records) and on this store by test_fuzzing_mis_highlighted_positives_separate_correct_from_over_broad.
    ],
)
def test_close_negatives_widen_the_gap_between_correct_and_over_broad(
    planted: Store, scorer: str, metric: str
) -> None:
    gaps = {}
    for source in ("RANDOM", "SIMILAR_NEGATIVE"):
        result = run_scoring(planted, SAE_ID, ScoreConfig(scorer, source), progress=False)
        assert result.scored == 2 and result.failed == 2  # empty explanation + dead feature are recorded
        correct = _metric(planted, scorer, source, "planted-correct", metric)
        broad = _metric(planted, scorer, source, "planted-broad", metric)
        gaps[source] = correct - broad
    assert gaps["SIMILAR_NEGATIVE"] > 0, gaps
    assert gaps["SIMILAR_NEGATIVE"] > gaps["RANDOM"], gaps


@pytest.mark.slow
def test_fuzzing_mis_highlighted_positives_separate_correct_from_over_broad(planted: Store) -> None:
    # delphi's mis-highlighted positives: the over-broad rule also calls wrong highlights on a def window correct
    # when they land on one of its keywords. Ten seeds (ten draws of positives, mis-highlights and negatives) because
    # one draw of 10 positives gives only 0–2 such items.
    gaps: dict[str, list[float]] = {"RANDOM": [], "SIMILAR_NEGATIVE": []}
    for seed in range(10):
        for source, per_seed in gaps.items():
            run_scoring(planted, SAE_ID, ScoreConfig("fuzzing", source, seed=seed), progress=False)
            scores = {}
            for explainer in ("planted-correct", "planted-broad"):
                (expl,) = planted.explanations(sae_id=SAE_ID, feature=DEF_FEATURE, explainer=explainer)
                (score,) = [
                    s
                    for s in planted.scores(explanation_id=expl.id, scorer="fuzzing")
                    if s.negative_source == source and s.provenance["seed"] == seed
                ]
                assert score.status is Status.OK and score.metrics["n_mis_highlighted"] == 10
                scores[explainer] = score.metrics
            # The broad rule names every token the correct one does: it can only add false positives.
            assert scores["planted-correct"]["tp"] == scores["planted-broad"]["tp"] == 10
            assert scores["planted-correct"]["fp"] <= scores["planted-broad"]["fp"]
            per_seed.append(
                scores["planted-correct"]["balanced_accuracy"] - scores["planted-broad"]["balanced_accuracy"]
            )
    mean = {source: float(np.mean(v)) for source, v in gaps.items()}
    assert mean["RANDOM"] > 0 and mean["SIMILAR_NEGATIVE"] > 0, gaps
    assert mean["SIMILAR_NEGATIVE"] >= mean["RANDOM"], gaps  # close negatives do not narrow it


@pytest.mark.slow
def test_embedding_scorer_ranks_the_correct_explanation_above_the_over_broad_one(planted: Store) -> None:
    # Issue 33 item 4. Before (whole records embedded), under close negatives the correct explanation scored 0.12-0.22
    # (below chance: MiniLM picked negatives that look more like "Python function definition" than the positives
    # do) and lost to the over-broad one (0.23-0.32), seeds 0-1. The scorer now embeds the 9 tokens around each
    # record's peak, where the keyword is: 0.92 vs 0.61-0.66.
    for source in ("RANDOM", "SIMILAR_NEGATIVE"):
        run_scoring(planted, SAE_ID, ScoreConfig("embedding", source), progress=False)
        correct = _metric(planted, "embedding", source, "planted-correct", "auroc")
        broad = _metric(planted, "embedding", source, "planted-broad", "auroc")
        assert correct > max(broad, 0.8), (source, correct, broad)


@pytest.mark.slow
def test_close_negatives_lower_embedding_scores(planted: Store) -> None:
    # Code windows without " def" look like the positives to MiniLM (it ranked them): close negatives lower the
    # over-broad explanation's AUROC ("Python source code" fits them too) more than the correct one's (seed 0 with the
    # 9-token crop: broad 0.85 -> 0.66, correct 0.92 -> 0.92; whole records lowered both, to 0.12 and 0.23).
    for source in ("RANDOM", "SIMILAR_NEGATIVE"):
        run_scoring(planted, SAE_ID, ScoreConfig("embedding", source), progress=False)
    drop = {}
    for explainer in ("planted-correct", "planted-broad"):
        rand = _metric(planted, "embedding", "RANDOM", explainer, "auroc")
        close = _metric(planted, "embedding", "SIMILAR_NEGATIVE", explainer, "auroc")
        drop[explainer] = rand - close
    assert drop["planted-broad"] > max(drop["planted-correct"], 0.1), drop


def test_fuzzing_gap_comes_from_the_mis_highlighted_positives_under_any_source() -> None:
    """Fuzzing's gap between a correct and an over-broad explanation comes from the mis-highlighted positives, which
    do not depend on the negatives drawn beside them: two negative sources whose highlights land on none of the broad
    rule's words give the same gap; only negatives whose highlights land on its words widen it. Counts by hand below."""

    def rec(i: int, tokens: tuple[str, ...], acts: tuple[float, ...]) -> Record:
        return Record(i, tokens, np.array(acts, dtype=np.float32))

    # Four positives: " def" fires; every other token is one the broad rule names, so a mis-highlight (one token,
    # as many as fire) always lands on a broad word.
    positives = [rec(i, (" def", " return", " self"), (1.0 + i / 10, 0.0, 0.0)) for i in range(4)]
    prose = [rec(10 + i, (" The", " cat", " sat"), (0.0, 0.0, 0.0)) for i in range(4)]  # RANDOM-like
    code = [
        rec(20 + i, (" x", " +", " y", " z"), (0.0,) * 4) for i in range(4)
    ]  # close, none of the broad words
    keywords = [rec(30 + i, (" return", " self"), (0.0, 0.0)) for i in range(4)]  # close, only broad words
    # The positives' and mis-highlighted items are identical whatever negatives follow, however many (same records,
    # same marks).
    shared = {
        name: [
            (it.record.window_id, it.label, tuple(np.asarray(it.highlighted).tolist()), it.kind)
            for it in fuzzing_items(positives, negs, 0)
            if it.kind != "negative"
        ]
        for name, negs in (
            ("prose", prose),
            ("code", code),
            ("keywords", keywords),
            ("none", []),
            ("more", code * 3),
        )
    }
    assert shared["prose"] == shared["code"] == shared["keywords"] == shared["none"] == shared["more"]
    assert [k for *_, k in shared["prose"]] == ["positive"] * 4 + ["mis_highlighted"] * 4
    clf = LexicalRuleClassifier(LexicalSimulator())
    correct = scorable_explanation("", [{"activates_on": '"def"', "strength": 5}])
    broad = scorable_explanation("", [{"activates_on": '"def" or "return" or "self"', "strength": 5}])
    gap = {}
    for name, negs in (("prose", prose), ("code", code), ("keywords", keywords)):
        c = asyncio.run(score_classification(clf, "fuzzing", correct, positives, negs, seed=0))
        b = asyncio.run(score_classification(clf, "fuzzing", broad, positives, negs, seed=0))
        assert (c.tp, c.fp, b.tp) == (4, 0, 4)
        gap[name] = c.balanced_accuracy - b.balanced_accuracy
    # Correct: every label right, balanced accuracy 1. Broad: 4 of 4 positives right; of the 8 label-0 items it
    # calls the 4 mis-highlighted ones correct, and the 4 negatives too only when their highlights are its words:
    # (1 + 4/8) / 2 = 0.75 under prose or keyword-free code, (1 + 0/8) / 2 = 0.5 under keyword-only negatives.
    assert gap["prose"] == pytest.approx(0.25) and gap["code"] == pytest.approx(0.25)
    assert gap["keywords"] == pytest.approx(0.5)


def test_scoring_is_resumable_and_records_failures_and_provenance(small: Store) -> None:
    config = ScoreConfig("simulation", "RANDOM_NEGATIVE", seed=3)
    first = run_scoring(small, SAE_ID, config, progress=False)
    again = run_scoring(small, SAE_ID, config, progress=False)
    assert (first.scored, first.failed, first.skipped) == (2, 2, 0)
    assert (again.scored, again.failed, again.skipped) == (0, 0, 4)
    scores = [
        s for s in small.scores(sae_id=SAE_ID, scorer="simulation") if s.negative_source == "RANDOM_NEGATIVE"
    ]
    statuses = sorted(s.status.value for s in scores)
    assert statuses == ["no_activations", "ok", "ok", "unscorable_explanation"]
    ok = next(s for s in scores if s.status is Status.OK)
    prov = ok.provenance
    assert prov["seed"] == 3 and prov["backend"] == "lexical" and len(prov["negative_ids"]) == 10
    assert len(prov["positive_ids"]) >= 1 and not set(prov["positive_ids"]) & set(prov["negative_ids"])
    # RANDOM_NEGATIVE windows never activate the feature.
    acts = small.window_activations(SAE_ID, DEF_FEATURE, prov["negative_ids"])
    assert float(acts.max()) == 0.0
    # The negatives are the feature's split sample (examples.testsets: 30 dealt 10/10/10 plus 10 spares, drawn with
    # the split's seed and stored); its test third is what was scored (these explanations were shown no window).
    (sample,) = small.samples(SAE_ID, DEF_FEATURE, "RANDOM_NEGATIVE")
    assert prov["negative_sample_id"] == sample.id and sample.seed == 3 and prov["test_windows_seen"] == 0
    assert sample.window_ids[:30][2::3] == prov["negative_ids"] and len(sample.window_ids) == 40
    assert sample.config["n_excluded"] >= len(prov["positive_ids"])
    # Another scorer with the same draw settings reuses the stored sample instead of drawing a new one.
    run_scoring(small, SAE_ID, ScoreConfig("detection", "RANDOM_NEGATIVE", seed=3), progress=False)
    (det,) = [
        s
        for s in small.scores(sae_id=SAE_ID, scorer="detection")
        if s.status is Status.OK and s.explanation_id == ok.explanation_id
    ]
    assert det.provenance["negative_sample_id"] == sample.id
    assert len(small.samples(SAE_ID, DEF_FEATURE, "RANDOM_NEGATIVE")) == 1


def test_dead_features_are_recorded_not_scored_by_every_scorer(small: Store) -> None:
    # The explainers store a dead feature as status "dead" with empty text; feature 1 never fires.
    dead = ExplanationRecord(
        **{**CORRECT.__dict__, "feature": DEAD_FEATURE, "explainer": "dead-row", "text": "", "rules": None,
           "config_key": "dead-row", "extra": {"reason": "no activations in the indexed corpus"},
           "status": Status.DEAD}
    )  # fmt: skip
    eid = small.add_explanation(dead)
    samples_before = len(small.samples(SAE_ID, DEAD_FEATURE))
    for scorer in ("simulation", "detection", "fuzzing", "embedding", "cosy"):
        for source in ("RANDOM_NEGATIVE", "SIMILAR_NEGATIVE"):
            config = ScoreConfig(scorer, source)
            result = run_scoring(small, SAE_ID, config, explainer="dead-row", progress=False)
            again = run_scoring(small, SAE_ID, config, explainer="dead-row", progress=False)
            expected = (0, 0, 1, 0) if scorer != "cosy" or source == "RANDOM_NEGATIVE" else (0, 0, 0, 1)
            assert (result.scored, result.failed, result.dead, result.skipped) == expected, (scorer, source)
            assert (again.dead, again.skipped) == (0, 1)
    scores = small.scores(explanation_id=eid)
    assert len(scores) == 4 * 2 + 1  # cosy ignores the negative source: one score
    assert all(
        s.status is Status.DEAD and s.metrics == {"reason": "no activations in the indexed corpus"}
        for s in scores
    )
    assert len(small.samples(SAE_ID, DEAD_FEATURE)) == samples_before  # no negatives drawn for it
