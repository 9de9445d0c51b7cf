"""Scores of explanations (`scores`) and SAE-level evaluations (`evals`).

A score's `score_key` (unique; NULL allowed) names what was scored with which scorer config: a job asks
`score_keys(sae_id, scorer)` once to skip done work on resume, and a second write of a stored key raises
DuplicateScoreError. Its `status` says whether metrics were computed (OK), the feature was dead, or which failure
was recorded instead. An LLM failure (a retryable status) does not count as done: `score_keys` leaves it out and a
new score of the same key replaces it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import duckdb

from sae_workbench.status import RETRYABLE_VALUES, Status
from sae_workbench.store.base import StoreBase
from sae_workbench.store.errors import DuplicateScoreError
from sae_workbench.store.explanations import explanation_ids_of_sae
from sae_workbench.store.rows import EvalRecord, ScoreRecord
from sae_workbench.store.sql import dumps, first, insert_arrow, loads, pa, read_status, status_text

_COLUMNS = (
    "id", "explanation_id", "scorer", "scorer_version", "negative_source", "metrics", "provenance", "status",
    "score_key",
)  # fmt: skip
_TYPES = (pa.int64(), pa.int64(), pa.string(), pa.string(), pa.string(), pa.string(), pa.string(), pa.string(),
          pa.string())  # fmt: skip


class Scores(StoreBase):
    """The `scores` and `evals` tables."""

    def add_score(self, record: ScoreRecord) -> int:
        """Store a score of an explanation; return its id (DuplicateScoreError if its score_key is stored)."""
        return self.add_scores([record])[0]

    def add_scores(self, records: Sequence[ScoreRecord]) -> list[int]:
        """Store scores in one transaction, all or nothing; return their ids in order.

        DuplicateScoreError names the keys already stored or repeated in `records` (then nothing is written). A
        record that leaves `score_key` None takes `provenance["score_key"]`, and one left at Status.OK takes
        `metrics["status"]` (how the jobs recorded them before the columns existed).
        """
        if not records:
            return []
        rows = [_row(r) for r in records]
        keys = [str(row[-1]) for row in rows if row[-1] is not None]
        with self._write(invalidates=False) as conn:
            if keys:  # an LLM failure stored under the same key is replaced (a rerun retried it)
                conn.execute(
                    "DELETE FROM scores WHERE score_key IN (SELECT unnest(?::TEXT[])) "
                    "AND status IN (SELECT unnest(?::TEXT[]))",
                    [keys, list(RETRYABLE_VALUES)],
                )
            clash = {k for k, n in Counter(keys).items() if n > 1} | _stored_keys(conn, keys)
            if clash:
                raise DuplicateScoreError(
                    f"score keys {sorted(clash)[:5]} are already stored in {self.path} (or repeated in this batch); "
                    "nothing was written. Skip stored keys (Store.score_keys) before scoring."
                )
            ids = sorted(
                int(r[0])
                for r in conn.execute("SELECT nextval('score_ids') FROM range(?)", [len(rows)]).fetchall()
            )
            values = [[i, *row] for i, row in zip(ids, rows, strict=True)]
            columns = ", ".join(_COLUMNS)
            try:
                if len(values) == 1:
                    conn.execute(
                        f"INSERT INTO scores ({columns}) VALUES ({', '.join('?' * len(_COLUMNS))})", values[0]
                    ).fetchall()
                else:
                    table = pa.table(
                        [
                            pa.array(list(col), type=t)
                            for col, t in zip(zip(*values, strict=True), _TYPES, strict=True)
                        ],
                        names=list(_COLUMNS),
                    )
                    insert_arrow(
                        conn,
                        "_new_scores",
                        table,
                        f"INSERT INTO scores ({columns}) SELECT {columns} FROM _new_scores",
                        [],
                    )
            except duckdb.ConstraintException as exc:
                raise DuplicateScoreError(
                    f"a score key of this batch is already stored in {self.path}: {exc}"
                ) from exc
        return ids

    def score_keys(self, sae_id: str, scorer: str) -> set[str]:
        """The score keys stored for `sae_id`'s explanations by `scorer`, LLM failures (retryable statuses) left
        out (one query: what a job skips on resume)."""
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT score_key FROM scores WHERE explanation_id IN ({explanation_ids_of_sae()}) "
                "AND scorer = ? AND score_key IS NOT NULL AND status NOT IN (SELECT unnest(?::TEXT[]))",
                [sae_id, scorer, list(RETRYABLE_VALUES)],
            ).fetchall()
        return {str(r[0]) for r in rows}

    def scores(
        self, explanation_id: int | None = None, scorer: str | None = None, sae_id: str | None = None
    ) -> list[ScoreRecord]:
        """Stored scores filtered by explanation, scorer and/or SAE, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT s.id, s.explanation_id, s.scorer, s.scorer_version, s.negative_source, s.metrics, "
                "s.provenance, s.created_at, s.status, s.score_key FROM scores s "
                "WHERE (? IS NULL OR s.explanation_id = ?) AND (? IS NULL OR s.scorer = ?) "
                f"AND (? IS NULL OR s.explanation_id IN ({explanation_ids_of_sae()})) ORDER BY s.id",
                [explanation_id, explanation_id, scorer, scorer, sae_id, sae_id],
            ).fetchall()
        return [
            ScoreRecord(
                int(r[1]),
                r[2],
                r[3],
                r[4],
                loads(r[5]),
                loads(r[6]),
                id=int(r[0]),
                created_at=r[7],
                status=read_status(r[8], f"score {r[0]}"),
                score_key=r[9],
            )
            for r in rows
        ]

    def add_eval(self, sae_id: str, eval_type_id: str, result: dict[str, Any]) -> int:
        """Store an SAE-level evaluation result; return its id."""
        with self._write(invalidates=False) as conn:
            row = first(
                conn.execute(
                    "INSERT INTO evals (sae_id, eval_type_id, eval) VALUES (?, ?, ?) RETURNING id",
                    [sae_id, eval_type_id, dumps(result)],
                )
            )
        assert row is not None
        return int(row[0])

    def evals(self, sae_id: str | None = None, eval_type_id: str | None = None) -> list[EvalRecord]:
        """Stored evaluations, filtered by SAE and/or type, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, sae_id, eval_type_id, eval, created_at FROM evals WHERE (? IS NULL OR sae_id = ?) "
                "AND (? IS NULL OR eval_type_id = ?) ORDER BY id",
                [sae_id, sae_id, eval_type_id, eval_type_id],
            ).fetchall()
        return [EvalRecord(r[1], r[2], loads(r[3]), id=int(r[0]), created_at=r[4]) for r in rows]


def _row(r: ScoreRecord) -> list[Any]:
    """Values of a score in `_COLUMNS` order after id, with the status / score_key fallbacks from its JSON."""
    status = r.status
    if status == Status.OK and "status" in r.metrics:
        status = r.metrics["status"]
    key = r.score_key if r.score_key is not None else r.provenance.get("score_key")
    return [
        int(r.explanation_id), r.scorer, r.scorer_version, r.negative_source, dumps(r.metrics), dumps(r.provenance),
        status_text(status), None if key is None else str(key),
    ]  # fmt: skip


def _stored_keys(conn: duckdb.DuckDBPyConnection, keys: list[str]) -> set[str]:
    """The subset of `keys` already stored."""
    if not keys:
        return set()
    rows = conn.execute(
        "SELECT score_key FROM scores WHERE score_key IN (SELECT unnest(?::TEXT[]))", [keys]
    ).fetchall()
    return {str(r[0]) for r in rows}
