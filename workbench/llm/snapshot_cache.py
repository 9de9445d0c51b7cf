"""A Ray worker's LLM response cache: a snapshot of the store's `llm_cache` rows of one model (read-only) plus the
answers the worker made since, handed back to the driver (the store's one writer) to store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sae_workbench.llm.cache import CachedResponse, cached_response

if TYPE_CHECKING:
    from sae_workbench.store import Store

CacheEntry = tuple[str, str, str, int, int]
"""A new LLM answer a worker made: (key, model, text, prompt tokens, completion tokens), written by the driver."""


class SnapshotCache:
    """A worker's LLM response cache: the driver's snapshot of `llm_cache` (read-only) plus the answers this worker
    made, which `drain` hands back for the driver to store."""

    def __init__(self, snapshot: Mapping[str, CachedResponse]) -> None:
        """Serve `snapshot` (key → answer)."""
        self._snapshot = snapshot
        self._new: dict[str, CachedResponse] = {}
        self._undrained: list[CacheEntry] = []

    def get(self, key: str) -> CachedResponse | None:
        """The answer under `key`, from the snapshot or this worker's own calls."""
        return self._new.get(key) or self._snapshot.get(key)

    def put(
        self, key: str, model: str, response_text: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Remember a new answer (first answer of a key wins, as in the store)."""
        if key in self._new or key in self._snapshot:
            return
        self._new[key] = CachedResponse(model, response_text, prompt_tokens, completion_tokens)
        self._undrained.append((key, model, response_text, prompt_tokens, completion_tokens))

    def drain(self) -> list[CacheEntry]:
        """New answers since the last drain."""
        out, self._undrained = self._undrained, []
        return out


def cache_snapshot(store: Store, model: str) -> dict[str, CachedResponse]:
    """The store's cached answers of `model` (what a worker may serve instead of calling)."""
    out: dict[str, CachedResponse] = {}
    for entry in store.llm_cache_entries(model):
        response = cached_response(entry.model, entry.response)
        if response is not None:
            out[entry.key] = response
    return out
