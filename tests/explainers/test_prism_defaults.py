"""PRISM at its DEFAULT settings (99th percentile, up to 1,000 texts, k = 5) on planted features over real corpus
windows, checked against the spec's validation rules: clusters are pure, and the polysemantic feature's descriptions
are less similar to each other than the monosemantic feature's.

Store: ~5k windows of 32 tokens (8 KJV, 8 stdlib and 400 Python-docs/WordNet/fortunes documents of the default
corpus). Feature 1 fires on every token of KJV or stdlib windows (two unrelated topics); feature 3 on every token of
KJV windows only. A window's level 1 + u (u in [0, 1), a hash of its id, independent of its source) is its text
score, so the 99th percentile keeps the top ~1% of ALL windows, about a quarter of the firing ones, from both topics.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring
from sae_workbench.explainers.job import ExplainJob
from sae_workbench.explainers.prism import PrismExplainer
from sae_workbench.store import Store
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store, window_sources

WANT = {"kjv": 8, "stdlib": 8, "pydoc": 150, "wordnet": 150, "fortunes": 100}


def level(wid: int) -> float:
    """A window's activation level 1 + u, u a hash of the window id (not of its source)."""
    return 1.0 + ((wid * 2654435761) % 1000) / 1000


def topic_plant(wid: int, pos: int, token: str, source: str) -> list[tuple[int, float]]:
    """Feature 1: KJV or stdlib windows; feature 3: KJV windows only."""
    out = []
    if source.startswith(("kjv", "stdlib")):
        out.append((1, level(wid)))
    if source.startswith("kjv"):
        out.append((3, level(wid)))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, tiny_model) -> Store:
    st = build_planted_store(tmp_path_factory.mktemp("prism99"), tiny_model.tokenizer, WANT, topic_plant)
    ExplainJob(st, PLANTED_SAE, PrismExplainer(), progress=False).run([1, 3])
    return st


def test_defaults_are_the_papers() -> None:
    cfg = PrismExplainer().config
    assert (cfg.percentile, cfg.n_texts, cfg.k, cfg.highlight_percentile, cfg.per_cluster) == (
        99.0,
        1000,
        5,
        90.0,
        20,
    )


@pytest.mark.parametrize("feature", [1, 3])
def test_default_percentile_keeps_the_top_percent_of_all_windows(store: Store, feature: int) -> None:
    (e,) = store.explanations(PLANTED_SAE, feature=feature, explainer="prism")
    picked = {w for c in e.extra["clusters"] for w in c["window_ids"]}
    progress = store.index_progress(PLANTED_SAE)
    assert progress is not None
    n_windows = progress.next_window
    active, _ = store.window_text_scores(PLANTED_SAE, feature)
    assert n_windows > 4000 and len(active) > len(picked) + 30  # the percentile, not the firing set, limits
    assert 0.008 * n_windows <= len(picked) <= 0.012 * n_windows
    # The kept windows are the highest-level ones: none of the others is above the lowest kept.
    levels = {int(w): level(int(w)) for w in active}
    assert min(levels[w] for w in picked) >= max(v for w, v in levels.items() if w not in picked)


def test_clusters_are_pure_and_polysemantic_descriptions_are_less_similar(store: Store) -> None:
    src = window_sources(store)
    by_feature = {e.feature: e for e in store.explanations(PLANTED_SAE, explainer="prism")}
    counts = [Counter(src[w] for w in c["window_ids"]) for c in by_feature[1].extra["clusters"]]
    assert len(counts) == 5
    majority = sum(max(c.values()) for c in counts) / sum(sum(c.values()) for c in counts)
    assert majority >= 0.9, counts
    assert {c.most_common(1)[0][0] for c in counts} == {"kjv", "stdlib"}
    assert all(
        set(Counter(src[w] for w in c["window_ids"])) == {"kjv"} for c in by_feature[3].extra["clusters"]
    )
    # Spec: "the polysemantic feature's descriptions should be less similar than the monosemantic one's"
    # (real all-MiniLM-L6-v2 embeddings of the offline describer's descriptions). Measured 0.907 vs 0.937: the
    # lexical describer's fixed prefix ("Lexical explainer (activation statistics, not an LLM): fires on") sits in
    # every description and lifts both, so the margin is small.
    run_scoring(store, PLANTED_SAE, ScoreConfig("polysemanticity"), progress=False)
    sims = {
        e.feature: store.scores(explanation_id=e.id, scorer="polysemanticity")[0].metrics["similarity"]
        for e in by_feature.values()
    }
    assert np.isfinite(sims[1]) and sims[1] < sims[3] - 0.01, sims
