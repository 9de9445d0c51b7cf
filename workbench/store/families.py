"""SAE families (issue 36): `match_runs`, `feature_matches`, `match_agreement` and `explanation_stability`.

A match run is one (SAE A, SAE B, method, similarity, settings) matching, keyed by `match_key` (a hash of them); its
rows carry the method, similarity, threshold and both SAE ids, and are written in the transaction that records the
run, so a run is either stored whole or not at all and a rerun skips it (`match_run`). Functional agreement is
written per chunk of A features (`add_agreement`), so an interrupted `workbench match --agreement` resumes after the
last committed chunk; the sums it needs come from one aggregate query over both SAEs' activations
(`agreement_sums`). Explanation stability rows are keyed by (match_key, explanation_a, explanation_b).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sae_workbench.store.errors import StoreError
from sae_workbench.store.indexing import Indexing
from sae_workbench.store.sql import (
    Table,
    arrow,
    dumps,
    first,
    insert_arrow,
    loads,
    numpy_columns,
    pa,
)

FAMILY_TABLES = ("match_runs", "feature_matches", "match_agreement", "explanation_stability")
"""The tables `export_families_parquet` writes."""
_RUN_COLUMNS = "match_key, sae_a, sae_b, method, similarity, threshold, params, n_rows"


@dataclass(frozen=True)
class MatchRun:
    """One stored matching of SAE A's features to SAE B's."""

    match_key: str
    """Hash of (sae_a, sae_b, method, similarity, settings)."""
    sae_a: str
    sae_b: str
    method: str
    """hungarian, greedy or sinkhorn."""
    similarity: str
    """decoder, encoder or both."""
    threshold: float
    """Similarity at which a pair counts as shared (recorded with every row; curves use several)."""
    params: dict[str, Any]
    """k, block, solver used, d_a, d_b, seconds and the like."""
    n_rows: int
    """Matched pairs stored."""


@dataclass(frozen=True)
class FeatureMatch:
    """A stored pair seen from one of its features: the other SAE's feature, with its agreement when computed."""

    match_key: str
    method: str
    similarity: str
    threshold: float
    sae_id: str
    """The SAE asked about."""
    feature: int
    other_sae: str
    """The SAE on the other side of the pair."""
    other_feature: int
    sim: float
    act_corr: float | None
    """Pearson correlation of the two features' activations (None until `--agreement` ran, or undefined)."""
    top_jaccard: float | None
    """Jaccard overlap of their top windows (None until computed)."""


class Families(Indexing):
    """The SAE-family tables."""

    def match_run(self, match_key: str) -> MatchRun | None:
        """The stored run `match_key`, or None (what a resumed `workbench match` checks)."""
        runs = [r for r in self.match_runs() if r.match_key == match_key]
        return runs[0] if runs else None

    def match_runs(self, sae_id: str | None = None) -> list[MatchRun]:
        """Stored runs (those involving `sae_id` on either side when given), oldest first."""
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM match_runs "
                "WHERE ? IS NULL OR sae_a = ? OR sae_b = ? ORDER BY created_at, match_key",
                [sae_id, sae_id, sae_id],
            ).fetchall()
        return [_run(r) for r in rows]

    def add_match_run(
        self, run: MatchRun, feature_a: np.ndarray, feature_b: np.ndarray, sim: np.ndarray
    ) -> bool:
        """Store a run and its pairs in one transaction; False (nothing written) when the key is already stored."""
        if not (len(feature_a) == len(feature_b) == len(sim) == run.n_rows):
            raise StoreError(
                f"match run {run.match_key}: {len(feature_a)}, {len(feature_b)} and {len(sim)} values for "
                f"{run.n_rows} rows."
            )
        rows = pa.table(
            {
                "feature_a": pa.array(np.asarray(feature_a, dtype=np.int32)),
                "feature_b": pa.array(np.asarray(feature_b, dtype=np.int32)),
                "sim": pa.array(np.asarray(sim, dtype=np.float32)),
            }
        )
        with self._write(invalidates=False) as conn:
            if first(conn.execute("SELECT 1 FROM match_runs WHERE match_key = ?", [run.match_key])):
                return False
            conn.execute(
                "INSERT INTO match_runs (match_key, sae_a, sae_b, method, similarity, threshold, params, n_rows) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [run.match_key, run.sae_a, run.sae_b, run.method, run.similarity, run.threshold, dumps(run.params),
                 run.n_rows],
            ).fetchall()  # fmt: skip
            insert_arrow(
                conn,
                "_pairs",
                rows,
                "INSERT INTO feature_matches SELECT ?, ?, ?, ?, ?, ?, feature_a, feature_b, sim FROM _pairs",
                [run.match_key, run.sae_a, run.sae_b, run.method, run.similarity, run.threshold],
            )
        return True

    def feature_matches(self, match_key: str) -> Table:
        """A run's pairs: feature_a, feature_b, sim (ascending feature_a, then feature_b)."""
        with self._conn() as conn:
            return arrow(
                conn,
                "SELECT feature_a, feature_b, sim FROM feature_matches WHERE match_key = ? ORDER BY feature_a, feature_b",
                [match_key],
            )

    def matches_of_feature(self, sae_id: str, feature: int) -> list[FeatureMatch]:
        """Every stored pair with `feature` of `sae_id` on either side, most similar first, agreement joined in."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT m.match_key, m.method, m.similarity, m.threshold, m.sae_a, m.feature_a, m.sae_b, m.feature_b, "
                "m.sim, g.act_corr, g.top_jaccard FROM feature_matches m LEFT JOIN match_agreement g "
                "USING (match_key, feature_a, feature_b) "
                "WHERE (m.sae_a = ? AND m.feature_a = ?) OR (m.sae_b = ? AND m.feature_b = ?) "
                "ORDER BY m.sim DESC, m.match_key",
                [sae_id, int(feature), sae_id, int(feature)],
            ).fetchall()
        out: list[FeatureMatch] = []
        for r in rows:
            as_a = str(r[4]) == sae_id and int(r[5]) == int(feature)
            other_sae, other_feature = (str(r[6]), int(r[7])) if as_a else (str(r[4]), int(r[5]))
            out.append(
                FeatureMatch(
                    str(r[0]), str(r[1]), str(r[2]), float(r[3]), sae_id, int(feature), other_sae, other_feature,
                    float(r[8]), None if r[9] is None else float(r[9]), None if r[10] is None else float(r[10]),
                )
            )  # fmt: skip
        return out

    # ------------------------------------------------------------------ functional agreement

    def agreement_features(self, match_key: str) -> np.ndarray:
        """A features of the run whose agreement is stored (what a resumed run skips)."""
        with self._conn() as conn:
            cols = numpy_columns(
                conn,
                "SELECT DISTINCT feature_a FROM match_agreement WHERE match_key = ? ORDER BY 1",
                [match_key],
            )
        return cols["feature_a"].astype(np.int64)

    def agreement_sums(self, match_key: str, lo: int, hi: int, top_n: int) -> Table:
        """For the run's pairs with lo <= feature_a < hi, what Pearson correlation and top-window Jaccard need.

        Columns: feature_a, feature_b, n_windows (windows where either fires), n_tokens (their counted tokens), sx,
        sxx (A's sum and sum of squares), sy, syy (B's), sxy (sum of products at the same window and position),
        top_a, top_b (sizes of each feature's top-`top_n` window sets), top_both (their intersection). Only windows
        both SAEs indexed count; both must have been indexed over the same corpus.
        """
        run = self.match_run(match_key)
        if run is None:
            raise StoreError(f"no match run {match_key!r} in {self.path}.")
        pa_, pb = self._indexed(run.sae_a), self._indexed(run.sae_b)
        if pa_.corpus != pb.corpus:
            raise StoreError(
                f"SAE {run.sae_a} was indexed over corpus {pa_.corpus!r} and {run.sae_b} over {pb.corpus!r}: "
                "functional agreement needs both indexed over the same windows."
            )
        end = min(pa_.next_window, pb.next_window)
        acts_a, acts_b = self._activations_sql(run.sae_a), self._activations_sql(run.sae_b)
        windows = self._windows_sql(pa_.corpus)
        sql = f"""
            WITH pairs AS (SELECT feature_a, feature_b FROM feature_matches
                           WHERE match_key = $key AND feature_a >= $lo AND feature_a < $hi),
            a AS (SELECT p.feature_a, p.feature_b, x.window_id, x.position, x.value FROM {acts_a} x
                  JOIN pairs p ON x.feature = p.feature_a
                  WHERE x.sae_id = $sae_a AND x.feature >= $lo AND x.feature < $hi AND x.window_id < $end),
            b AS (SELECT p.feature_a, p.feature_b, y.window_id, y.position, y.value FROM {acts_b} y
                  JOIN pairs p ON y.feature = p.feature_b WHERE y.sae_id = $sae_b AND y.window_id < $end),
            sa AS (SELECT feature_a, feature_b, sum(value) AS sx, sum(value * value) AS sxx FROM a GROUP BY ALL),
            sb AS (SELECT feature_a, feature_b, sum(value) AS sy, sum(value * value) AS syy FROM b GROUP BY ALL),
            sab AS (SELECT feature_a, feature_b, sum(a.value * b.value) AS sxy FROM a
                    JOIN b USING (feature_a, feature_b, window_id, position) GROUP BY ALL),
            uw AS (SELECT DISTINCT feature_a, feature_b, window_id FROM
                   (SELECT feature_a, feature_b, window_id FROM a UNION ALL SELECT feature_a, feature_b, window_id FROM b)),
            nt AS (SELECT uw.feature_a, uw.feature_b, count(*) AS n_windows,
                          sum(len(list_filter(w.mask, lambda m: m))) AS n_tokens
                   FROM uw JOIN {windows} w ON w.corpus = $corpus AND w.window_id = uw.window_id GROUP BY ALL),
            ma AS (SELECT feature_a, feature_b, window_id, max(value) AS m FROM a GROUP BY ALL),
            mb AS (SELECT feature_a, feature_b, window_id, max(value) AS m FROM b GROUP BY ALL),
            ta AS (SELECT feature_a, feature_b, window_id FROM ma
                   QUALIFY row_number() OVER (PARTITION BY feature_a, feature_b ORDER BY m DESC, window_id) <= $top),
            tb AS (SELECT feature_a, feature_b, window_id FROM mb
                   QUALIFY row_number() OVER (PARTITION BY feature_a, feature_b ORDER BY m DESC, window_id) <= $top),
            na AS (SELECT feature_a, feature_b, count(*) AS top_a FROM ta GROUP BY ALL),
            nb AS (SELECT feature_a, feature_b, count(*) AS top_b FROM tb GROUP BY ALL),
            nab AS (SELECT feature_a, feature_b, count(*) AS top_both FROM ta JOIN tb USING (feature_a, feature_b, window_id)
                    GROUP BY ALL)
            SELECT p.feature_a, p.feature_b, coalesce(nt.n_windows, 0) AS n_windows,
                   coalesce(nt.n_tokens, 0) AS n_tokens, coalesce(sa.sx, 0) AS sx, coalesce(sa.sxx, 0) AS sxx,
                   coalesce(sb.sy, 0) AS sy, coalesce(sb.syy, 0) AS syy, coalesce(sab.sxy, 0) AS sxy,
                   coalesce(na.top_a, 0) AS top_a, coalesce(nb.top_b, 0) AS top_b, coalesce(nab.top_both, 0) AS top_both
            FROM pairs p LEFT JOIN nt USING (feature_a, feature_b) LEFT JOIN sa USING (feature_a, feature_b)
            LEFT JOIN sb USING (feature_a, feature_b) LEFT JOIN sab USING (feature_a, feature_b)
            LEFT JOIN na USING (feature_a, feature_b) LEFT JOIN nb USING (feature_a, feature_b)
            LEFT JOIN nab USING (feature_a, feature_b)
            ORDER BY p.feature_a, p.feature_b
        """
        params = {"key": match_key, "lo": int(lo), "hi": int(hi), "sae_a": run.sae_a, "sae_b": run.sae_b,
                  "end": end, "corpus": pa_.corpus, "top": int(top_n)}  # fmt: skip
        with self._conn() as conn:
            relation: Any = conn.sql(sql, params=params)
            return relation.to_arrow_table()

    def add_agreement(self, match_key: str, table: Table) -> int:
        """Store agreement rows (feature_a, feature_b, act_corr, top_jaccard, n_windows) in one transaction."""
        with self._write(invalidates=False) as conn:
            insert_arrow(
                conn,
                "_agree",
                table,
                "INSERT INTO match_agreement SELECT ?, feature_a, feature_b, act_corr, top_jaccard, n_windows "
                "FROM _agree ON CONFLICT DO NOTHING",
                [match_key],
            )
        return int(table.num_rows)

    def agreement(self, match_key: str) -> Table:
        """A run's pairs with their agreement: feature_a, feature_b, sim, act_corr, top_jaccard, n_windows (NULL
        where not computed)."""
        with self._conn() as conn:
            return arrow(
                conn,
                "SELECT m.feature_a, m.feature_b, m.sim, g.act_corr, g.top_jaccard, g.n_windows FROM feature_matches m "
                "LEFT JOIN match_agreement g USING (match_key, feature_a, feature_b) WHERE m.match_key = ? "
                "ORDER BY m.feature_a, m.feature_b",
                [match_key],
            )

    def window_coverage(
        self, parent_sae: str, parent: int, child_sae: str, children: list[int], top_n: int
    ) -> tuple[int, int]:
        """(covered, top): of the parent's top-`top_n` windows, how many have at least one child active."""
        acts_p, acts_c = self._activations_sql(parent_sae), self._activations_sql(child_sae)
        with self._conn() as conn:
            row = first(
                conn.execute(
                    f"WITH top AS (SELECT window_id FROM {acts_p} WHERE sae_id = ? AND feature = ? GROUP BY window_id "
                    "ORDER BY max(value) DESC, window_id LIMIT ?), "
                    f"hit AS (SELECT DISTINCT window_id FROM {acts_c} WHERE sae_id = ? AND feature IN "
                    "(SELECT unnest(?::INTEGER[])) AND value > 0) "
                    "SELECT count(*) FILTER (WHERE window_id IN (SELECT window_id FROM hit)), count(*) FROM top",
                    [parent_sae, int(parent), int(top_n), child_sae, [int(c) for c in children]],
                )
            )
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    # ------------------------------------------------------------------ explanation stability

    def add_stability(self, table: Table) -> int:
        """Store explanation-stability rows (match_key, feature_a, feature_b, explanation_a, explanation_b,
        explainer, embedding_model, text_similarity, transfer_explanation); stored keys are skipped."""
        with self._write(invalidates=False) as conn:
            before = first(conn.execute("SELECT count(*) FROM explanation_stability"))
            insert_arrow(
                conn,
                "_stab",
                table,
                "INSERT INTO explanation_stability SELECT match_key, feature_a, feature_b, explanation_a, "
                "explanation_b, explainer, embedding_model, text_similarity, transfer_explanation FROM _stab "
                "ON CONFLICT DO NOTHING",
                [],
            )
            after = first(conn.execute("SELECT count(*) FROM explanation_stability"))
        return int(after[0]) - int(before[0])

    def stability(self, match_key: str) -> Table:
        """A run's stability rows with both texts: feature_a, feature_b, sim, explainer, explanation_a,
        explanation_b, transfer_explanation, text_a, text_b, text_similarity, embedding_model."""
        with self._conn() as conn:
            return arrow(
                conn,
                "SELECT s.feature_a, s.feature_b, m.sim, s.explainer, s.explanation_a, s.explanation_b, "
                "s.transfer_explanation, ea.text AS text_a, eb.text AS text_b, s.text_similarity, s.embedding_model "
                "FROM explanation_stability s JOIN feature_matches m USING (match_key, feature_a, feature_b) "
                "JOIN explanations ea ON ea.id = s.explanation_a JOIN explanations eb ON eb.id = s.explanation_b "
                "WHERE s.match_key = ? ORDER BY s.feature_a, s.feature_b, s.explanation_a",
                [match_key],
            )

    # ------------------------------------------------------------------ export

    def export_families_parquet(self, folder: str | Path) -> list[Path]:
        """Write the family tables to `folder/<table>.parquet` (zstd); return the files."""
        return self._export_tables(FAMILY_TABLES, folder)


def _run(row: tuple[Any, ...]) -> MatchRun:
    """A match_runs row as a record."""
    return MatchRun(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        str(row[4]),
        float(row[5]),
        loads(row[6]),
        int(row[7]),
    )
