"""The app's compare matrix names an embedding score judged by the model that picked its close negatives
"(circular)" (issue 33 item 4), as the report does."""

from __future__ import annotations

import pandas as pd

from sae_workbench.app.queries import explainer_scorer_matrix


def test_circular_scores_get_their_own_marked_column() -> None:
    rows = [
        ("oneshot", "embedding", "SIMILAR_NEGATIVE", 0.4, True),
        ("oneshot", "embedding", "RANDOM_NEGATIVE", 0.7, False),
        ("oneshot", "detection", "SIMILAR_NEGATIVE", 0.6, False),
    ]
    table = pd.DataFrame(
        [
            {"feature": i, "explanation_id": i, "explainer": e, "llm_model": "(offline)", "scorer": s,
             "negative_source": n, "metric": "auroc", "value": v, "circular": c}
            for i, (e, s, n, v, c) in enumerate(rows)
        ]
    )  # fmt: skip
    columns = set(explainer_scorer_matrix(table).columns)
    # before: "embedding · SIMILAR_NEGATIVE · auroc", unmarked
    assert "embedding (circular) · SIMILAR_NEGATIVE · auroc" in columns
    assert {"embedding · RANDOM_NEGATIVE · auroc", "detection · SIMILAR_NEGATIVE · auroc"} <= columns


def test_llm_scored_values_get_their_own_column_and_verdict() -> None:
    """The same lexical explanation scored by the offline detector (0.8) and by an LLM detector (0.2): two columns,
    each its own mean (before, one column averaged them to 0.5), and verdict flips pair each backend with itself."""
    from sae_workbench.app.queries import verdict_flips

    rows = [
        ("", "RANDOM_NEGATIVE", 0.8), ("SmolLM2", "RANDOM_NEGATIVE", 0.2),
        ("", "SIMILAR_NEGATIVE", 0.7), ("SmolLM2", "SIMILAR_NEGATIVE", 0.9),
    ]  # fmt: skip
    table = pd.DataFrame(
        [
            {"feature": 0, "explanation_id": 1, "explainer": "lexical", "llm_model": "(offline)",
             "scorer": "detection", "negative_source": n, "metric": "balanced_accuracy", "value": v,
             "circular": False, "scored_by": by}
            for by, n, v in rows
        ]
    )  # fmt: skip
    matrix = explainer_scorer_matrix(table).iloc[0]
    assert matrix["detection · RANDOM_NEGATIVE · balanced_accuracy"] == 0.8
    assert matrix["detection [SmolLM2] · RANDOM_NEGATIVE · balanced_accuracy"] == 0.2
    flips = verdict_flips(
        table, 0.5
    )  # only the LLM's verdict flips (0.2 → 0.9); the offline one stays (0.8, 0.7)
    assert flips[["scored_by", "random_negatives", "close_negatives"]].values.tolist() == [
        ["SmolLM2", 0.2, 0.9]
    ]
