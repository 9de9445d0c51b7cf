"""PRISM polysemanticity over the store: stored clusters' descriptions (MiniLM) vs random descriptions of other
features, through `run_scoring(ScoreConfig("polysemanticity"))` and `workbench report`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sae_workbench.embeddings import embed_texts
from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring
from sae_workbench.evaluation.scorers.polysemanticity import mean_pairwise_cosine
from sae_workbench.evaluation.scorers.report import polysemanticity_rows, render_csv, render_markdown
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, Store

SAE = "poly"
DESCRIPTIONS = {
    0: [
        "Mentions of dogs and puppies.",
        "References to dogs, puppies and canine pets.",
        "Words about pet dogs.",
    ],
    1: [
        "Python function definitions.",
        "Biblical verses about the creation.",
        "Stock prices in financial news.",
    ],
    3: ["Only one description."],
    4: ["Rain and weather forecasts.", "Football match results.", "Recipes for baking bread."],
}


def _prism(feature: int, descriptions: list[str], status: Status = Status.OK, **extra) -> ExplanationRecord:
    clusters = [
        {"description": d, "window_ids": [i], "shown_ids": [i], "texts": [d]}
        for i, d in enumerate(descriptions)
    ]
    return ExplanationRecord(
        sae_id=SAE, feature=feature, explainer="prism", explainer_version="t", prompt_version="", llm_model="",
        llm_params={}, sampling={}, example_ids=[], negative_ids=[], text="\n".join(descriptions),
        config_key=f"p{feature}", extra={"clusters": clusters, **extra}, status=status,
    )  # fmt: skip


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    st = Store.open(tmp_path / "p.duckdb")
    st.register_sae(SAE, "tiny", "blocks.0.hook_resid_post", 64, 8, {})
    for f, ds in DESCRIPTIONS.items():
        st.add_explanation(_prism(f, ds))
    st.add_explanation(_prism(2, [], status=Status.DEAD, reason="no activations in the indexed corpus"))
    st.add_explanation(  # a non-PRISM explanation is not scored
        ExplanationRecord(
            **{**_prism(0, []).__dict__, "explainer": "lexical", "config_key": "l0", "extra": {}}
        )
    )
    return st


def test_prism_polysemanticity_runner(store: Store) -> None:
    first = run_scoring(store, SAE, ScoreConfig("polysemanticity", seed=1), progress=False)
    assert (first.scored, first.failed, first.dead, first.skipped) == (3, 1, 1, 0)
    again = run_scoring(store, SAE, ScoreConfig("polysemanticity", seed=1), progress=False)
    assert (again.scored, again.failed, again.dead, again.skipped) == (0, 0, 0, 5)

    by_feature = {
        e.feature: store.scores(explanation_id=e.id, scorer="polysemanticity")
        for e in store.explanations(sae_id=SAE, explainer="prism")
    }
    assert by_feature[0][0].status is Status.OK and len(by_feature[0]) == 1
    (lexical,) = store.explanations(sae_id=SAE, explainer="lexical")
    assert store.scores(explanation_id=lexical.id, scorer="polysemanticity") == []
    m = {f: v[0].metrics for f, v in by_feature.items() if v}
    assert by_feature[2][0].status is Status.DEAD and "similarity" not in m[2]
    assert by_feature[3][0].status is Status.TOO_FEW_DESCRIPTIONS and m[3] == {"n_descriptions": 1}
    # Stored similarity is exactly the mean pairwise cosine of the MiniLM embeddings of the descriptions.
    assert m[1]["similarity"] == pytest.approx(mean_pairwise_cosine(embed_texts(DESCRIPTIONS[1])), abs=1e-5)
    # Near-paraphrases are more similar than three unrelated topics, and than random other-feature descriptions.
    assert m[0]["similarity"] > m[1]["similarity"] and m[0]["similarity"] > m[0]["random_baseline"]
    assert m[1]["similarity"] < m[0]["random_baseline"]
    prov = by_feature[0][0].provenance
    assert (
        m[0]["baseline_pool_descriptions"] == 7 and m[0]["baseline_pool_features"] == 3 and prov["seed"] == 1
    )

    (row,) = polysemanticity_rows(store, SAE)
    expected = np.mean([m[f]["similarity"] for f in (0, 1, 4)])
    assert row.explainer == "prism" and row.n_features == 3 and row.n_skipped == 2
    assert row.similarity == pytest.approx(expected)
    md = render_markdown([], [], "T", [row])
    assert "| prism | " in md and "PRISM polysemanticity" in md
    csv_text = render_csv([], [], [row])
    assert "prism,polysemanticity,,mean_pairwise_cosine," in csv_text
