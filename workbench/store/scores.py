"""Scores of explanations (`scores`) and SAE-level evaluations (`evals`)."""

from __future__ import annotations

from typing import Any

from sae_workbench.store.base import StoreBase
from sae_workbench.store.records import EvalRecord, ScoreRecord
from sae_workbench.store.sql import dumps, first, loads


class Scores(StoreBase):
    """The `scores` and `evals` tables."""

    def add_score(self, record: ScoreRecord) -> int:
        """Store a score of an explanation; return its id."""
        with self._write(invalidates=False) as conn:
            row = first(
                conn.execute(
                    "INSERT INTO scores (explanation_id, scorer, scorer_version, negative_source, metrics, provenance) "
                    "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                    [
                        record.explanation_id,
                        record.scorer,
                        record.scorer_version,
                        record.negative_source,
                        dumps(record.metrics),
                        dumps(record.provenance),
                    ],
                )
            )
        assert row is not None
        return int(row[0])

    def scores(
        self, explanation_id: int | None = None, scorer: str | None = None, sae_id: str | None = None
    ) -> list[ScoreRecord]:
        """Stored scores filtered by explanation, scorer and/or SAE, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT s.id, s.explanation_id, s.scorer, s.scorer_version, s.negative_source, s.metrics, "
                "s.provenance, s.created_at FROM scores s LEFT JOIN explanations e ON e.id = s.explanation_id "
                "WHERE (? IS NULL OR s.explanation_id = ?) AND (? IS NULL OR s.scorer = ?) "
                "AND (? IS NULL OR e.sae_id = ?) ORDER BY s.id",
                [explanation_id, explanation_id, scorer, scorer, sae_id, sae_id],
            ).fetchall()
        return [
            ScoreRecord(int(r[1]), r[2], r[3], r[4], loads(r[5]), loads(r[6]), id=int(r[0]), created_at=r[7])
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
