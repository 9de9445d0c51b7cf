"""Ray parts shared by every `--backend ray` stage whose workers call an LLM (explain, score): the global rate limiter
actor and the gate each worker's LLM client passes through, batch sizes, and the failure a worker reports.

Rate limit: one `RateLimiter` actor (a token bucket of `qps` calls per second, burst `burst`, and at most
`concurrency` calls in flight) is entered around every HTTP attempt of every worker (`LLMClient(gate=...)`), so N
workers together never exceed the endpoint's configured rate or concurrency. A worker that dies holding a slot
gets it back when Ray restarts it (`RateLimiter.register`).

Like `raycluster.py`, importing this module does not import Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sae_workbench.faults import fail_point
from sae_workbench.raycluster import import_ray

DEFAULT_BATCH = 64
"""Features per batch sent to a worker (specs/scale.md 4.1: the driver sends batches of 64 pending keys)."""
BATCHES_PER_WORKER = 4
"""A small run is cut into at least this many batches per worker, so the work spreads and commits progressively."""
LIMITER_MAX_CONCURRENCY = 10_000
"""Calls an async limiter actor may hold waiting at once (callers beyond Ray's default 1000 queue)."""


class RateLimiter:
    """One global limit for an LLM endpoint, shared by every worker (run as an async Ray actor).

    Token bucket: `qps` tokens per second up to `burst` stored, one per call (None = no rate limit); at most
    `concurrency` calls hold a slot at once (None = unbounded). `acquire` waits for both and returns a lease;
    `release` frees the lease's slot (once; a second release is a no-op). Each lease names its holder, a worker
    incarnation (actor id, start id): a restarted worker calls `register`, which frees every slot its dead
    incarnations held or are still waiting for, so a worker killed in the middle of a call never takes a slot with it.
    """

    def __init__(self, qps: float | None, concurrency: int | None = None, burst: int = 1) -> None:
        """Start with a full bucket and every slot free."""
        if qps is not None and qps <= 0:
            raise ValueError(f"qps must be > 0 (or None for no limit), not {qps}")
        self.qps, self.burst = qps, max(1, burst)
        self._tokens = float(self.burst)
        self._at = time.monotonic()
        self._lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(concurrency) if concurrency else None
        self._leases: dict[int, tuple[str, str]] = {}
        self._next_lease = 0
        self._current: dict[str, str] = {}  # actor id -> its live incarnation
        self._peak = 0
        self._granted = 0
        self._reclaimed = 0

    def register(self, actor: str, incarnation: str) -> int:
        """Make `incarnation` the live one of `actor`; free the slots of its earlier ones (returns how many)."""
        self._current[actor] = incarnation
        stale = [lease for lease, (a, inc) in self._leases.items() if a == actor and inc != incarnation]
        for lease in stale:
            self.release(lease)
        self._reclaimed += len(stale)
        return len(stale)

    async def acquire(self, actor: str = "", incarnation: str = "") -> int:
        """Wait for a free slot, then for a token (first come, first served); return the lease to release."""
        if self._slots is not None:
            await self._slots.acquire()
        if self.qps is not None:
            async with self._lock:  # one waiter at a time: tokens go out in arrival order
                self._refill()
                if self._tokens < 1.0:
                    await asyncio.sleep((1.0 - self._tokens) / self.qps)
                    self._refill()
                self._tokens -= 1.0
        lease, self._next_lease = self._next_lease, self._next_lease + 1
        self._leases[lease] = (actor, incarnation)
        self._peak = max(self._peak, len(self._leases))
        self._granted += 1
        if actor and self._current.get(actor, incarnation) != incarnation:  # its holder died while it waited
            self.release(lease)
            self._reclaimed += 1
        return lease

    def _refill(self) -> None:
        """Add the tokens earned since the last refill (capped at `burst`)."""
        assert self.qps is not None
        now = time.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now

    def release(self, lease: int) -> None:
        """Free the slot of a finished call (a lease already freed is ignored)."""
        if self._leases.pop(lease, None) is not None and self._slots is not None:
            self._slots.release()

    def stats(self) -> dict[str, int]:
        """Calls granted, the most in flight at once, those in flight now, and slots reclaimed from dead workers."""
        return {
            "granted": self._granted,
            "peak_in_flight": self._peak,
            "in_flight": len(self._leases),
            "reclaimed": self._reclaimed,
        }


def limiter_actor(qps: float | None, concurrency: int | None, burst: int = 1) -> Any:
    """A new `RateLimiter` actor (no CPU reserved; Ray must be initialised)."""
    ray = import_ray()
    cls = ray.remote(RateLimiter).options(num_cpus=0, max_concurrency=LIMITER_MAX_CONCURRENCY)
    return cls.remote(qps, concurrency, burst)


def gated(limiter: Any, actor: str = "", incarnation: str = "") -> Any:
    """The `LLMClient(gate=...)` factory that holds a slot and a token of `limiter` around one HTTP attempt."""

    @contextlib.asynccontextmanager
    async def gate() -> AsyncIterator[None]:
        lease = await limiter.acquire.remote(actor, incarnation)
        try:
            fail_point("llm.gate")  # tests: a worker dying while it holds a slot
            yield
        finally:
            limiter.release.remote(lease)

    return gate


def worker_gate(limiter: Any) -> Any:
    """`gated(limiter)` for the calling Ray actor, registered as a new incarnation of it first (a restarted actor
    keeps its id; registering frees whatever slots its dead incarnation held)."""
    ray = import_ray()
    actor = ray.get_runtime_context().get_actor_id() or ""
    incarnation = uuid.uuid4().hex
    ray.get(limiter.register.remote(actor, incarnation))
    return gated(limiter, actor, incarnation)


@dataclass(frozen=True)
class Failure:
    """A feature a worker could not explain (the original error's type and message)."""

    error_type: str
    """Name of the exception's class."""
    message: str
    """Its message."""
