"""The LLM response cache (`llm_cache`): first put of a key wins."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sae_workbench.store.base import StoreBase
from sae_workbench.store.rows import LLMCacheEntry
from sae_workbench.store.sql import dumps, first, loads


class LLMCache(StoreBase):
    """The `llm_cache` table."""

    def llm_cache_get(self, key: str) -> LLMCacheEntry | None:
        """The cached response for `key`, or None."""
        with self._conn() as conn:
            row = first(
                conn.execute(
                    "SELECT key, model, response, tokens, created_at FROM llm_cache WHERE key = ?", [key]
                )
            )
        return None if row is None else LLMCacheEntry(row[0], row[1], loads(row[2]), int(row[3]), row[4])

    def llm_cache_entries(self, model: str) -> list[LLMCacheEntry]:
        """Every cached response of `model` (a Ray run's snapshot for its workers, `llm.snapshot_cache`)."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT key, model, response, tokens, created_at FROM llm_cache WHERE model = ?", [model]
            ).fetchall()
        return [LLMCacheEntry(r[0], r[1], loads(r[2]), int(r[3]), r[4]) for r in rows]

    def llm_cache_put(self, key: str, model: str, response: dict[str, Any], tokens: int) -> None:
        """Cache a response (a second put of the same key keeps the first)."""
        self.llm_cache_put_many([(key, model, response, tokens)])

    def llm_cache_put_many(self, entries: Sequence[tuple[str, str, dict[str, Any], int]]) -> None:
        """Cache many (key, model, response, tokens) entries in one transaction (first put of a key wins)."""
        if not entries:
            return
        with self._write(invalidates=False) as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO llm_cache (key, model, response, tokens) VALUES (?, ?, ?, ?)",
                [[key, model, dumps(response), int(tokens)] for key, model, response, tokens in entries],
            )
