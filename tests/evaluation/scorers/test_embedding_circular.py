"""The embedding scorer judged by the model that picked its close negatives is marked circular (issue 33 item 4)."""

from __future__ import annotations

from pathlib import Path

from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring
from sae_workbench.evaluation.scorers.report import collect_rows, render_markdown
from sae_workbench.examples.sampling import NegativeSource
from sae_workbench.examples.testsets import SplitConfig

from .planted_docs import ALPHA, SAE_ID, build_docs_store, explanation


def test_close_negatives_ranked_by_the_scoring_model_are_marked_circular(tmp_path: Path) -> None:
    store = build_docs_store(tmp_path / "store.duckdb", n_docs=150, n_active_docs=40, n_beta_windows=0)
    for source in (NegativeSource.SIMILAR_NEGATIVE, NegativeSource.RANDOM_NEGATIVE):
        store.add_explanation(explanation(ALPHA, SplitConfig(negatives=source), example_ids=[]))
    run_scoring(store, SAE_ID, ScoreConfig("embedding"), progress=False)  # each explanation's own negatives
    circular = {s.negative_source: s.metrics["circular"] for s in store.scores(scorer="embedding")}
    assert circular == {"SIMILAR_NEGATIVE": 1.0, "RANDOM_NEGATIVE": 0.0}  # before: no such metric
    md = render_markdown(collect_rows(store, SAE_ID), [])
    assert "| planted | embedding (circular) | SIMILAR_NEGATIVE |" in md
    assert "| planted | embedding | RANDOM_NEGATIVE |" in md
