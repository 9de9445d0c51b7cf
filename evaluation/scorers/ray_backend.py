"""`workbench score --backend ray`: stored explanations scored by async Ray worker actors, the driver the sole writer.

    result = run_scoring_ray(store, sae_id, ScoreConfig("simulation"), llm=LLMConfig(...), workers=2, qps=20)

Design (specs/scale.md 4.1 explain/score row, 4.3): the driver plans the run exactly as the local loop does
(`job.plan_scoring`: pending = requested explanations minus stored score keys; the split's negatives drawn
first), builds each pending explanation's provenance and test records from the store, and records dead features
and explanations without positive test records itself. Live ones go to `ScoreWorker` actors in batches with their
test records; a worker builds the same scorer from the same components (`score_backends`), runs its `prepare` over
the run's explanations once, and returns each outcome with its LLM usage and the new LLM cache entries. The driver
writes the cache entries, then the batch's scores in one transaction (`Store.add_scores`; the UNIQUE score key
refuses a second copy). Workers never open the store (see `explainers.ray_backend` for why), and every worker's
LLM calls pass the one `ray_actors.RateLimiter` actor (global calls per second and calls in flight).

A worker scores its batch one explanation at a time, as the local loop does, so each score's recorded LLM usage is
exactly its own; the parallelism is across workers. A scorer that says it is `local_only` (CoSy: it runs the model
and the SAE in the driver's process) is refused before anything starts.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.scorers.base import (
    ScoreConfig,
    ScoreConfigError,
    ScoreOutcome,
    TestRecords,
)
from sae_workbench.evaluation.scorers.job import (
    ScoreTally,
    base_provenance,
    judge,
    plan_scoring,
    score_backends,
    tests_of,
    usage_delta,
)
from sae_workbench.evaluation.scorers.registry import make_scorer, scorer_class
from sae_workbench.evaluation.scorers.results import ScoreJobResult
from sae_workbench.faults import fail_point, worker_options
from sae_workbench.llm.cache import CachedResponse
from sae_workbench.llm.config import LLMConfig, config_provenance
from sae_workbench.llm.snapshot_cache import CacheEntry, SnapshotCache, cache_snapshot
from sae_workbench.llm.sync import blocking
from sae_workbench.ray_actors import BATCHES_PER_WORKER, DEFAULT_BATCH, Failure, limiter_actor, worker_gate
from sae_workbench.raycluster import RayConfig, import_ray, init_ray
from sae_workbench.store import ExplanationRecord, ScoreRecord, Store


class RemoteScoreError(WorkbenchError):
    """A worker's scorer failed; scores stored before the stop are kept and a rerun resumes."""


@dataclass(frozen=True)
class Scored:
    """One explanation's outcome from a worker."""

    outcome: ScoreOutcome
    """The scorer's outcome."""
    llm_usage: dict[str, Any] | None
    """The LLM usage of this score (None offline)."""
    seconds: float
    """Time the worker spent on it."""
    llm_params: dict[str, Any] | None = None
    """The worker's client provenance after this score's calls (None offline)."""


class ScoreWorker:
    """Scores batches of live explanations with one scorer (an async Ray actor; never opens the store)."""

    def __init__(
        self,
        config: ScoreConfig,
        llm: LLMConfig | None,
        embedding_model: str,
        rows: Sequence[ExplanationRecord],
        snapshot: Mapping[str, CachedResponse],
        limiter: Any,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Build the scorer from the same components as the driver's (the LLM client through `limiter`)."""
        self.cache = SnapshotCache(snapshot)
        gate = worker_gate(limiter) if limiter is not None else None
        self.backends = score_backends(
            llm, cache=self.cache, embedding_model=embedding_model, env=env, gate=gate
        )
        self.scorer = make_scorer(config, self.backends)
        self.rows = list(rows)
        self._prepared = False
        self._lock = asyncio.Lock()

    async def score_batch(
        self, items: list[tuple[ExplanationRecord, TestRecords | None]]
    ) -> tuple[list[Scored | Failure], list[CacheEntry]]:
        """Score (explanation, test records) items in order; a failure is that item's result."""
        out: list[Scored | Failure] = []
        async with self._lock:  # one at a time: each score's LLM usage is the ledger's delta
            if not self._prepared:
                await self.scorer.prepare(self.rows)
                self._prepared = True
            usage = self.backends.llm_usage
            for expl, tests in items:
                t0 = time.perf_counter()
                before = usage() if usage else {}
                try:
                    outcome = await judge(self.scorer, expl, tests)
                except Exception as err:  # reported to the driver, which stops the run
                    out.append(Failure(type(err).__name__, str(err)))
                    continue
                delta = usage_delta(before, usage()) if usage else None
                client = self.backends.llm_client
                params = client.provenance() if client is not None else None
                out.append(Scored(outcome, delta, time.perf_counter() - t0, params))
        return out, self.cache.drain()


@dataclass
class _Live:
    """A live explanation on its way to a worker."""

    expl: ExplanationRecord
    tests: TestRecords | None
    provenance: dict[str, Any]
    seconds: float


async def run_scoring_ray_async(
    store: Store,
    sae_id: str,
    config: ScoreConfig,
    *,
    llm: LLMConfig | None = None,
    embedding_model: str = "",
    explainer: str | None = None,
    features: Sequence[int] | None = None,
    progress: bool = True,
    workers: int | None = None,
    qps: float | None = None,
    burst: int = 1,
    batch_size: int = DEFAULT_BATCH,
    ray_config: RayConfig | None = None,
    env: Mapping[str, str] | None = None,
) -> ScoreJobResult:
    """Score like `job.run_scoring` with the same components (`score_backends`), on Ray workers (awaitable;
    `run_scoring_ray` runs it to completion)."""
    why = scorer_class(config.scorer).local_only
    if why:
        raise ScoreConfigError(f"--scorer {config.scorer} {why}: use --backend local")
    t0 = time.perf_counter()
    environ = os.environ if env is None else env
    key_env = {llm.api_key_env: environ[llm.api_key_env]} if llm and environ.get(llm.api_key_env) else {}
    driver_backends = score_backends(llm, embedding_model=embedding_model, env=environ)  # keys only, no calls
    scorer = make_scorer(config, driver_backends)
    plan = plan_scoring(store, sae_id, config, scorer, explainer, features)
    llm_params = (
        config_provenance(llm) if llm is not None else None
    )  # replaced by the worker's after its calls
    tally = ScoreTally(scorer, config.negatives)
    ready: list[ScoreRecord] = []  # recorded without a worker, written with the next batch

    if not plan.pending:
        return tally.result(plan.skipped, time.perf_counter() - t0)
    started_ray = init_ray(ray_config)
    ray = import_ray()
    n = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    batch = max(1, min(batch_size, math.ceil(len(plan.pending) / (n * BATCHES_PER_WORKER))))
    limiter = limiter_actor(qps, llm.concurrency, burst) if llm is not None else None
    snapshot = cache_snapshot(store, llm.model) if llm is not None else {}
    refs = ray.put(plan.rows), ray.put(snapshot)  # kept until the end: restarted actors rebuild from them
    cls = ray.remote(ScoreWorker).options(num_cpus=1, max_restarts=2, max_task_retries=2, **worker_options())
    actors = [cls.remote(config, llm, embedding_model, refs[0], refs[1], limiter, key_env) for _ in range(n)]
    busy = [0] * n
    in_flight: dict[asyncio.Future[Any], tuple[int, list[_Live]]] = {}
    bar = tqdm(total=len(plan.pending), desc=f"score {scorer.name} (ray)", disable=not progress)

    def submit(items: list[_Live]) -> None:
        index = min(range(n), key=busy.__getitem__)
        busy[index] += 1
        ref = actors[index].score_batch.remote([(it.expl, it.tests) for it in items])
        in_flight[asyncio.ensure_future(_awaited(ref))] = (index, items)

    def write(records: list[ScoreRecord], entries: list[CacheEntry]) -> None:
        if entries:  # the answers first, as the local loop's cache writes precede its score
            store.llm_cache_put_many(
                [
                    (k, m, {"text": t, "prompt_tokens": p, "completion_tokens": c}, p + c)
                    for k, m, t, p, c in entries
                ]
            )
        records = [*ready, *records]
        ready.clear()
        if records:
            store.add_scores(records)
            fail_point("score.commit")  # tests: the driver dying between two commits
        bar.update(len(records))

    async def collect(wait_all: bool) -> None:
        while in_flight and (wait_all or len(in_flight) >= 2 * n):
            done, _ = await asyncio.wait(list(in_flight), return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                index, items = in_flight.pop(fut)
                busy[index] -= 1
                results, entries = fut.result()
                records, failure = [], None
                for it, result in zip(items, results, strict=True):
                    if isinstance(result, Failure):
                        failure = failure or result
                        continue
                    it.provenance["seconds"] = it.seconds + result.seconds
                    if result.llm_usage is not None:
                        it.provenance["llm_usage"] = result.llm_usage
                    if result.llm_params is not None:
                        it.provenance["llm_params"] = result.llm_params
                    records.append(tally.record(it.expl, result.outcome, it.provenance))
                write(records, entries)
                if failure is not None:
                    raise RemoteScoreError(
                        f"{failure.error_type}: {failure.message}. The run stopped; scores already stored are kept: "
                        "rerun the same command to resume."
                    )

    try:
        current: list[_Live] = []
        for expl in plan.pending:
            started = time.perf_counter()
            provenance = base_provenance(scorer, plan.keys[int(expl.id or 0)], llm_params)
            tests = tests_of(expl, plan.builder, provenance, scorer.needs_negatives)
            if isinstance(tests, ScoreOutcome):
                provenance["seconds"] = time.perf_counter() - started
                if driver_backends.llm_usage:  # zeros of the same types as the local loop's delta
                    provenance["llm_usage"] = {k: v - v for k, v in driver_backends.llm_usage().items()}
                ready.append(tally.record(expl, tests, provenance))
                continue
            current.append(_Live(expl, tests, provenance, time.perf_counter() - started))
            if len(current) >= batch:
                submit(current)
                current = []
                await collect(wait_all=False)
        if current:
            submit(current)
        await collect(wait_all=True)
        write([], [])
    finally:
        for fut in in_flight:
            fut.cancel()
        bar.close()
        for actor in [*actors, *([limiter] if limiter is not None else [])]:
            ray.kill(actor)
        del refs
        if started_ray:
            ray.shutdown()
    return tally.result(plan.skipped, time.perf_counter() - t0)


run_scoring_ray = blocking(run_scoring_ray_async)
"""`run_scoring_ray_async` run to completion: the entry point of `workbench score --backend ray`."""


async def _awaited(ref: Any) -> Any:
    """The value of a Ray object reference, awaited on this event loop."""
    return await ref
