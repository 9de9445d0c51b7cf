"""Response cache for LLM calls, keyed by (model, sha256 of the messages, sampling params) — never by the key.

`ResponseCache` is the small protocol the client uses. `MemoryCache` keeps entries in a dict; `StoreCache` puts them
in the DuckDB store through `Store.llm_cache_get(key)` / `Store.llm_cache_put(key, model, response: dict, tokens)`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

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


def cache_key(
    model: str, messages: Sequence[Mapping[str, str]], params: Mapping[str, Any], digest: str | None = None
) -> str:
    """The cache key of one call: a hash of the model, the messages' sha256 and the sampling params (`digest`:
    messages_sha256(messages) when already computed, e.g. for several samples of one prompt)."""
    blob = json.dumps(
        {
            "v": CACHE_KEY_VERSION,
            "model": model,
            "messages": digest if digest is not None else messages_sha256(messages),
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


class _CacheEntry(Protocol):
    """What the store's llm_cache_get returns (workbench.store.LLMCacheEntry)."""

    @property
    def model(self) -> str:
        """Model that answered."""
        ...

    @property
    def response(self) -> object:
        """The stored JSON payload (its shape is checked when read)."""
        ...


class _CacheStore(Protocol):
    """The LLM-cache part of workbench.store.Store."""

    def llm_cache_get(self, key: str) -> _CacheEntry | None:
        """Return the stored entry (with .model and .response) for `key`, or None."""
        ...

    def llm_cache_put(self, key: str, model: str, response: dict[str, Any], tokens: int) -> None:
        """Insert the entry for `key` (a second put of the same key may keep the first)."""
        ...

    def llm_cache_put_many(self, entries: Sequence[tuple[str, str, dict[str, Any], int]]) -> None:
        """Insert many (key, model, response, tokens) entries in one transaction."""
        ...


def cached_response(model: str, raw: object) -> CachedResponse | None:
    """The answer a store payload holds ({"text", "prompt_tokens", "completion_tokens"}, as `StoreCache.put`
    writes it), or None for a payload of another shape."""
    if not isinstance(raw, dict):
        return None
    payload = cast(dict[str, Any], raw)
    text = payload.get("text")
    if not isinstance(text, str):
        return None
    return CachedResponse(
        model=str(model),
        response_text=text,
        prompt_tokens=int(payload.get("prompt_tokens", 0)),
        completion_tokens=int(payload.get("completion_tokens", 0)),
    )


class StoreCache:
    """ResponseCache on the DuckDB store's llm_cache table (`Store.llm_cache_get` / `Store.llm_cache_put`).

    The store keeps a JSON payload and a token total per key; this adapter stores
    {"text", "prompt_tokens", "completion_tokens"} as the payload and prompt + completion tokens as the total.
    """

    def __init__(self, store: _CacheStore, write_behind: bool = False) -> None:
        """Wrap `store` (e.g. workbench.store.Store). With `write_behind`, puts are held in memory until `flush()`
        writes them in one transaction: a DuckDB write per LLM call cost 10-20 ms here, more than the explainer's own
        work. The explain job flushes with each batch of explanations it stores, and LLMClient.aclose flushes, so a
        killed job loses only the answers of features it had not stored either."""
        self.store = store
        self.write_behind = write_behind
        self._pending: dict[str, tuple[str, str, dict[str, Any], int]] = {}
        self._lock = threading.Lock()

    def flush(self) -> None:
        """Write the held answers (write-behind mode) to the store."""
        with self._lock:
            entries, self._pending = list(self._pending.values()), {}
        self.store.llm_cache_put_many(entries)

    def get(self, key: str) -> CachedResponse | None:
        """Return the stored answer for `key`, or None (also None for a payload this adapter did not write)."""
        with self._lock:
            held = self._pending.get(key)
        entry = self.store.llm_cache_get(key) if held is None else _HeldEntry(held[1], held[2])
        return None if entry is None else cached_response(entry.model, entry.response)

    def put(
        self, key: str, model: str, response_text: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Store an answer under `key`."""
        payload = {
            "text": response_text,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
        }
        if self.write_behind:
            with self._lock:
                self._pending.setdefault(key, (key, model, payload, prompt_tokens + completion_tokens))
            return
        self.store.llm_cache_put(key, model, payload, prompt_tokens + completion_tokens)


@dataclass(frozen=True)
class _HeldEntry:
    """A write-behind answer not yet in the store, shaped like the store's entry."""

    model: str
    response: dict[str, Any]
