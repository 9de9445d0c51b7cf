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
