"""Labels follow activations (issue 33 item 6): a drawn negative on which the feature fires is scored as a positive,
whatever source drew it, and the score and the report say how many there were."""

from __future__ import annotations

from pathlib import Path

import pytest

from sae_workbench.evaluation.scorers.job import ScoreConfig, TestSetBuilder, run_scoring
from sae_workbench.evaluation.scorers.report import collect_rows, render_markdown
from sae_workbench.examples.sampling import NegativeSource
from sae_workbench.examples.testsets import SplitConfig
from sae_workbench.store import Store

from .planted_docs import BETA, SAE_ID, build_docs_store, explanation


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    """The two-windows-per-document store: feature 1 ("beta") fires in a quarter of the windows."""
    return build_docs_store(tmp_path / "store.duckdb")


def test_a_random_negative_that_fires_is_labelled_by_its_activation(store: Store) -> None:
    # whole windows (a hit is never cropped); 20 + 20 test records: a quarter of the windows fire
    split = SplitConfig(negatives=NegativeSource.RANDOM, record_length=None, per_split=20)
    eid = store.add_explanation(explanation(BETA, split, example_ids=[]))
    (expl,) = [e for e in store.explanations(sae_id=SAE_ID) if e.id == eid]
    tests = TestSetBuilder(store, SAE_ID, ScoreConfig("detection", per_split=20)).build(expl)
    fired = tests.provenance["negatives_fired"]
    assert (
        fired > 0
    )  # 200 of 800 windows fire: a random draw of 20 finds some (before: every one labelled negative)
    assert all(r.max_act == 0 for r in tests.negatives)
    assert all(r.max_act > 0 for r in tests.positives)
    drawn_pos, drawn_neg = tests.provenance["positive_ids"], tests.provenance["negative_ids"]
    assert len(tests.positives) == len(drawn_pos) + fired and len(tests.negatives) == len(drawn_neg) - fired
    assert set(tests.provenance["fired_negative_ids"]) <= set(tests.provenance["negative_ids"])

    # The correct rule ("beta") now classifies every test record right; before, each fired negative was a false
    # positive against a label of False.
    run_scoring(store, SAE_ID, ScoreConfig("detection", per_split=20), progress=False)
    (score,) = store.scores(scorer="detection")
    assert score.metrics["balanced_accuracy"] == 1.0
    assert score.metrics["negatives_fired"] == fired
    (row,) = collect_rows(store, SAE_ID)
    assert row.negatives_fired == fired
    assert "neg. fired" in render_markdown([row], [])
