"""Explanations (`explanations`): one row per (SAE, feature, explainer config), keyed by `config_key`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sae_workbench.status import RETRYABLE_VALUES, Status
from sae_workbench.store.base import StoreBase
from sae_workbench.store.errors import StoreError
from sae_workbench.store.rows import ExplanationRecord
from sae_workbench.store.sql import dumps, insert_arrow, loads, pa, read_status, status_text

_COLUMNS = (
    "sae_id", "feature", "explainer", "explainer_version", "prompt_version", "llm_model", "llm_params", "sampling",
    "example_ids", "negative_ids", "text", "rules", "extra", "tokens_in", "tokens_out", "seconds", "config_key",
    "status",
)  # fmt: skip
_TYPES = (
    pa.string(), pa.int32(), pa.string(), pa.string(), pa.string(), pa.string(), pa.string(), pa.string(),
    pa.list_(pa.int64()), pa.list_(pa.int64()), pa.string(), pa.string(), pa.string(), pa.int64(), pa.int64(),
    pa.float64(), pa.string(), pa.string(),
)  # fmt: skip


def explanation_ids_of_sae() -> str:
    """A subquery of the ids of one SAE's explanations (one parameter: the sae_id), for other families that filter
    their rows by the explanation's SAE (scores): only this module names the `explanations` table and its columns."""
    return "SELECT id FROM explanations WHERE sae_id = ?"


class Explanations(StoreBase):
    """The `explanations` table."""

    def add_explanation(self, record: ExplanationRecord) -> int:
        """Store an explanation; return its id (the existing row's id if its config_key is already stored)."""
        return self.add_explanations([record])[0]

    def add_explanations(self, records: Sequence[ExplanationRecord]) -> list[int]:
        """Store explanations in one transaction (one commit); return their ids in order.

        A record whose config_key is already stored (or repeated earlier in `records`) is not inserted again; its
        id is the stored row's. A stored row with a retryable status (an LLM failure) is replaced by the new record.
        Batching is what makes a job's writes cheap: one commit (a WAL fsync, ~10 ms) per batch instead of per record.
        """
        if not records:
            return []
        keys = [r.config_key for r in records]
        with self._write(invalidates=False) as conn:
            conn.execute(
                "DELETE FROM explanations WHERE config_key IN (SELECT unnest(?::TEXT[])) "
                "AND status IN (SELECT unnest(?::TEXT[]))",
                [keys, list(RETRYABLE_VALUES)],
            )
            if len(keys) == 1:
                found = conn.execute("SELECT id, config_key FROM explanations WHERE config_key = ?", keys)
            else:
                found = conn.execute(
                    "SELECT id, config_key FROM explanations WHERE config_key IN (SELECT unnest(?::TEXT[]))",
                    [keys],
                )
            ids: dict[str, int] = {str(k): int(i) for i, k in found.fetchall()}
            first: dict[str, ExplanationRecord] = {}
            for r in records:
                if r.config_key not in ids:
                    first.setdefault(r.config_key, r)
            rows = [_row(r) for r in first.values()]
            columns = ", ".join(_COLUMNS)
            inserted: list[Any]
            if len(rows) == 1:
                inserted = conn.execute(
                    f"INSERT INTO explanations ({columns}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
                    "RETURNING id, config_key",
                    rows[0],
                ).fetchall()
            elif rows:
                table = pa.table(
                    [
                        pa.array(list(col), type=t)
                        for col, t in zip(zip(*rows, strict=True), _TYPES, strict=True)
                    ],
                    names=list(_COLUMNS),
                )
                inserted = insert_arrow(
                    conn,
                    "_new_expl",
                    table,
                    f"INSERT INTO explanations ({columns}) SELECT {columns} FROM _new_expl RETURNING id, config_key",
                    [],
                )
            else:
                inserted = []
            ids.update({str(k): int(i) for i, k in inserted})
        return [ids[k] for k in keys]

    def has_explanation(self, config_key: str) -> bool:
        """Whether an explanation with this config key is stored (lets stages skip done work)."""
        return config_key in self.stored_explanation_keys([config_key])

    def stored_explanation_keys(self, config_keys: Sequence[str]) -> set[str]:
        """The subset of `config_keys` already stored, LLM failures (retryable statuses) left out: what a job skips
        on resume (one query)."""
        if not config_keys:
            return set()
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT config_key FROM explanations WHERE config_key IN (SELECT unnest(?::TEXT[])) "
                "AND status NOT IN (SELECT unnest(?::TEXT[]))",
                [list(config_keys), list(RETRYABLE_VALUES)],
            ).fetchall()
        return {str(r[0]) for r in rows}

    def explanations(
        self, sae_id: str | None = None, feature: int | None = None, explainer: str | None = None
    ) -> list[ExplanationRecord]:
        """Stored explanations, filtered by any of SAE / feature / explainer, oldest first."""
        return self._explanations(
            "(? IS NULL OR sae_id = ?) AND (? IS NULL OR feature = ?) AND (? IS NULL OR explainer = ?)",
            [sae_id, sae_id, feature, feature, explainer, explainer],
        )

    def get_explanation(self, explanation_id: int) -> ExplanationRecord:
        """One explanation by id (StoreError if absent)."""
        found = self._explanations("id = ?", [explanation_id])
        if not found:
            raise StoreError(f"no explanation with id {explanation_id} in {self.path}.")
        return found[0]

    def _explanations(self, where: str, params: list[Any]) -> list[ExplanationRecord]:
        """Explanations matching a WHERE clause (internal)."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, sae_id, feature, explainer, explainer_version, prompt_version, llm_model, llm_params, "
                "sampling, example_ids, negative_ids, text, rules, extra, tokens_in, tokens_out, seconds, created_at, "
                f"config_key, status FROM explanations WHERE {where} ORDER BY id",
                params,
            ).fetchall()
        return [
            ExplanationRecord(
                id=int(r[0]),
                sae_id=r[1],
                feature=int(r[2]),
                explainer=r[3],
                explainer_version=r[4],
                prompt_version=r[5],
                llm_model=r[6],
                llm_params=loads(r[7]),
                sampling=loads(r[8]),
                example_ids=[int(i) for i in r[9]],
                negative_ids=[int(i) for i in r[10]],
                text=r[11],
                rules=loads(r[12]),
                extra=loads(r[13]),
                tokens_in=int(r[14]),
                tokens_out=int(r[15]),
                seconds=float(r[16]),
                created_at=r[17],
                config_key=r[18],
                status=read_status(r[19], f"explanation {r[0]}"),
            )
            for r in rows
        ]


def _row(r: ExplanationRecord) -> list[Any]:
    """Values of an explanation in `_COLUMNS` order (JSON columns as text)."""
    return [
        r.sae_id, int(r.feature), r.explainer, r.explainer_version, r.prompt_version, r.llm_model,
        dumps(r.llm_params), dumps(r.sampling), [int(i) for i in r.example_ids], [int(i) for i in r.negative_ids],
        r.text, None if r.rules is None else dumps(r.rules), dumps(r.extra), int(r.tokens_in), int(r.tokens_out),
        float(r.seconds), r.config_key, status_text(_status(r)),
    ]  # fmt: skip


def _status(r: ExplanationRecord) -> Status:
    """The record's status; a record left at OK whose extra says "dead" (the explain job's older way) is DEAD."""
    if r.status == Status.OK and r.extra.get("status") == Status.DEAD:
        return Status.DEAD
    return r.status
