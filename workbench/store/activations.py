"""Per-feature reads of the activation table: window maxima, dense activations on windows, PRISM's text scores, and
the example draws built on the maxima (top, quantile, random, random negatives).

Two read paths answer the first three (pinned equal by tests/store/test_store_perf.py::
test_feature_rows_answer_like_the_aggregate_queries): inside a session, a feature with at most `feature_rows.ROWS_CAP`
rows is read once by a plain scan and answered in numpy (`FeatureRows`: one query per feature instead of one per
call, 3–6 ms each on this machine); denser features, and calls outside a session, use DuckDB aggregates (bounded
memory). Measured on 1M synthetic rows (bench/store_bench.py's synthetic_rows, 40 features of median 86 rows; maxima +
activations on the top 20 + text scores, in a session): 2.3 ms per feature by rows, 11.7 ms by aggregates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sae_workbench.store import feature_rows
from sae_workbench.store.feature_rows import FeatureRows
from sae_workbench.store.indexing import Indexing
from sae_workbench.store.rows import Example, IndexProgress, WindowMaxima
from sae_workbench.store.sql import in_ids, numpy_columns

RANK_PREFIX_PER_EXAMPLE = 4
"""top_examples on a partitioned SAE reads the feature's first max(4k, 64) rows by rank: a window usually has only a
few tokens near its peak, so 4 rows per asked window almost always hold k distinct windows (else the aggregate runs)."""
RANK_PREFIX_MIN = 64
"""Smallest rank prefix read (one small slice of a row group either way)."""


class Activations(Indexing):
    """Reads of one feature's activations."""

    def window_activations(
        self, sae_id: str, feature: int, window_ids: Sequence[int] | np.ndarray
    ) -> np.ndarray:
        """Dense (len(window_ids), T) float32 activations of one feature on the given windows (0 where not stored)."""
        progress = self._indexed(sae_id)
        ids = np.asarray(window_ids, dtype=np.int64)
        if len(ids) == 0:
            return np.zeros((0, progress.context_size), dtype=np.float32)
        if self._in_session():
            rows = self._session_rows(sae_id, feature)
            if rows is not None:
                return rows.dense(ids, progress.context_size)
        where, params = in_ids("window_id", [int(i) for i in ids])
        with self._conn() as conn:
            acts, fb = self._activations_sql(sae_id), self._bucket_filter(sae_id, feature)
            cols = numpy_columns(
                conn,
                f"SELECT window_id, position, value FROM {acts} WHERE sae_id = ? AND feature = ?{fb} AND {where}",
                [sae_id, int(feature), *params],
            )
        # Through FeatureRows so that a window id asked twice gets its activations twice.
        return FeatureRows.from_columns(cols["window_id"], cols["position"], cols["value"]).dense(
            ids, progress.context_size
        )

    def window_maxima(self, sae_id: str, feature: int) -> WindowMaxima:
        """Per-window max activation of one feature over every window where it is active (ascending window id;
        a window's position is its earliest token at the maximum)."""
        maxima = self._cached(("maxima", sae_id, int(feature)), lambda: self._read_maxima(sae_id, feature))
        return WindowMaxima(maxima.window_ids.copy(), maxima.values.copy(), maxima.positions.copy())

    def _session_rows(self, sae_id: str, feature: int) -> FeatureRows | None:
        """The feature's rows, read once per session (None for features denser than feature_rows.ROWS_CAP)."""
        return self._cached(("rows", sae_id, int(feature)), lambda: self._read_rows(sae_id, feature))

    def _read_rows(self, sae_id: str, feature: int) -> FeatureRows | None:
        """Every activation row of a feature, or None when it has more than ROWS_CAP (one plain scan)."""
        cap = feature_rows.ROWS_CAP
        with self._conn() as conn:
            acts, fb = self._activations_sql(sae_id), self._bucket_filter(sae_id, feature)
            cols = numpy_columns(
                conn,
                f"SELECT window_id, position, value FROM {acts} WHERE sae_id = ? AND feature = ?{fb} LIMIT ?",
                [sae_id, int(feature), cap + 1],
            )
        if len(cols["window_id"]) > cap:
            return None
        return FeatureRows.from_columns(cols["window_id"], cols["position"], cols["value"])

    def _read_maxima(self, sae_id: str, feature: int) -> WindowMaxima:
        """window_maxima without the session cache: from the feature's rows, or aggregated by DuckDB when dense."""
        self._indexed(sae_id)
        rows = self._session_rows(sae_id, feature) if self._in_session() else self._read_rows(sae_id, feature)
        if rows is not None:
            return rows.maxima()
        with self._conn() as conn:
            acts, fb = self._activations_sql(sae_id), self._bucket_filter(sae_id, feature)
            cols = numpy_columns(
                conn,
                f"SELECT window_id, max(value) AS m, arg_max(position, (value, -position)) AS p FROM {acts} "
                f"WHERE sae_id = ? AND feature = ?{fb} GROUP BY window_id ORDER BY window_id",
                [sae_id, int(feature)],
            )
        return WindowMaxima(
            window_ids=cols["window_id"].astype(np.int64),
            values=cols["m"].astype(np.float32),
            positions=cols["p"].astype(np.int64),
        )

    def window_text_scores(self, sae_id: str, feature: int) -> tuple[np.ndarray, np.ndarray]:
        """(window ids ascending, scores) over the windows where `feature` is active: its activation summed over
        each window's tokens and divided by their number, BOS and padding excluded (PRISM's text score, computed
        without loading the windows' tokens)."""
        progress = self._indexed(sae_id)
        if self._in_session():
            rows = self._session_rows(sae_id, feature)
            if rows is not None:
                ids, n = self._cached(("token_counts", sae_id), lambda: self._read_token_counts(progress))
                return rows.text_scores(ids, n)
        with self._conn() as conn:
            acts, fb = self._activations_sql(sae_id), self._bucket_filter(sae_id, feature)
            cols = numpy_columns(
                conn,
                "WITH s AS (SELECT window_id, coalesce(sum(value) FILTER (WHERE position > 0), 0) AS total "
                f"FROM {acts} WHERE sae_id = ? AND feature = ?{fb} GROUP BY window_id) "
                "SELECT s.window_id, s.total, len(list_filter(w.mask[2:], lambda x: x)) AS n FROM s "
                f"JOIN {self._windows_sql(progress.corpus)} w ON w.corpus = ? AND w.window_id = s.window_id "
                "ORDER BY s.window_id",
                [sae_id, int(feature), progress.corpus],
            )
        n = cols["n"].astype(np.float64)
        scores = np.divide(cols["total"].astype(np.float64), n, out=np.zeros_like(n), where=n > 0)
        return cols["window_id"].astype(np.int64), scores

    def _read_token_counts(self, progress: IndexProgress) -> tuple[np.ndarray, np.ndarray]:
        """(window ids ascending, tokens per window without BOS and padding) over the indexed windows."""
        with self._conn() as conn:
            windows = self._windows_sql(progress.corpus)
            cols = numpy_columns(
                conn,
                f"SELECT window_id, len(list_filter(mask[2:], lambda x: x)) AS n FROM {windows} "
                "WHERE corpus = ? AND window_id < ? ORDER BY window_id",
                [progress.corpus, progress.next_window],
            )
        return cols["window_id"].astype(np.int64), cols["n"].astype(np.float64)

    # ------------------------------------------------------------------ examples

    def top_examples(self, sae_id: str, feature: int, k: int = 20) -> list[Example]:
        """The `k` windows with the highest max activation of `feature` (ties broken by window id)."""
        with self._conn() as conn:  # one attachment for the lookups and the query
            self._indexed(sae_id)
            if self.activations_root(sae_id) is not None:
                ranked = self._top_by_rank(sae_id, feature, k)
                if ranked is not None:
                    return ranked
            acts, fb = self._activations_sql(sae_id), self._bucket_filter(sae_id, feature)
            rows = conn.execute(
                f"SELECT window_id, max(value) AS m, arg_max(position, (value, -position)) FROM {acts} "
                f"WHERE sae_id = ? AND feature = ?{fb} GROUP BY window_id ORDER BY m DESC, window_id LIMIT ?",
                [sae_id, int(feature), int(k)],
            ).fetchall()
        return [Example(int(r[0]), float(r[1]), int(r[2])) for r in rows]

    def _top_by_rank(self, sae_id: str, feature: int, k: int) -> list[Example] | None:
        """top_examples of a partitioned SAE from the feature's first rows by `rank` (one bucket file, a prefix of
        the feature's sorted rows), or None when that prefix cannot decide them (then the aggregate query runs).

        Every row valued above the prefix's last value is in the prefix, so a window whose max in the prefix is
        above it has its true max (and earliest position at it); when at least `k` windows do, they are the top k.
        """
        if k <= 0:
            return []
        n = max(RANK_PREFIX_PER_EXAMPLE * k, RANK_PREFIX_MIN)
        with self._conn() as conn:
            acts, fb = self._activations_sql(sae_id), self._bucket_filter(sae_id, feature)
            cols = numpy_columns(
                conn,
                f"SELECT window_id, position, value FROM {acts} WHERE sae_id = ? AND feature = ?{fb} AND rank < ?",
                [sae_id, int(feature), n],
            )
        values = cols["value"].astype(np.float32)
        maxima = FeatureRows.from_columns(cols["window_id"], cols["position"], values).maxima()
        if len(values) < n:  # the whole feature
            return maxima.top(k)
        decided = maxima.values > values.min()
        if int(decided.sum()) < k:
            return None
        return WindowMaxima(
            maxima.window_ids[decided], maxima.values[decided], maxima.positions[decided]
        ).top(k)
