"""Read-only queries the app needs that the store does not offer yet; they use only `Store.session()`.

Kept here (not in pages) so every SQL statement the app runs sits in one small module; candidates to move into
workbench/store once a second user needs them.
"""

from __future__ import annotations

from sae_workbench.app.views import TokenFeatureHit
from sae_workbench.store import Store


def features_for_token(
    store: Store, sae_id: str, corpus: str, next_window: int, token: str, *, ignore_case: bool, limit: int
) -> tuple[int, list[TokenFeatureHit]]:
    """Features active on occurrences of `token` (display string, surrounding spaces ignored) in indexed windows.

    Returns (occurrences of the token among counted positions, features ranked by how often they fire on it).
    """
    norm = "lower(trim(tok))" if ignore_case else "trim(tok)"
    wanted = token.strip().lower() if ignore_case else token.strip()
    occurrences_sql = (
        "SELECT window_id, position FROM (SELECT window_id, unnest(token_strings) AS tok, unnest(mask) AS counted, "
        "generate_subscripts(token_strings, 1) - 1 AS position FROM windows WHERE corpus = ? AND window_id < ?) "
        f"WHERE counted AND {norm} = ?"
    )
    params = [corpus, int(next_window), wanted]
    with store.session() as conn:
        total_row = conn.execute(f"SELECT count(*) FROM ({occurrences_sql})", params).fetchone()
        rows = conn.execute(
            f"WITH occ AS ({occurrences_sql}) SELECT a.feature, count(*) AS n, avg(a.value) AS mean, "
            "max(a.value) AS mx FROM activations a JOIN occ ON a.window_id = occ.window_id "
            "AND a.position = occ.position WHERE a.sae_id = ? GROUP BY a.feature ORDER BY n DESC, mean DESC, "
            "a.feature LIMIT ?",
            [*params, sae_id, int(limit)],
        ).fetchall()
    total = int(total_row[0]) if total_row else 0
    hits = [TokenFeatureHit(int(r[0]), int(r[1]), total, float(r[2]), float(r[3])) for r in rows]
    return total, hits
