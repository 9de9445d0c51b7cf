"""Feature statistics (`feature_stats`) and neighbours (`feature_neighbours`), filled by
`sae_workbench.sae.feature_stats.compute_feature_stats`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sae_workbench.store.errors import NotIndexedError
from sae_workbench.store.indexing import Indexing
from sae_workbench.store.rows import FeatureStats
from sae_workbench.store.sql import Table, arrow, first, insert_arrow, list_column, pa

DEFAULT_QUANTILE_LEVELS: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
"""Activation quantile levels shown on dashboards (a deciles-plus-tail choice of ours, not from a paper)."""
DEFAULT_HIST_BINS = 32
"""Histogram bins over [0, max activation]."""


class Stats(Indexing):
    """The `feature_stats` and `feature_neighbours` tables."""

    def compute_activation_stats(
        self,
        sae_id: str,
        quantile_levels: Sequence[float] = DEFAULT_QUANTILE_LEVELS,
        n_bins: int = DEFAULT_HIST_BINS,
    ) -> int:
        """(Re)compute density, max, mean, quantiles and histogram of every active feature in SQL; return features."""
        progress = self._indexed(sae_id)
        levels = [float(q) for q in quantile_levels]
        with self._conn() as conn:
            acts = self._activations_sql(sae_id)
            agg = arrow(
                conn,
                "SELECT feature, count(*) AS n_active, count(DISTINCT window_id) AS n_windows, max(value) AS mx, "
                f"avg(value) AS mean, quantile_cont(value, ?::DOUBLE[]) AS q FROM {acts} WHERE sae_id = ? "
                "GROUP BY feature ORDER BY feature",
                [levels, sae_id],
            )
            hist = arrow(
                conn,
                f"WITH m AS (SELECT feature, max(value) AS mx FROM {acts} WHERE sae_id = ? GROUP BY feature) "
                "SELECT a.feature, least(greatest(floor(a.value / m.mx * ?), 0), ? - 1)::INTEGER AS bin, "
                f"count(*) AS c FROM {acts} a JOIN m USING (feature) WHERE a.sae_id = ? AND m.mx > 0 GROUP BY ALL",
                [sae_id, n_bins, n_bins, sae_id],
            )
        features: np.ndarray = agg.column("feature").to_numpy().astype(np.int64)
        maxes: np.ndarray = agg.column("mx").to_numpy().astype(np.float32)
        counts_FB = np.zeros((len(features), n_bins), dtype=np.int64)
        if hist.num_rows:
            rows = _row_index(features, hist.column("feature").to_numpy().astype(np.int64))
            counts_FB[rows, hist.column("bin").to_numpy()] = hist.column("c").to_numpy()
        edges_FB1 = (
            np.linspace(0.0, 1.0, n_bins + 1, dtype=np.float32)[None, :] * np.maximum(maxes, 0)[:, None]
        )
        n_tokens = max(progress.n_tokens, 1)
        stats = pa.table(
            {
                "sae_id": pa.array([sae_id] * len(features), pa.string()),
                "feature": pa.array(features.astype(np.int32)),
                "n_active": agg.column("n_active"),
                "n_windows_active": agg.column("n_windows"),
                "density": pa.array(agg.column("n_active").to_numpy() / n_tokens),
                "max_value": pa.array(maxes),
                "mean_value": pa.array(agg.column("mean").to_numpy().astype(np.float32)),
                "quantile_levels": pa.array([levels] * len(features), pa.list_(pa.float32())),
                "quantiles": agg.column("q").cast(pa.list_(pa.float32())),
                "hist_edges": list_column(edges_FB1, pa.float32()),
                "hist_counts": list_column(counts_FB, pa.int64()),
            }
        )
        with self._write() as conn:
            conn.execute("DELETE FROM feature_stats WHERE sae_id = ?", [sae_id]).fetchall()
            insert_arrow(conn, "_stats", stats, "INSERT INTO feature_stats SELECT * FROM _stats", [])
            # The completion record, in the same transaction: a kill before it leaves the step to be redone.
            self.record_index_step(sae_id, "statistics", {"quantile_levels": levels, "n_bins": n_bins})
        return len(features)

    def put_feature_neighbours(self, sae_id: str, table: Table, config: dict[str, Any] | None = None) -> None:
        """Replace logit-lens tokens, decoder-cosine and co-occurrence neighbours of `sae_id`, and record the
        `neighbours` step (with `config`) as finished in the same transaction.

        `table` has the feature_neighbours columns except sae_id: feature, logit_top_tokens, logit_top_values,
        logit_bottom_tokens, logit_bottom_values, decoder_neighbours, decoder_cosines, cooc_neighbours, cooc_jaccard.
        """
        with self._write() as conn:
            self.record_index_step(sae_id, "neighbours", config or {})
            conn.execute("DELETE FROM feature_neighbours WHERE sae_id = ?", [sae_id]).fetchall()
            insert_arrow(
                conn,
                "_nb",
                table,
                "INSERT INTO feature_neighbours SELECT ?, feature, logit_top_tokens, logit_top_values, "
                "logit_bottom_tokens, logit_bottom_values, decoder_neighbours, decoder_cosines, cooc_neighbours, "
                "cooc_jaccard FROM _nb",
                [sae_id],
            )

    def feature_stats(self, sae_id: str, feature: int) -> FeatureStats:
        """Dashboard statistics of one feature (zeros for a feature never active)."""
        progress = self._indexed(sae_id)
        with self._conn() as conn:
            row = first(
                conn.execute(
                    "SELECT s.n_active, s.n_windows_active, s.density, s.max_value, s.mean_value, s.quantile_levels, "
                    "s.quantiles, s.hist_edges, s.hist_counts, n.logit_top_tokens, n.logit_top_values, "
                    "n.logit_bottom_tokens, n.logit_bottom_values, n.decoder_neighbours, n.decoder_cosines, "
                    "n.cooc_neighbours, n.cooc_jaccard FROM (SELECT ?::TEXT AS sae_id, ?::INTEGER AS feature) k "
                    "LEFT JOIN feature_stats s USING (sae_id, feature) LEFT JOIN feature_neighbours n USING (sae_id, feature)",
                    [sae_id, int(feature)],
                )
            )
        assert row is not None
        if not progress.finalized and row[0] is None:
            raise NotIndexedError(
                f"statistics of SAE {sae_id} are not computed yet; finish `workbench index`."
            )
        return FeatureStats(
            sae_id=sae_id,
            feature=int(feature),
            n_active=int(row[0] or 0),
            n_windows_active=int(row[1] or 0),
            density=float(row[2] or 0.0),
            max_value=float(row[3] or 0.0),
            mean_value=float(row[4] or 0.0),
            quantile_levels=_floats(row[5]),
            quantiles=_floats(row[6]),
            hist_edges=_floats(row[7]),
            hist_counts=_ints(row[8]),
            logit_top_tokens=_strs(row[9]),
            logit_top_values=_floats(row[10]),
            logit_bottom_tokens=_strs(row[11]),
            logit_bottom_values=_floats(row[12]),
            decoder_neighbours=_ints(row[13]),
            decoder_cosines=_floats(row[14]),
            cooc_neighbours=_ints(row[15]),
            cooc_jaccard=_floats(row[16]),
        )

    def feature_table(self, sae_id: str) -> Table:
        """One row per active feature: feature, n_active, n_windows_active, density, max_value, mean_value."""
        with self._conn() as conn:
            return arrow(
                conn,
                "SELECT feature, n_active, n_windows_active, density, max_value, mean_value FROM feature_stats "
                "WHERE sae_id = ? ORDER BY feature",
                [sae_id],
            )


def _floats(values: Any) -> list[float]:
    """A list column as floats ([] for NULL)."""
    return [float(x) for x in values] if values is not None else []


def _ints(values: Any) -> list[int]:
    """A list column as ints ([] for NULL)."""
    return [int(x) for x in values] if values is not None else []


def _strs(values: Any) -> list[str]:
    """A list column as strings ([] for NULL)."""
    return [str(x) for x in values] if values is not None else []


def _row_index(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Index of each value of `wanted` in `ids` (values of `wanted` must occur in `ids`)."""
    order = np.argsort(ids, kind="stable")
    return order[np.searchsorted(ids, wanted, sorter=order)]
