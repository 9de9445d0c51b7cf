"""Status and score-key columns: migrating a schema-2 store backfills them from the JSON, a stored score key is
never written twice, and a batch of scores is written all or nothing."""

import json
from pathlib import Path

import duckdb
import pytest

from sae_workbench.status import Status
from sae_workbench.store import DuplicateScoreError, ExplanationRecord, ScoreRecord, Store, StoreError
from sae_workbench.store.migrations import LATEST_VERSION, migrate


def _explanation(feature: int, key: str, sae_id: str = "sae", **kwargs) -> ExplanationRecord:
    return ExplanationRecord(
        sae_id, feature, "lexical", "1", "", "", {}, {}, [1], [2], f"text {feature}", key, **kwargs
    )


def _score(explanation_id: int, key: str | None, scorer: str = "detection", **kwargs) -> ScoreRecord:
    return ScoreRecord(explanation_id, scorer, "1", "RANDOM", {"auc": 0.5}, score_key=key, **kwargs)


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "s.duckdb")
    s.add_explanations([_explanation(0, "e0"), _explanation(1, "e1"), _explanation(2, "e2", sae_id="other")])
    return s


V2_EXPLANATIONS = [  # (config_key, extra) -> expected status
    ("dead", {"status": "dead", "reason": "no activations"}, "dead"),
    ("explained", {"status": "explained"}, "ok"),
    ("plain", {}, "ok"),
]
V2_SCORES = [  # (explanation, metrics, provenance): the second "k1" row is a duplicate of the first
    (1, {"status": "dead", "reason": "dead feature"}, {"score_key": "k1"}),
    (1, {"status": "ok", "auc": 0.9}, {"score_key": "k1"}),
    (2, {"auc": 0.7}, {}),
    (2, {"status": "no_activations"}, {"score_key": "k2", "seed": 3}),
    (3, {"status": "ok", "auc": 0.6}, {"score_key": "k3"}),
    (3, {"status": "generator_failed"}, {"score_key": "k3"}),
]


def test_migrating_a_schema_2_store_backfills_status_and_score_key(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    migrate(con, 0, upto=2)  # the store as the previous workbench left it
    for key, extra, _ in V2_EXPLANATIONS:
        con.execute(
            "INSERT INTO explanations (sae_id, feature, explainer, explainer_version, prompt_version, llm_model, "
            "llm_params, sampling, example_ids, negative_ids, text, rules, extra, tokens_in, tokens_out, seconds, "
            "config_key) VALUES ('sae', 0, 'x', '1', '', '', '{}', '{}', [], [], '', NULL, ?, 0, 0, 0, ?)",
            [json.dumps(extra), key],
        )
    for eid, metrics, provenance in V2_SCORES:
        con.execute(
            "INSERT INTO scores (explanation_id, scorer, scorer_version, negative_source, metrics, provenance) "
            "VALUES (?, 'detection', '1', '', ?, ?)",
            [eid, json.dumps(metrics), json.dumps(provenance)],
        )
    con.close()

    store = Store.open(path)
    assert store.schema_version() == LATEST_VERSION
    assert [(e.config_key, e.status) for e in store.explanations()] == [
        (k, Status(s)) for k, _, s in V2_EXPLANATIONS
    ]
    scores = store.scores()
    # Of each duplicated key the earliest row stays (ids 2 and 6 are gone); nothing else is touched.
    assert [s.id for s in scores] == [1, 3, 4, 5]
    assert [(s.score_key, s.status) for s in scores] == [
        ("k1", Status.DEAD), (None, Status.OK), ("k2", Status.NO_ACTIVATIONS), ("k3", Status.OK),
    ]  # fmt: skip
    assert [s.metrics for s in scores] == [V2_SCORES[i][1] for i in (0, 2, 3, 4)]
    assert [s.provenance for s in scores] == [V2_SCORES[i][2] for i in (0, 2, 3, 4)]
    # The migrated tables are the blank store's, and their id sequences go on after the old rows.
    blank = Store.open(tmp_path / "blank.duckdb")
    for table in ("explanations", "scores"):
        assert store.table_columns(table) == blank.table_columns(table)
    assert store.add_score(_score(1, "k4")) == 7
    assert store.add_explanation(_explanation(5, "new")) == 4
    with pytest.raises(DuplicateScoreError, match="k2"):
        store.add_score(_score(2, "k2"))


def test_score_key_is_unique_in_the_schema(store: Store) -> None:
    store.add_score(_score(1, "a"))
    con = duckdb.connect(":memory:")
    con.execute(f"ATTACH '{store.path}' AS s (READ_ONLY)")
    unique = con.execute(
        "SELECT constraint_column_names FROM duckdb_constraints() WHERE database_name = 's' "
        "AND table_name = 'scores' AND constraint_type = 'UNIQUE'"
    ).fetchall()
    con.close()
    assert unique == [(["score_key"],)]


def test_a_stored_score_key_raises_and_writes_nothing(store: Store) -> None:
    first = store.add_score(_score(1, "k"))
    for again in (
        _score(2, "k"),
        ScoreRecord(2, "detection", "1", "", {"auc": 1.0}, {"score_key": "k"}),  # the key only in provenance
    ):
        with pytest.raises(DuplicateScoreError, match="'k'"):
            store.add_score(again)
    assert [s.id for s in store.scores()] == [first]
    store.add_score(_score(2, None))  # no key: never a duplicate
    store.add_score(_score(2, None))
    assert len(store.scores()) == 3


def test_add_scores_is_all_or_nothing(store: Store) -> None:
    store.add_score(_score(1, "stored"))
    before = store.scores()
    for batch in (
        [_score(1, "a"), _score(2, "b"), _score(2, "stored")],  # one key already stored
        [_score(1, "a"), _score(2, "b"), _score(2, "a")],  # one key twice in the batch
    ):
        with pytest.raises(DuplicateScoreError):
            store.add_scores(batch)
        assert store.scores() == before
    with pytest.raises(StoreError, match="unknown status"), store.transaction():
        store.add_scores([_score(1, "a")])
        store.add_scores([_score(1, "c", status="not a status")])  # type: ignore[arg-type]
    assert store.scores() == before
    batch = [_score(1, "a"), _score(2, None), _score(3, "c")]
    ids = store.add_scores(batch)
    assert ids == sorted(ids) and min(ids) > before[-1].id  # type: ignore[operator]
    stored = store.scores()[1:]
    assert [(s.id, s.explanation_id, s.score_key) for s in stored] == [
        (i, r.explanation_id, r.score_key) for i, r in zip(ids, batch, strict=True)
    ]
    assert store.add_scores([]) == []


def test_score_keys_are_per_sae_and_scorer(store: Store) -> None:
    store.add_scores(
        [_score(1, "a"), _score(2, "b"), _score(2, "c", scorer="fuzzing"), _score(3, "d"), _score(1, None)]
    )
    assert store.score_keys("sae", "detection") == {"a", "b"}
    assert store.score_keys("sae", "fuzzing") == {"c"}
    assert store.score_keys("other", "detection") == {"d"}
    assert store.score_keys("nope", "detection") == set()


def test_status_and_key_columns_fall_back_to_the_json(store: Store) -> None:
    old_style = ScoreRecord(1, "complexity", "1", "", {"status": "no_rules"}, {"score_key": "x"})
    explicit = _score(2, "y", status=Status.LLM_MALFORMED_OUTPUT)
    explicit_wins = ScoreRecord(
        3,
        "complexity",
        "1",
        "",
        {"status": "ok"},
        {"score_key": "ignored"},
        status=Status.DEAD,
        score_key="z",
    )
    store.add_scores([old_style, explicit, explicit_wins])
    got = [(s.status, s.score_key) for s in store.scores()]
    assert got == [(Status.NO_RULES, "x"), (Status.LLM_MALFORMED_OUTPUT, "y"), (Status.DEAD, "z")]
    assert all(type(s.status) is Status for s in store.scores())


def test_explanation_status_round_trips(store: Store) -> None:
    store.add_explanations(
        [
            _explanation(3, "dead", status=Status.DEAD),
            _explanation(4, "dead-in-extra", extra={"status": "dead"}),  # the explain job's older way
            _explanation(5, "ok", extra={"status": "explained"}),
        ]
    )
    got = {e.config_key: e.status for e in store.explanations()}
    assert got == {"e0": Status.OK, "e1": Status.OK, "e2": Status.OK, "dead": Status.DEAD, "dead-in-extra": Status.DEAD,
                   "ok": Status.OK}  # fmt: skip
    assert type(store.get_explanation(4).status) is Status
