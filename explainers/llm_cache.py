"""Response cache for LLM calls, keyed by (model, sha256 of the messages, sampling params) — never by the key.

`ResponseCache` is the small protocol the client uses. `MemoryCache` keeps entries in a dict; `StoreCache` adapts any
object with `llm_cache_get(key)` / `llm_cache_put(key, model, response_text, prompt_tokens, completion_tokens)`
(the DuckDB `Store`) to the protocol.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Bump when the key recipe changes, so old entries are not served for a different meaning.
CACHE_KEY_VERSION = "llm-cache-v1"


@dataclass(frozen=True)
class CachedResponse:
    """One stored answer and the tokens it cost when it was first made."""

    model: str
    """Model that produced the answer."""
    response_text: str
    """The assistant message content, verbatim."""
    prompt_tokens: int
    """Prompt tokens reported by the endpoint for the original call."""
    completion_tokens: int
    """Completion tokens reported by the endpoint for the original call."""


class ResponseCache(Protocol):
    """Where the client looks answers up before calling, and stores them after."""

    def get(self, key: str) -> CachedResponse | None:
        """Return the stored answer for `key`, or None."""
        ...

    def put(
        self, key: str, model: str, response_text: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Store an answer under `key` (overwriting is allowed; answers for a key are interchangeable)."""
        ...


def messages_sha256(messages: Sequence[Mapping[str, str]]) -> str:
    """Hex sha256 of the messages in a canonical JSON form (role and content only)."""
    canon = [{"role": m["role"], "content": m["content"]} for m in messages]
    blob = json.dumps(canon, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def cache_key(model: str, messages: Sequence[Mapping[str, str]], params: Mapping[str, Any]) -> str:
    """The cache key of one call: a hash of the model, the messages' sha256 and the sampling params."""
    blob = json.dumps(
        {
            "v": CACHE_KEY_VERSION,
            "model": model,
            "messages": messages_sha256(messages),
            "params": dict(params),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return f"{CACHE_KEY_VERSION}:{hashlib.sha256(blob.encode('utf-8')).hexdigest()}"


class MemoryCache:
    """An in-process ResponseCache (thread-safe); useful for tests and one-off runs."""

    def __init__(self) -> None:
        """Start empty."""
        self._entries: dict[str, CachedResponse] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> CachedResponse | None:
        """Return the stored answer for `key`, or None."""
        with self._lock:
            return self._entries.get(key)

    def put(
        self, key: str, model: str, response_text: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Store an answer under `key`."""
        with self._lock:
            self._entries[key] = CachedResponse(model, response_text, prompt_tokens, completion_tokens)

    def __len__(self) -> int:
        """Number of stored answers."""
        with self._lock:
            return len(self._entries)


class _CacheStore(Protocol):
    """What StoreCache needs from a store."""

    def llm_cache_get(self, key: str) -> Any:
        """Return the stored row for `key` or None."""
        ...

    def llm_cache_put(
        self, key: str, model: str, response_text: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Insert or replace the row for `key`."""
        ...


def _field(row: Any, name: str) -> Any:
    """Read a field from a mapping or an object with attributes."""
    if isinstance(row, Mapping):
        return row[name]
    return getattr(row, name)


class StoreCache:
    """Adapts a store with llm_cache_get/llm_cache_put to ResponseCache.

    The store's get may return a CachedResponse, any object with the attributes `response_text`, `prompt_tokens`,
    `completion_tokens` (and optionally `model`), a mapping with those keys, or None.
    """

    def __init__(self, store: _CacheStore) -> None:
        """Wrap `store` (e.g. workbench.store.Store)."""
        self.store = store

    def get(self, key: str) -> CachedResponse | None:
        """Return the stored answer for `key`, or None."""
        row = self.store.llm_cache_get(key)
        if row is None:
            return None
        if isinstance(row, CachedResponse):
            return row
        has_model = ("model" in row) if isinstance(row, Mapping) else hasattr(row, "model")
        return CachedResponse(
            model=str(_field(row, "model")) if has_model else "",
            response_text=str(_field(row, "response_text")),
            prompt_tokens=int(_field(row, "prompt_tokens")),
            completion_tokens=int(_field(row, "completion_tokens")),
        )

    def put(
        self, key: str, model: str, response_text: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Store an answer under `key`."""
        self.store.llm_cache_put(key, model, response_text, prompt_tokens, completion_tokens)
