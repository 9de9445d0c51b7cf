"""Drawn samples of window ids (`samples`): what was shown to an explainer or scorer, and how it was drawn."""

from __future__ import annotations

from sae_workbench.store.base import StoreBase
from sae_workbench.store.rows import Sample
from sae_workbench.store.sql import dumps, first, loads


class Samples(StoreBase):
    """The `samples` table."""

    def add_sample(self, sample: Sample) -> int:
        """Store a drawn sample (source, seed, config, ids); return its id."""
        with self._write(invalidates=False) as conn:
            row = first(
                conn.execute(
                    "INSERT INTO samples (sae_id, feature, source, seed, config, window_ids) VALUES (?, ?, ?, ?, ?, ?) "
                    "RETURNING id",
                    [
                        sample.sae_id,
                        sample.feature,
                        sample.source,
                        sample.seed,
                        dumps(sample.config),
                        sample.window_ids,
                    ],
                )
            )
        assert row is not None
        return int(row[0])

    def samples(self, sae_id: str, feature: int | None = None, source: str | None = None) -> list[Sample]:
        """Stored samples of an SAE (optionally one feature / one source), oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, sae_id, feature, source, seed, config, window_ids FROM samples WHERE sae_id = ? "
                "AND (? IS NULL OR feature = ?) AND (? IS NULL OR source = ?) ORDER BY id",
                [sae_id, feature, feature, source, source],
            ).fetchall()
        return [
            Sample(r[1], int(r[2]), r[3], int(r[4]), loads(r[5]), [int(i) for i in r[6]], id=int(r[0]))
            for r in rows
        ]
