"""Token search: which features fire on a token string across the indexed windows (the app's search page)."""

from __future__ import annotations

from sae_workbench.store.indexing import Indexing
from sae_workbench.store.rows import TokenFeature
from sae_workbench.store.sql import count


class Tokens(Indexing):
    """Queries over the windows' token strings joined with the activations."""

    def features_for_token(
        self, sae_id: str, token: str, *, ignore_case: bool = False, limit: int = 25
    ) -> tuple[int, list[TokenFeature]]:
        """(occurrences of `token` among the counted positions of `sae_id`'s indexed windows, the features active on
        them ranked by how often they fire, then by mean activation). Surrounding spaces of a token are ignored."""
        with self.session():  # one attachment for the lookups and the queries
            return self._features_for_token(sae_id, token, ignore_case, limit)

    def _features_for_token(
        self, sae_id: str, token: str, ignore_case: bool, limit: int
    ) -> tuple[int, list[TokenFeature]]:
        """features_for_token inside a session."""
        progress = self._indexed(sae_id)
        norm = "lower(trim(tok))" if ignore_case else "trim(tok)"
        wanted = token.strip().lower() if ignore_case else token.strip()
        windows = self._windows_sql(progress.corpus)
        occurrences_sql = (
            "SELECT window_id, position FROM (SELECT window_id, unnest(token_strings) AS tok, unnest(mask) AS counted, "
            f"generate_subscripts(token_strings, 1) - 1 AS position FROM {windows} WHERE corpus = ? AND window_id < ?) "
            f"WHERE counted AND {norm} = ?"
        )
        params = [progress.corpus, progress.next_window, wanted]
        with self._conn() as conn:
            acts = self._activations_sql(sae_id)
            total = count(conn.execute(f"SELECT count(*) FROM ({occurrences_sql})", params))
            rows = conn.execute(
                f"WITH occ AS ({occurrences_sql}) SELECT a.feature, count(*) AS n, avg(a.value) AS mean, "
                f"max(a.value) AS mx FROM {acts} a JOIN occ ON a.window_id = occ.window_id "
                "AND a.position = occ.position WHERE a.sae_id = ? GROUP BY a.feature ORDER BY n DESC, mean DESC, "
                "a.feature LIMIT ?",
                [*params, sae_id, int(limit)],
            ).fetchall()
        return total, [TokenFeature(int(r[0]), int(r[1]), float(r[2]), float(r[3])) for r in rows]
