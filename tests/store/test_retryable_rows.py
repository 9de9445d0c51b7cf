"""LLM failures are stored but not done (issue 32 item 4): a failed explanation or score is left out of the keys a
job skips, and the rerun's row replaces it; other statuses (ok, dead, recorded failures) stay skipped and unique."""

from pathlib import Path

import pytest

from sae_workbench.status import RETRYABLE, Status
from sae_workbench.store import DuplicateScoreError, ExplanationRecord, ScoreRecord, Store


def _explanation(feature: int, key: str, status: Status = Status.OK, text: str = "t") -> ExplanationRecord:
    return ExplanationRecord(
        "sae", feature, "oneshot", "1", "", "m", {}, {}, [1], [2], text, key, status=status
    )


def _score(explanation_id: int, key: str, status: Status = Status.OK) -> ScoreRecord:
    return ScoreRecord(explanation_id, "detection", "1", "RANDOM", {"auc": 0.5}, score_key=key, status=status)


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "s.duckdb")


def test_retryable_statuses_are_the_llm_failures() -> None:
    assert {s.value for s in RETRYABLE} == {"llm_malformed_output", "llm_context_overflow", "llm_request_refused",
                                            "llm_unavailable"}  # fmt: skip
    assert not Status.DEAD.retryable and not Status.UNSCORABLE_EXPLANATION.retryable


def test_failed_explanation_is_not_skipped_and_is_replaced(store: Store) -> None:
    store.add_explanations([_explanation(0, "k0"), _explanation(1, "k1", Status.LLM_MALFORMED_OUTPUT, "")])
    store.add_explanations([_explanation(2, "k2", Status.DEAD, "")])
    assert store.stored_explanation_keys(["k0", "k1", "k2"]) == {"k0", "k2"}
    store.add_explanations([_explanation(1, "k1", text="retried")])
    rows = store.explanations("sae")
    assert sorted((e.feature, e.status, e.text) for e in rows) == [
        (0, Status.OK, "t"), (1, Status.OK, "retried"), (2, Status.DEAD, "")]  # fmt: skip
    assert store.stored_explanation_keys(["k1"]) == {"k1"}
    store.add_explanations([_explanation(1, "k1", text="again")])  # an ok row is kept, never replaced
    assert [e.text for e in store.explanations("sae", feature=1)] == ["retried"]


def test_failed_score_is_not_skipped_and_is_replaced(store: Store) -> None:
    (eid,) = store.add_explanations([_explanation(0, "k0")])
    store.add_score(_score(eid, "s1", Status.LLM_UNAVAILABLE))
    store.add_score(_score(eid, "s2", Status.NO_ACTIVATIONS))
    assert store.score_keys("sae", "detection") == {"s2"}
    store.add_score(_score(eid, "s1"))
    assert sorted((s.score_key, s.status) for s in store.scores(eid)) == [
        ("s1", Status.OK),
        ("s2", Status.NO_ACTIVATIONS),
    ]
    with pytest.raises(DuplicateScoreError):
        store.add_score(_score(eid, "s2"))  # a recorded, non-LLM failure stays unique
