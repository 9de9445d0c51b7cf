"""`workbench explain --backend ray`: live features explained by async Ray worker actors, the driver the sole writer.

    with ray_session(RayConfig(address=None)):        # or the backend starts (and stops) Ray itself
        ExplainJob(store, sae_id, config, llm, remote=RayExplainBackend(workers=2, qps=20)).run(features)

Design (specs/scale.md 4.1 explain row, 4.3): the driver runs the unchanged `ExplainJob` — pending = all config keys
minus those stored, the explainer's `prepare`, each feature's store reads on the job's store thread, the records,
the batched writes under the store lease. Only `Explainer.explain` (the async part, which never sees the store)
moves to `ExplainWorker` actors: the driver ships each live feature's loaded inputs in batches and gets back the
`Explanation`, its LLM usage and the new LLM cache entries, which it writes to `llm_cache` before the feature's
record (as the local job does). Workers never open the store: DuckDB allows one writing process, and the job holds
the file under its lease, so a worker's read-only open would wait for the lease (up to the busy timeout) on every
feature; shipping the inputs keeps the driver the one process that touches store.duckdb. Cache reads come from a
snapshot of the model's `llm_cache` rows put in the object store once per run, plus each worker's own new answers.

Rate limit: one `RateLimiter` actor (a token bucket of `qps` calls per second, burst `burst`, and at most
`concurrency` calls in flight) is entered around every HTTP attempt of every worker (`LLMClient(gate=...)`), so N
workers together never exceed the endpoint's configured rate or concurrency. A worker that dies holding a slot
gets it back when Ray restarts it (`RateLimiter.register`).

A killed worker is restarted by Ray and its batch retried (`max_restarts`, `max_task_retries`); a killed driver loses
only the features in flight (none of them written): rerunning the command explains the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sae_workbench.errors import WorkbenchError
from sae_workbench.explainers.base import ExplainContext, Explainer, Explanation
from sae_workbench.faults import fail_point, worker_options
from sae_workbench.llm.cache import CachedResponse
from sae_workbench.llm.config import LLMConfig
from sae_workbench.llm.usage import Usage, UsageLedger
from sae_workbench.raycluster import RayConfig, import_ray, init_ray

if TYPE_CHECKING:
    from sae_workbench.explainers.job import ExplainJob
    from sae_workbench.store import Store

CacheEntry = tuple[str, str, str, int, int]
"""A new LLM answer a worker made: (key, model, text, prompt tokens, completion tokens), written by the driver."""

DEFAULT_BATCH = 64
"""Features per batch sent to a worker (specs/scale.md 4.1: the driver sends batches of 64 pending keys)."""
BATCHES_PER_WORKER = 4
"""A small run is cut into at least this many batches per worker, so the work spreads and commits progressively."""
LINGER_S = 0.05
"""A partial batch leaves this long after its first feature arrived (the job's reads trickle in)."""
LIMITER_MAX_CONCURRENCY = 10_000
"""Calls an async limiter actor may hold waiting at once (callers beyond Ray's default 1000 queue)."""


class RemoteExplainError(WorkbenchError):
    """A worker's explainer failed on a feature; the message names the original error type."""


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
    table = store.query("SELECT key, model, response FROM llm_cache WHERE model = ?", [model])
    out: dict[str, CachedResponse] = {}
    for key, name, raw in zip(
        *(table.column(c).to_pylist() for c in ("key", "model", "response")), strict=True
    ):
        payload = json.loads(raw) if isinstance(raw, str) else raw
        if isinstance(payload, dict) and isinstance(payload.get("text"), str):
            out[str(key)] = CachedResponse(
                str(name), payload["text"], int(payload.get("prompt_tokens", 0)),
                int(payload.get("completion_tokens", 0)),
            )  # fmt: skip
    return out


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


@dataclass(frozen=True)
class Explained:
    """One feature's result from a worker."""

    explanation: Explanation
    """What the explainer produced."""
    usage: Usage
    """Its LLM usage."""


class ExplainWorker:
    """Runs an explainer's async part for batches of features (an async Ray actor; never opens the store)."""

    def __init__(
        self,
        explainer: Explainer[Any],
        llm: LLMConfig | None,
        snapshot: Mapping[str, CachedResponse],
        limiter: Any,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Build the LLM client (through `limiter`) once for the worker's life."""
        self.explainer = explainer
        self.cache = SnapshotCache(snapshot)
        self.ledger = UsageLedger()
        self.client = None
        if llm is not None:
            from sae_workbench.llm.client import LLMClient

            gate = worker_gate(limiter) if limiter is not None else None
            self.client = LLMClient(llm, cache=self.cache, ledger=self.ledger, env=env, gate=gate)

    async def explain_batch(
        self, items: list[tuple[int, float, Any]]
    ) -> tuple[list[Explained | Failure], list[CacheEntry]]:
        """Explain (feature, peak, inputs) items concurrently; a failure is that item's result."""

        async def one(feature: int, peak: float, data: Any) -> Explained | Failure:
            tag = f"feature:{feature}"
            try:
                out = await self.explainer.explain(data, ExplainContext(feature, peak, self.client, tag))
            except Exception as err:  # reported to the driver, which stops the job
                return Failure(type(err).__name__, str(err))
            return Explained(out, self.ledger.for_tag(tag))

        results = await asyncio.gather(*(one(*item) for item in items))
        return list(results), self.cache.drain()


@dataclass
class _Batch:
    """Features waiting to leave for a worker, with their futures."""

    items: list[tuple[int, float, Any]]
    futures: list[asyncio.Future[tuple[Explanation, Usage, list[Any]]]]


class RayExplainBackend:
    """`ExplainJob(remote=...)` on Ray: start workers and a limiter, send batches, return results (see module)."""

    def __init__(
        self,
        workers: int | None = None,
        *,
        qps: float | None = None,
        burst: int = 1,
        batch_size: int = DEFAULT_BATCH,
        ray_config: RayConfig | None = None,
        max_restarts: int = 2,
    ) -> None:
        """`workers` actors of one CPU each (None: the cluster's CPUs); `qps`: the endpoint's global call rate
        (None: unlimited); the global concurrency is the job's LLM config's."""
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, not {workers}")
        self.n_workers, self.qps, self.burst = workers, qps, burst
        self.batch_size = max(1, batch_size)
        self.ray_config = ray_config
        self.max_restarts = max_restarts
        self.workers: list[Any] = []
        self.limiter: Any = None
        self._busy: list[int] = []
        self._pending: _Batch | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._started_ray = False
        self._refs: tuple[Any, ...] = ()
        self._batch = 1
        self.batches_sent = 0

    async def start(self, job: ExplainJob, n_features: int) -> None:
        """Start Ray if needed, the limiter and the workers (the explainer and the cache snapshot shipped once)."""
        self._started_ray = init_ray(self.ray_config)
        ray = import_ray()
        n = self.n_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._batch = max(1, min(self.batch_size, math.ceil(n_features / (n * BATCHES_PER_WORKER))))
        llm = job.llm
        self.limiter = limiter_actor(self.qps, llm.concurrency if llm else None, self.burst) if llm else None
        snapshot = cache_snapshot(job.store, llm.model) if llm is not None and job.use_cache else {}
        env = None
        if llm is not None:
            source = os.environ if job.env is None else job.env
            env = {llm.api_key_env: source[llm.api_key_env]} if source.get(llm.api_key_env) else {}
        # kept for the run: a restarted actor rebuilds from these (ray-project/ray#53727)
        self._refs = explainer_ref, snapshot_ref = ray.put(job.explainer), ray.put(snapshot)
        cls = ray.remote(ExplainWorker).options(
            num_cpus=1, max_restarts=self.max_restarts, max_task_retries=self.max_restarts, **worker_options()
        )
        self.workers = [cls.remote(explainer_ref, llm, snapshot_ref, self.limiter, env) for _ in range(n)]
        self._busy = [0] * n

    def concurrency(self) -> int:
        """Two batches per worker in flight (one running, one queued behind it)."""
        return max(1, len(self.workers)) * self._batch * 2

    async def explain(self, feature: int, peak: float, data: Any) -> tuple[Explanation, Usage, list[Any]]:
        """Queue one live feature for the next batch and wait for its result."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[Explanation, Usage, list[Any]]] = loop.create_future()
        if self._pending is None:
            self._pending = _Batch([], [])
            self._linger = loop.call_later(LINGER_S, self._send)
        self._pending.items.append((feature, peak, data))
        self._pending.futures.append(fut)
        if len(self._pending.items) >= self._batch:
            self._send()
        return await fut

    def _send(self) -> None:
        """Hand the pending batch to the least busy worker."""
        batch, self._pending = self._pending, None
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if batch is None or not batch.items:
            return
        index = min(range(len(self.workers)), key=self._busy.__getitem__)
        self._busy[index] += 1
        self.batches_sent += 1
        task = asyncio.ensure_future(self._collect(index, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _collect(self, index: int, batch: _Batch) -> None:
        """Await a worker's batch and resolve its features' futures (every future, whatever happens)."""
        try:
            results, entries = await self.workers[index].explain_batch.remote(batch.items)
        except BaseException as err:  # the worker died past its restarts, or the job was cancelled
            for fut in batch.futures:
                if not fut.done():
                    fut.set_exception(RemoteExplainError(f"{type(err).__name__}: {err}"))
            if isinstance(err, asyncio.CancelledError):
                raise
            return
        finally:
            self._busy[index] -= 1
        for i, (fut, result) in enumerate(zip(batch.futures, results, strict=True)):
            if fut.done():
                continue
            if isinstance(result, Failure):
                fut.set_exception(RemoteExplainError(f"{result.error_type}: {result.message}"))
            else:  # the batch's new cache entries travel with its first feature
                fut.set_result((result.explanation, result.usage, entries if i == 0 else []))

    def limiter_stats(self) -> dict[str, int]:
        """The limiter's counters (empty without an LLM)."""
        if self.limiter is None:
            return {}
        return dict(import_ray().get(self.limiter.stats.remote()))

    async def stop(self) -> None:
        """Stop the workers and the limiter (and Ray, if `start` started it)."""
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        batch, self._pending = self._pending, None
        for fut in batch.futures if batch is not None else []:  # never sent: the job is stopping
            if not fut.done():
                fut.set_exception(RemoteExplainError("the job stopped before this feature was sent"))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        ray = import_ray()
        for actor in [*self.workers, *([self.limiter] if self.limiter is not None else [])]:
            ray.kill(actor)
        self.workers, self.limiter, self._refs = [], None, ()
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
