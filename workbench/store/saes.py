"""SAEs: registering, reading and updating the `saes` table."""

from __future__ import annotations

from typing import Any

from sae_workbench.store.base import StoreBase
from sae_workbench.store.errors import SAEConflictError, UnknownSAEError
from sae_workbench.store.rows import SAERecord
from sae_workbench.store.sql import dumps, first, loads

_COLUMNS = "sae_id, model, hook, d_in, d_sae, cfg, metrics, created_at"


class SAEs(StoreBase):
    """The `saes` table."""

    def register_sae(
        self,
        sae_id: str,
        model: str,
        hook: str,
        d_in: int,
        d_sae: int,
        cfg: dict[str, Any],
        metrics: dict[str, Any] | None = None,
    ) -> SAERecord:
        """Register an SAE (idempotent); raise SAEConflictError if the id exists with another model/hook/shape."""
        with self._write() as conn:
            row = first(conn.execute("SELECT model, hook, d_in, d_sae FROM saes WHERE sae_id = ?", [sae_id]))
            if row is None:
                conn.execute(
                    "INSERT INTO saes (sae_id, model, hook, d_in, d_sae, cfg, metrics) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [sae_id, model, hook, d_in, d_sae, dumps(cfg), dumps(metrics or {})],
                ).fetchall()
            elif tuple(row) != (model, hook, d_in, d_sae):
                raise SAEConflictError(
                    f"SAE {sae_id} is registered as (model, hook, d_in, d_sae)={tuple(row)}, not "
                    f"{(model, hook, d_in, d_sae)}. SAE ids hash weights + hook + model, so recompute the id."
                )
            elif metrics:
                conn.execute(
                    "UPDATE saes SET metrics = ? WHERE sae_id = ?", [dumps(metrics), sae_id]
                ).fetchall()
        return self.get_sae(sae_id)

    def update_sae_metrics(self, sae_id: str, metrics: dict[str, Any]) -> None:
        """Merge `metrics` into an SAE's stored metrics."""
        merged = {**self.get_sae(sae_id).metrics, **metrics}
        with self._write() as conn:
            conn.execute("UPDATE saes SET metrics = ? WHERE sae_id = ?", [dumps(merged), sae_id]).fetchall()

    def get_sae(self, sae_id: str) -> SAERecord:
        """The registered SAE `sae_id`; UnknownSAEError lists the known ids if absent."""
        return self._cached(("sae", sae_id), lambda: self._read_sae(sae_id))

    def _read_sae(self, sae_id: str) -> SAERecord:
        """get_sae without the session cache."""
        with self._conn() as conn:
            row = first(conn.execute(f"SELECT {_COLUMNS} FROM saes WHERE sae_id = ?", [sae_id]))
        if row is None:
            known = [s.sae_id for s in self.list_saes()]
            raise UnknownSAEError(f"SAE {sae_id!r} is not in {self.path}; known SAEs: {known or 'none'}.")
        return _sae_record(row)

    def list_saes(self) -> list[SAERecord]:
        """All registered SAEs, oldest first."""
        with self._conn() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM saes ORDER BY created_at, sae_id").fetchall()
        return [_sae_record(r) for r in rows]


def _sae_record(row: tuple[Any, ...]) -> SAERecord:
    """A saes row as a record."""
    return SAERecord(row[0], row[1], row[2], int(row[3]), int(row[4]), loads(row[5]), loads(row[6]), row[7])
