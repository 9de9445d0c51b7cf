"""Position-aware LRP results: `lrp_attributions`, one JSON document per (feature, window, position, mode), keyed by
`config_key` (a hash of everything that determines the result), next to DePass's `attributions`.

A rerun with the same configuration finds its keys stored and skips them (`stored_lrp_keys`), which is what makes
`workbench attribute --method pa_lrp` resumable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sae_workbench.store.base import StoreBase
from sae_workbench.store.sql import dumps, loads

_COLUMNS = (
    "sae_id", "feature", "window_id", "position", "mode", "target", "pre_activation", "closure_error", "result",
    "config_key",
)  # fmt: skip


@dataclass(frozen=True)
class LrpRecord:
    """One LRP attribution of one feature's pre-activation at one position of one text."""

    sae_id: str
    feature: int
    window_id: int | None
    """The indexed window the text is (None for a typed text)."""
    position: int
    mode: str
    """pa_lrp, attnlrp or cp."""
    target: float
    """What the relevance splits: the pre-activation minus the SAE's constant."""
    pre_activation: float
    closure_error: float
    """target minus the sum of the identity's terms (rounding only)."""
    result: dict[str, Any]
    """`LrpAttribution.to_dict()`."""
    config_key: str
    id: int | None = None


class LrpAttributions(StoreBase):
    """The `lrp_attributions` table."""

    def add_lrp_attributions(self, records: Sequence[LrpRecord]) -> int:
        """Store LRP results in one transaction, skipping keys already stored; return how many were new."""
        if not records:
            return 0
        rows = [
            [r.sae_id, r.feature, r.window_id, r.position, r.mode, r.target, r.pre_activation, r.closure_error,
             dumps(r.result), r.config_key]
            for r in records
        ]  # fmt: skip
        return self._insert_new("lrp_attributions", _COLUMNS, rows)

    def lrp_attributions(self, sae_id: str, feature: int, mode: str | None = None) -> list[LrpRecord]:
        """A feature's stored LRP results (optionally one mode), oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT id, {', '.join(_COLUMNS)} FROM lrp_attributions WHERE sae_id = ? AND feature = ? "
                "AND (? IS NULL OR mode = ?) ORDER BY id",
                [sae_id, int(feature), mode, mode],
            ).fetchall()
        return [
            LrpRecord(
                r[1], int(r[2]), None if r[3] is None else int(r[3]), int(r[4]), r[5], float(r[6]), float(r[7]),
                float(r[8]), loads(r[9]), r[10], id=int(r[0]),
            )
            for r in rows
        ]  # fmt: skip

    def stored_lrp_keys(self, sae_id: str) -> set[str]:
        """The config keys of an SAE's stored LRP results (what a resumed run skips)."""
        return self._config_keys("lrp_attributions", sae_id)
