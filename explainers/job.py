"""The explain batch job: explain many features of one SAE with one explainer, resumably, into the store.

    summary = ExplainJob(store, sae_id, ExplainConfig("tree"), llm=LLMConfig(...)).run(range(50))
    summary = ExplainJob(store, sae_id, TreeExplainer(search=TreeConfig(depth=2)), llm=...).run([3, 7])

The job schedules, holds the store lease, batches writes and builds the stored record; what is explained and how
is the explainer's (`explainers.base.Explainer`, one file each, named in `explainers.registry`).

Each feature's explanation is keyed by a hash of (SAE, feature, explainer + version, prompt version, LLM model and
sampling parameters, sampling config). Finished features are committed in batches — one transaction per 64
features or per second, whichever comes first (a commit of a few tree explanations costs 10–20 ms; slow LLM-bound
features still get one commit each) — so a killed job loses at most the features in flight plus one second of finished
work, and a rerun skips everything stored (no duplicates, no losses). Features with no activations are stored as
dead (`status` DEAD, empty text), not explained. An LLM failure of one feature (`llm.errors.FEATURE_ERRORS`: an
answer still malformed after the re-asks, a request refused or too long for the context, a timeout after the retries)
is stored as that feature's row with a retryable status and its reason (`explainers.failures`) and the job goes on; a
rerun asks again for exactly those features and replaces their rows. An LLM error no feature can escape (wrong key,
endpoint down for good: `JOB_FATAL_ERRORS`) cancels the features in flight — none of them is written, while features already finished are — and
stops the job with one error; rerun the same command to resume.

The store work runs on one thread beside the event loop (`store.lease.StoreWorker`, under the job's `StoreLease`):
each feature's inputs are read there up to READ_AHEAD features ahead, and finished batches are written there in
order, so at concurrency 1 the next feature's DuckDB queries overlap this feature's LLM calls and Python instead of
following them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm.auto import tqdm

from sae_workbench.examples.rules import DEFAULT_RULE_CAP, Rule
from sae_workbench.explainers.base import (
    ExplainConfig,
    ExplainContext,
    Explainer,
    ExplainJobError,
    Explanation,
    FeatureReader,
)
from sae_workbench.explainers.failures import PROVENANCE_KEY, explanation_status, failed_explanation
from sae_workbench.explainers.registry import EXPLAINERS, make_explainer
from sae_workbench.llm.config import LLMConfig, LLMNotConfiguredError, config_provenance
from sae_workbench.llm.errors import FEATURE_ERRORS, JOB_FATAL_ERRORS
from sae_workbench.llm.usage import Usage, UsageLedger
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, Store
from sae_workbench.store.lease import StoreLease, StoreWorker

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_RULE_CAP", "EXPLAINERS", "ExplainConfig", "ExplainJob", "ExplainJobError", "JobSummary",
           "config_key"]  # fmt: skip

KEEPER_POLL_S = 0.05
"""How often the job checks, while features await the LLM, whether another process waits for the store."""
READ_AHEAD = 2
"""Features whose store inputs are read ahead of those in flight (on the store thread, beside the event loop)."""


def _rules_json(rules: tuple[Rule, ...] | None) -> list[dict[str, Any]] | None:
    """An explanation's rules in their stored JSON form (None for a free-text-only explainer)."""
    return None if rules is None else [rule.to_dict() for rule in rules]


def llm_key_params(llm: LLMConfig | None) -> dict[str, Any]:
    """LLM settings that change answers (model, temperature, max_tokens); the endpoint URL and key never enter."""
    if llm is None:
        return {}
    return {"model": llm.model, "temperature": llm.temperature, "max_tokens": llm.max_tokens}


def _explainer(explainer: Explainer[Any] | ExplainConfig) -> Explainer[Any]:
    """An explainer, built from run options when given those."""
    return make_explainer(explainer) if isinstance(explainer, ExplainConfig) else explainer


def config_key(
    sae_id: str, feature: int, explainer: Explainer[Any] | ExplainConfig, llm: LLMConfig | None
) -> str:
    """Stable key of one feature's explanation under one configuration (what the resume check looks up)."""
    method = _explainer(explainer)
    with_llm = llm is not None
    blob = json.dumps(
        {"sae": sae_id, "feature": int(feature), "explainer": method.name, "version": method.version(with_llm),
         "prompt": method.prompt_version(with_llm), "llm": llm_key_params(llm), "sampling": method.sampling()},
        sort_keys=True, separators=(",", ":"),
    )  # fmt: skip
    return f"explain:{hashlib.sha256(blob.encode()).hexdigest()}"


@dataclass(frozen=True)
class _Inputs:
    """What one feature's explainer read from the store."""

    peak: float
    """The feature's largest activation (0 for a dead feature)."""
    data: Any
    """The explainer's own inputs (None for a dead feature)."""
    seconds: float
    """Time the reads took."""


class RemoteExplainer(Protocol):
    """Where live features are explained when not in this process (`explainers.ray_backend.RayExplainBackend`): the
    job still reads each feature's inputs, builds and writes its record, and owns the LLM response cache."""

    async def start(self, job: ExplainJob, n_features: int) -> None:
        """Start the workers for `n_features` pending features of `job` (after its explainer's `prepare`)."""
        ...

    async def explain(self, feature: int, peak: float, data: Any) -> tuple[Explanation, Usage, list[Any]]:
        """One live feature's explanation, its LLM usage and the new LLM cache entries (key, model, text, prompt
        tokens, completion tokens) its calls made."""
        ...

    def concurrency(self) -> int:
        """Features to keep in flight so every worker stays busy."""
        ...

    async def stop(self) -> None:
        """Stop the workers (in-flight work is lost; nothing of it was written)."""
        ...


@dataclass(frozen=True)
class JobSummary:
    """What a job did."""

    requested: int
    """Features asked for."""
    skipped: int
    """Already stored (resumed)."""
    explained: int
    """Explained now."""
    dead: int
    """Stored as dead (no activations)."""
    seconds: float
    """Wall time."""
    usage: Usage
    """LLM usage of the job (zeros offline)."""
    ids: dict[int, int] = field(default_factory=dict)
    """Explanation id per feature stored by this run."""
    failed: int = 0
    """Stored as an LLM failure (status and reason kept; the next run retries them); not counted in `explained`."""


class ExplainJob:
    """Explains features of one SAE into the store (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        sae_id: str,
        explainer: Explainer[Any] | ExplainConfig,
        llm: LLMConfig | None = None,
        *,
        concurrency: int = 8,
        progress: bool = True,
        env: Mapping[str, str] | None = None,
        lease_s: float = 0.5,
        use_cache: bool = True,
        batch_size: int = 64,
        flush_s: float = 1.0,
        remote: RemoteExplainer | None = None,
    ) -> None:
        """Set up; `llm=None` runs the explainer's offline variant (an error for those without one).

        `use_cache=False` skips the store's LLM response cache (benchmarks; forcing fresh samples). Finished
        features are written in one transaction per `batch_size` features or per `flush_s` seconds, whichever
        comes first, and always before the lease lets other processes in (a commit costs ~10 ms; a kill loses at
        most `flush_s` of finished work). `remote` explains live features elsewhere (`--backend ray`); this
        process still reads their inputs and is the only writer of the store.
        """
        method = _explainer(explainer)
        if llm is None and method.requires_llm:
            raise LLMNotConfiguredError(
                f"the {method.name!r} explainer needs an LLM: pass --llm-model (and --llm-base-url for a local "
                "server), or choose --explainer lexical"
            )
        self.store, self.sae_id, self.explainer, self.llm = store, sae_id, method, llm
        self.concurrency = max(1, concurrency)
        self.progress = progress
        self.env = env
        self.lease = StoreLease(store, lease_s)
        self.use_cache = use_cache
        self.batch_size = max(1, batch_size)
        self.flush_s = flush_s
        self.remote = remote
        self._cache: Any = None  # the run's StoreCache (write-behind), when it uses one
        self.ledger = UsageLedger()
        progress_row = store.index_progress(sae_id)
        if progress_row is None:
            store.get_sae(sae_id)
            raise ExplainJobError(
                f"SAE {sae_id} has no activations in {store.path}; run `workbench index` first."
            )
        self.corpus = progress_row.corpus
        self.n_windows = progress_row.next_window
        self._keys: dict[int, str] = {}

    def key(self, feature: int) -> str:
        """Config key of one feature (computed once per job)."""
        key = self._keys.get(feature)
        if key is None:
            key = self._keys[feature] = config_key(self.sae_id, feature, self.explainer, self.llm)
        return key

    def run(self, features: Iterable[int]) -> JobSummary:
        """Explain every feature not already stored; return what was done."""
        return asyncio.run(self.arun(features))

    async def arun(self, features: Iterable[int]) -> JobSummary:
        """Async form of `run`."""
        t0 = time.perf_counter()
        feats = list(dict.fromkeys(int(f) for f in features))
        keys = {f: self.key(f) for f in feats}
        stored = self.store.stored_explanation_keys(list(keys.values()))
        todo = [f for f in feats if keys[f] not in stored]
        if len(todo) < len(feats):
            log.info("resuming: %d of %d features already explained", len(feats) - len(todo), len(feats))
        if todo:
            self.explainer.prepare(self.store, self.sae_id)  # before the lease and the store thread start
        from sae_workbench.llm.cache import StoreCache

        client = None
        cache: StoreCache | None = None
        if self.llm is not None:
            from sae_workbench.llm.client import LLMClient

            cache = StoreCache(self.store, write_behind=True) if self.use_cache else None
            if self.remote is None:
                client = LLMClient(self.llm, cache=cache, ledger=self.ledger, env=self.env)
        self._cache = cache
        concurrency = self.concurrency
        if self.remote is not None and todo:
            await self.remote.start(self, len(todo))
            concurrency = max(concurrency, self.remote.concurrency())
        ids: dict[int, int] = {}
        dead = n_failed = 0
        sem = asyncio.Semaphore(concurrency)
        bar = tqdm(total=len(todo), desc=f"explain ({self.explainer.name})", disable=not self.progress)

        finished: list[ExplanationRecord] = []  # done, not yet handed to the store thread
        writes: list[Future[None]] = []  # batches handed to the store thread, not yet checked
        last_flush = time.monotonic()
        worker = StoreWorker(self.store)
        self.lease.workers.append(worker)

        def write(batch: list[ExplanationRecord]) -> None:
            # store thread; one transaction (one commit) per batch
            stored = self.store.add_explanations(batch)
            ids.update({r.feature: i for r, i in zip(batch, stored, strict=True)})

        def settle(wait: bool) -> None:
            """Raise the first failed write (and wait for those in flight if `wait`)."""
            while writes and (wait or writes[0].done()):
                writes.pop(0).result()

        def flush() -> None:
            nonlocal last_flush
            if cache is not None:  # the answers first: a stored explanation's LLM calls are always cached
                cache.flush()
            # written on the store thread, in order; the lease waits for it before stepping aside
            if finished:
                writes.append(worker.submit(write, finished.copy()))
                finished.clear()
            last_flush = time.monotonic()
            settle(wait=False)

        ahead = asyncio.Semaphore(concurrency + READ_AHEAD)

        async def one(feature: int) -> None:
            nonlocal dead, n_failed
            async with ahead:  # held until the feature is done: reads run at most READ_AHEAD features ahead
                inputs = await worker.read(self._load, feature)
                async with sem:
                    record = await self._feature(feature, inputs, client)
                finished.append(record)
                dead += record.status is Status.DEAD
                n_failed += record.status.retryable
                bar.update(1)
                if len(finished) >= self.batch_size or time.monotonic() - last_flush >= self.flush_s:
                    flush()
                self.lease.renew(before=flush)  # others see every finished feature once they get in

        async def keeper() -> None:
            # This thread's store calls are synchronous, so none is in progress at an await, and the lease lets the
            # store thread finish its queued calls before it closes that session: the lease can step aside here for a
            # waiting process even while every feature in flight awaits a slow LLM (not only between features).
            while True:
                await asyncio.sleep(KEEPER_POLL_S)
                self.lease.renew(before=flush)

        self.lease.acquire()
        tasks = [asyncio.ensure_future(one(f)) for f in todo]
        keeping = asyncio.ensure_future(keeper())
        try:
            if tasks:
                done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                failed = [t for t in done if not t.cancelled() and t.exception() is not None]
                if failed:
                    for t in pending:
                        t.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    err = failed[0].exception()
                    assert err is not None
                    flush()  # features finished before the stop are complete: keep them
                    settle(wait=True)
                    raise ExplainJobError(
                        f"{type(err).__name__}: {err}. The job stopped after storing {len(ids)} of {len(todo)} "
                        "features (in-flight features were not written); rerun the same command to resume."
                    ) from err
        finally:
            keeping.cancel()
            await asyncio.gather(keeping, return_exceptions=True)
            try:
                flush()  # features finished before a stop are complete: keep them
                settle(wait=True)
            finally:
                self.lease.release()
                worker.shutdown()
                self.lease.workers.remove(worker)
                bar.close()
            if client is not None:
                await client.aclose()
            if self.remote is not None and todo:
                await self.remote.stop()
        return JobSummary(len(feats), len(feats) - len(todo), len(ids) - dead - n_failed, dead,
                          time.perf_counter() - t0, self.ledger.total, ids, n_failed)  # fmt: skip

    # ------------------------------------------------------------------ one feature

    def _load(self, feature: int) -> _Inputs:
        """Everything one feature's explainer reads from the store (runs on the store thread, ahead of time)."""
        t0 = time.perf_counter()
        # Every explainer reads the feature's window maxima (cached for the store thread's session): the peak comes
        # from there instead of a separate query.
        maxima = self.store.window_maxima(self.sae_id, feature)
        peak = float(maxima.values.max()) if len(maxima.values) else 0.0
        data = None
        if peak > 0:
            reader = FeatureReader(self.store, self.sae_id, self.corpus, self.n_windows, feature, maxima)
            data = self.explainer.load(reader)
        return _Inputs(peak, data, time.perf_counter() - t0)

    async def _feature(self, feature: int, inputs: _Inputs, client: Any) -> ExplanationRecord:
        """Explain one feature from its inputs (or record it as dead) and build its store record."""
        t0 = time.perf_counter()
        tag = f"feature:{feature}"
        method, with_llm = self.explainer, self.llm is not None
        status = Status.OK
        if inputs.peak <= 0:
            status = Status.DEAD
            out = Explanation("", None, [], [], {"reason": "no activations in the indexed corpus"})
        elif self.remote is not None:
            out, usage, entries = await self.remote.explain(feature, inputs.peak, inputs.data)
            self.ledger.record(tag, usage)
            if self._cache is not None:  # written by the next flush, before this feature's record
                for key, model, text, prompt_tokens, completion_tokens in entries:
                    self._cache.put(key, model, text, prompt_tokens, completion_tokens)
            out.extra["global_max"] = inputs.peak
        else:
            ctx = ExplainContext(feature, inputs.peak, client, tag, self.lease.paused)
            try:
                out = await method.explain(inputs.data, ctx)
            except JOB_FATAL_ERRORS:
                raise
            except (
                FEATURE_ERRORS
            ) as err:  # this feature fails (stored, retried on the next run); the job goes on
                log.warning("feature %d failed: %s: %s", feature, type(err).__name__, err)
                out = failed_explanation(err)
            out.extra["global_max"] = inputs.peak
        if status is Status.OK:
            status = explanation_status(out)
        usage = self.ledger.for_tag(tag)
        llm_params: dict[str, Any] = {}
        if self.llm is not None:
            # the client's provenance: config params plus the structured-output form, context and token counter
            remote_params = out.extra.pop(PROVENANCE_KEY, None)
            if status is Status.DEAD or (client is None and remote_params is None):  # no call was made
                llm_params = config_provenance(self.llm)
            else:
                llm_params = client.provenance() if client is not None else remote_params
            llm_params["api_key_env"] = self.llm.api_key_env  # the variable's name only, never the key
        return ExplanationRecord(
            sae_id=self.sae_id, feature=int(feature), explainer=method.name,
            explainer_version=method.version(with_llm), prompt_version=method.prompt_version(with_llm),
            llm_model=self.llm.model if self.llm is not None else "", llm_params=llm_params,
            sampling=method.sampling(), example_ids=out.example_ids, negative_ids=out.negative_ids, text=out.text,
            config_key=self.key(feature), rules=_rules_json(out.rules), extra={**out.extra, "usage": usage.to_dict()},
            tokens_in=usage.prompt_tokens, tokens_out=usage.completion_tokens,
            seconds=inputs.seconds + time.perf_counter() - t0, status=status,
        )  # fmt: skip
