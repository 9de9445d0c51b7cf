"""ProxySPEX interactions behind a feature: the `interactions` table, one JSON result per row, keyed by
(sae_id, feature, text hash, player type, budget, seed) plus a hash of the remaining settings (`config_key`).

A constant value function (the feature does not respond to masking) is stored too, with status "constant", so a
rerun skips it as well (`stored_interaction_keys`), which is what makes `workbench interactions` resumable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sae_workbench.store.base import StoreBase
from sae_workbench.store.sql import dumps, loads

INTERACTION_STATUSES = ("ok", "constant", "failed")


@dataclass(frozen=True)
class InteractionRecord:
    """ProxySPEX's interactions of one feature's activation at one position of one text."""

    sae_id: str
    feature: int
    text_hash: str
    """sha256 of the token ids up to the position (16 hex digits)."""
    player_type: str
    """tokens, heads or upstream."""
    budget: int
    seed: int
    window_id: int | None
    """The indexed window the text is (None for a typed text)."""
    position: int
    status: str
    """ok, constant (nothing to explain) or failed; see `result["message"]` for the last two."""
    result: dict[str, Any]
    """`InteractionResult.to_dict()` (top Möbius terms, order-2 index, R^2 table, timings)."""
    config_key: str
    id: int | None = None


_COLUMNS = (
    "sae_id", "feature", "text_hash", "player_type", "budget", "seed", "window_id", "position", "status", "result",
    "config_key",
)  # fmt: skip


class Interactions(StoreBase):
    """The `interactions` table."""

    def add_interactions(self, records: Sequence[InteractionRecord]) -> int:
        """Store results in one transaction, skipping stored config keys; return how many were new."""
        if not records:
            return 0
        rows = [
            [r.sae_id, r.feature, r.text_hash, r.player_type, r.budget, r.seed, r.window_id, r.position, r.status,
             dumps(r.result), r.config_key]
            for r in records
        ]  # fmt: skip
        return self._insert_new("interactions", _COLUMNS, rows)

    def interactions(
        self, sae_id: str, feature: int, player_type: str | None = None
    ) -> list[InteractionRecord]:
        """A feature's stored interaction results (optionally one player type), oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT id, {', '.join(_COLUMNS)} FROM interactions WHERE sae_id = ? AND feature = ? "
                "AND (? IS NULL OR player_type = ?) ORDER BY id",
                [sae_id, int(feature), player_type, player_type],
            ).fetchall()
        return [
            InteractionRecord(
                str(r[1]), int(r[2]), str(r[3]), str(r[4]), int(r[5]), int(r[6]),
                None if r[7] is None else int(r[7]), int(r[8]), str(r[9]), loads(r[10]), str(r[11]), id=int(r[0]),
            )
            for r in rows
        ]  # fmt: skip

    def stored_interaction_keys(self, sae_id: str) -> set[str]:
        """The config keys of an SAE's stored interaction results (what a resumed run skips)."""
        return self._config_keys("interactions", sae_id)
