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
snapshot of the model's `llm_cache` rows put in the object store once per run, plus each worker's own new answers
(`llm.snapshot_cache`).

Rate limit: every worker's LLM calls pass one `ray_actors.RateLimiter` actor (global calls per second and calls in
flight, shared with `score --backend ray`).

A killed worker is restarted by Ray and its batch retried (`max_restarts`, `max_task_retries`); a killed driver loses
only the features in flight (none of them written): rerunning the command explains the rest.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sae_workbench.errors import WorkbenchError
from sae_workbench.explainers.base import ExplainContext, Explainer, Explanation
from sae_workbench.explainers.failures import PROVENANCE_KEY, failed_explanation
from sae_workbench.faults import worker_options
from sae_workbench.llm.cache import CachedResponse
from sae_workbench.llm.config import LLMConfig
from sae_workbench.llm.errors import FEATURE_ERRORS, JOB_FATAL_ERRORS
from sae_workbench.llm.snapshot_cache import CacheEntry, SnapshotCache, cache_snapshot
from sae_workbench.llm.usage import Usage, UsageLedger
from sae_workbench.ray_actors import BATCHES_PER_WORKER, DEFAULT_BATCH, Failure, limiter_actor, worker_gate
from sae_workbench.raycluster import RayConfig, import_ray, init_ray

if TYPE_CHECKING:
    from sae_workbench.explainers.job import ExplainJob

LINGER_S = 0.05
"""A partial batch leaves this long after its first feature arrived (the job's reads trickle in)."""


class RemoteExplainError(WorkbenchError):
    """A worker's explainer failed on a feature; the message names the original error type."""


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
            except JOB_FATAL_ERRORS as err:  # reported to the driver, which stops the job
                return Failure(type(err).__name__, str(err))
            except FEATURE_ERRORS as err:  # this feature's failure, stored by the driver; the job goes on
                out = failed_explanation(err)
            except Exception as err:  # reported to the driver, which stops the job
                return Failure(type(err).__name__, str(err))
            if (
                self.client is not None
            ):  # the driver stores the worker client's provenance (structured-output form)
                out.extra[PROVENANCE_KEY] = self.client.provenance()
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
