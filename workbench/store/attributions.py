"""Why a feature fires and what it does: `attributions` (DePass and baselines) and `feature_effects` (ablation,
steering), one JSON document per row, keyed by `config_key` (a hash of everything that determines the result).

A rerun with the same configuration finds its keys stored and skips them (`stored_attribution_keys`), which is what
makes `workbench attribute` resumable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sae_workbench.store.base import StoreBase
from sae_workbench.store.sql import dumps, loads


@dataclass(frozen=True)
class AttributionRecord:
    """One attribution of one feature's activation at one position of one text."""

    sae_id: str
    feature: int
    window_id: int | None
    """The indexed window the text is (None for a typed text)."""
    position: int
    """The position whose activation is attributed."""
    level: str
    """tokens, components or upstream."""
    method: str
    """depass, grad_x_input, integrated_gradients, attention_rollout or random."""
    rule: str
    """DePass's MLP rule (softmax, up_linear, gate_linear); empty for the other methods."""
    result: dict[str, Any]
    """The method's result (`TokenAttribution.to_dict()` and the like)."""
    config_key: str
    id: int | None = None


@dataclass(frozen=True)
class EffectRecord:
    """One causal effect of one feature: an ablation over its examples or steering from a prompt."""

    sae_id: str
    feature: int
    kind: str
    """zero_ablation, mean_ablation or steering."""
    result: dict[str, Any]
    config_key: str
    window_ids: list[int] = field(default_factory=lambda: list[int]())
    """The indexed windows it ran on."""
    id: int | None = None


class Attributions(StoreBase):
    """The `attributions` and `feature_effects` tables."""

    def add_attributions(self, records: Sequence[AttributionRecord]) -> int:
        """Store attributions in one transaction, skipping keys already stored; return how many were new."""
        columns = (
            "sae_id",
            "feature",
            "window_id",
            "position",
            "level",
            "method",
            "rule",
            "result",
            "config_key",
        )
        return self._insert_new(
            "attributions",
            columns,
            [
                [r.sae_id, r.feature, r.window_id, r.position, r.level, r.method, r.rule, dumps(r.result),
                 r.config_key]
                for r in records
            ],
        )  # fmt: skip

    def attributions(
        self, sae_id: str, feature: int, level: str | None = None, method: str | None = None
    ) -> list[AttributionRecord]:
        """A feature's stored attributions (optionally one level / one method), oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, sae_id, feature, window_id, position, level, method, rule, result, config_key "
                "FROM attributions WHERE sae_id = ? AND feature = ? AND (? IS NULL OR level = ?) "
                "AND (? IS NULL OR method = ?) ORDER BY id",
                [sae_id, int(feature), level, level, method, method],
            ).fetchall()
        return [
            AttributionRecord(
                r[1], int(r[2]), None if r[3] is None else int(r[3]), int(r[4]), r[5], r[6], r[7], loads(r[8]),
                r[9], id=int(r[0]),
            )
            for r in rows
        ]  # fmt: skip

    def stored_attribution_keys(self, sae_id: str) -> set[str]:
        """The config keys of an SAE's stored attributions and effects (what a resumed run skips)."""
        return self._config_keys("attributions", sae_id) | self._config_keys("feature_effects", sae_id)

    def add_effects(self, records: Sequence[EffectRecord]) -> int:
        """Store effects in one transaction, skipping keys already stored; return how many were new."""
        columns = ("sae_id", "feature", "kind", "window_ids", "result", "config_key")
        rows = [[r.sae_id, r.feature, r.kind, r.window_ids, dumps(r.result), r.config_key] for r in records]
        return self._insert_new("feature_effects", columns, rows)

    def effects(self, sae_id: str, feature: int, kind: str | None = None) -> list[EffectRecord]:
        """A feature's stored effects (optionally one kind), oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, sae_id, feature, kind, result, config_key, window_ids FROM feature_effects "
                "WHERE sae_id = ? AND feature = ? AND (? IS NULL OR kind = ?) ORDER BY id",
                [sae_id, int(feature), kind, kind],
            ).fetchall()
        return [
            EffectRecord(r[1], int(r[2]), r[3], loads(r[4]), r[5], [int(i) for i in r[6]], id=int(r[0]))
            for r in rows
        ]
