"""`explain --backend ray` (explainers/ray_backend.py): the same rows as the local backend, resume after a SIGKILLed
driver with LLM calls only for the rest, and one rate limit shared by every worker.

Runs on the session's local Ray cluster (tests/conftest.py `ray_cluster`: 2 CPUs, loopback only) and the scripted
OpenAI-compatible server on 127.0.0.1 (tests/fake_llm.py); the stores are real DuckDB files over real windows.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb
import pytest

from sae_workbench.explainers.job import ExplainConfig, ExplainJob
from sae_workbench.explainers.ray_backend import RayExplainBackend
from sae_workbench.llm.config import LLMConfig
from sae_workbench.ray_actors import RateLimiter
from sae_workbench.store import Store
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.fake_llm import FakeLLM, Reply

WIDE = 40
"""Features of the wide store (the kill/resume and rate-limit tests)."""
NEGATIVES = "RANDOM_NEGATIVE"
"""Random negatives: no sentence-embedding pass over the windows (minutes on a loaded 2-core box)."""
T = TypeVar("T")

VOLATILE = r'"seconds": ?[-+0-9.eE]+'
"""Wall times inside JSON columns (usage, provenance): they differ between any two runs."""


def scripted(delay_s: float = 0.0):
    """A deterministic one-shot explainer LLM: rules for the structured prompt, a sentence for the free text."""

    def answer(body: dict) -> Reply:
        user = body["messages"][-1]["content"]
        if "JSON array of at most" in user:
            return Reply('[{"activates_on": "\\"the\\"", "strength": 5}]', delay_s=delay_s)
        return Reply("Fires on common words.", delay_s=delay_s)

    return answer


def wide_plant(wid: int, pos: int, token: str, source: str) -> list[tuple[int, float]]:
    """Each token fires one of WIDE features (by a stable hash of its text), at 1.0-3.0 by position."""
    key = token.strip().lower()
    if not key:
        return []
    return [(zlib.crc32(key.encode()) % WIDE, 1.0 + (pos * 7 + wid) % 3)]


def rows_except(a: Store, b: Store, table: str, drop: set[str]) -> tuple[int, int, int]:
    """(rows of a, rows in a not in b, rows in b not in a) with `EXCEPT ALL`, over every column but `drop`, with
    the wall times inside JSON columns blanked."""
    cols = [r for r in a.query(f"SELECT column_name, column_type FROM (DESCRIBE {table})").to_pylist()]
    names = []
    for c in cols:
        if c["column_name"] in drop:
            continue
        name = f'"{c["column_name"]}"'
        if c["column_type"] == "JSON":
            name = f"regexp_replace(CAST({name} AS VARCHAR), '{VOLATILE}', '', 'g') AS {name}"
        names.append(name)
    sql = f"SELECT {', '.join(names)} FROM {table}"
    con = duckdb.connect()
    con.register("ta", a.query(sql))
    con.register("tb", b.query(sql))
    n = con.execute("SELECT count(*) FROM ta").fetchone()
    ab = con.execute("SELECT count(*) FROM (SELECT * FROM ta EXCEPT ALL SELECT * FROM tb)").fetchone()
    ba = con.execute("SELECT count(*) FROM (SELECT * FROM tb EXCEPT ALL SELECT * FROM ta)").fetchone()
    assert n is not None and ab is not None and ba is not None
    if ab[0] or ba[0]:  # shown by pytest when the caller's assertion fails
        for side, sql_diff in (
            ("only a", "ta EXCEPT ALL SELECT * FROM tb"),
            ("only b", "tb EXCEPT ALL SELECT * FROM ta"),
        ):
            print(side, con.execute(f"SELECT * FROM (SELECT * FROM {sql_diff}) LIMIT 3").fetchall())
    return int(n[0]), int(ab[0]), int(ba[0])


@pytest.fixture(scope="module")
def planted_pair(tmp_path_factory, tiny_model) -> tuple[Path, Path]:
    """Two identical indexed stores (the planted features 0-4; feature 2 dead)."""
    folder = tmp_path_factory.mktemp("ray_explain")
    build_planted_store(folder, tiny_model.tokenizer)
    shutil.copy(folder / "store.duckdb", folder / "copy.duckdb")
    shutil.copy(folder / "store.duckdb", folder / "pristine.duckdb")
    return folder / "store.duckdb", folder / "copy.duckdb"


@pytest.mark.slow
def test_ray_backend_gives_the_local_rows(planted_pair, ray_cluster):
    """Lexical (offline) and one-shot (scripted LLM) explanations of the same features are identical row for row."""
    local, remote = (Store.open(p) for p in planted_pair)
    with FakeLLM(responder=scripted()) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=2)
        for name, cfg in (("lexical", None), ("oneshot", llm)):
            config = ExplainConfig(name, negatives=NEGATIVES)
            a = ExplainJob(local, PLANTED_SAE, config, cfg, progress=False).run(range(5))
            calls_local = server.calls
            backend = RayExplainBackend(2, batch_size=2)
            b = ExplainJob(remote, PLANTED_SAE, config, cfg, progress=False, remote=backend).run(range(5))
            assert (a.explained, a.dead) == (b.explained, b.dead) == (4, 1)
            assert backend.batches_sent >= 2  # the features really went out in batches
            if cfg is not None:
                assert b.usage.calls == a.usage.calls == server.calls - calls_local > 0
    n, only_local, only_ray = rows_except(local, remote, "explanations", {"id", "created_at", "seconds"})
    assert n == 10 and only_local == 0 and only_ray == 0
    n, only_local, only_ray = rows_except(local, remote, "llm_cache", {"created_at"})
    assert n > 0 and only_local == 0 and only_ray == 0  # the workers' answers were cached by the driver


@pytest.mark.slow
def test_workers_serve_cached_answers_from_the_snapshot(planted_pair, tmp_path, ray_cluster):
    """A fresh store holding another store's LLM answers: the workers answer from the driver's snapshot of
    llm_cache and the endpoint sees no call. The answers come from a local run in this test (it skipped unless
    test_ray_backend_gives_the_local_rows had filled the cache first)."""
    pristine = planted_pair[0].with_name("pristine.duckdb")
    source_path, path = tmp_path / "source.duckdb", tmp_path / "fresh.duckdb"
    shutil.copy(pristine, source_path)
    shutil.copy(pristine, path)
    source, fresh = Store.open(source_path), Store.open(path)
    with FakeLLM(responder=scripted()) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=2)
        ExplainJob(
            source, PLANTED_SAE, ExplainConfig("oneshot", negatives=NEGATIVES), llm, progress=False
        ).run(range(5))
        assert server.calls > 0
    cached = source.query(
        "SELECT key, model, CAST(response AS VARCHAR) AS r, tokens FROM llm_cache"
    ).to_pylist()
    assert cached
    fresh.llm_cache_put_many([(c["key"], c["model"], json.loads(c["r"]), c["tokens"]) for c in cached])
    with FakeLLM(responder=scripted()) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=2)
        config = ExplainConfig("oneshot", negatives=NEGATIVES)
        summary = ExplainJob(
            fresh, PLANTED_SAE, config, llm, progress=False, remote=RayExplainBackend(2)
        ).run(range(5))
        assert summary.explained == 4 and server.calls == 0 and summary.usage.cache_hits > 0


def cli(*args: str) -> subprocess.Popen:
    """`sae-workbench explain *args` in a child process (the driver the test kills)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sae_workbench", "explain", *args],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def wide_store(tmp_path_factory, tiny_model) -> Path:
    """An indexed store with WIDE live features."""
    folder = tmp_path_factory.mktemp("ray_wide")
    build_planted_store(folder, tiny_model.tokenizer, plant=wide_plant, d_sae=WIDE)
    return folder / "store.duckdb"


@pytest.mark.slow
def test_sigkilled_driver_resumes_with_llm_calls_only_for_the_rest(wide_store, tmp_path, ray_cluster):
    """A `--backend ray` driver (a subprocess on the session's cluster, 2 workers) is SIGKILLed after some features
    are committed; the rerun calls the LLM only for features not stored, and every config key is stored once."""
    path = tmp_path / "store.duckdb"
    shutil.copy(wide_store, path)
    address = ray_cluster.get_runtime_context().gcs_address
    with FakeLLM(responder=scripted(delay_s=0.1)) as server:
        args = ["--store", str(path), "--sae", PLANTED_SAE, "--explainer", "oneshot", "--features", f"0-{WIDE - 1}",
                "--negatives", NEGATIVES, "--llm-model", "fake", "--llm-base-url", server.base_url,
                "--concurrency", "2", "--backend", "ray", "--ray-address", address, "--ray-workers", "2"]  # fmt: skip
        proc = cli(*args)
        reader = Store.open(path, read_only=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            if len(reader.explanations(PLANTED_SAE)) >= 6:
                break
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        before = {e.feature for e in reader.explanations(PLANTED_SAE)}
        assert 6 <= len(before) < WIDE, err[-2000:]
        calls_before = server.calls
        done = cli(*args)
        out, err = done.communicate(timeout=300)
        assert done.returncode == 0, err[-3000:]
        assert f"{len(before)} already stored" in out
        calls_rerun = server.calls - calls_before
    rows = Store.open(path, read_only=True).explanations(PLANTED_SAE)
    assert sorted(e.feature for e in rows) == list(range(WIDE))
    assert len({e.config_key for e in rows}) == WIDE
    rerun = [e for e in rows if e.feature not in before]
    # Every call of the rerun belongs to a feature it stored (calls answered before the kill but not committed
    # may come back from the cache instead); each feature asks the same number of questions.
    assert calls_rerun == sum(e.extra["usage"]["calls"] for e in rerun) > 0
    per_feature = {e.extra["usage"]["calls"] + e.extra["usage"]["cache_hits"] for e in rows}
    assert len(per_feature) == 1


def test_rate_limiter_spaces_calls_and_bounds_concurrency():
    """The limiter itself (in-process): 20 calls at 40/s take >= 19/40 s; without a rate they pass at once; at most
    `concurrency` hold a slot."""

    async def run(qps: float | None, n: int = 20) -> tuple[float, int]:
        limiter = RateLimiter(qps, concurrency=3)
        in_flight = peak = 0

        async def call() -> None:
            nonlocal in_flight, peak
            lease = await limiter.acquire()
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.01)
            in_flight -= 1
            limiter.release(lease)

        t0 = time.monotonic()
        await asyncio.gather(*(call() for _ in range(n)))
        return time.monotonic() - t0, peak

    limited, peak = asyncio.run(run(40.0))
    free, peak_free = asyncio.run(run(None))
    assert limited >= 19 / 40 and free < 19 / 40
    assert peak <= 3 and peak_free == 3  # unlimited rate: 20 callers, yet never more than 3 in a slot


def test_rate_limiter_reclaims_the_slots_of_a_dead_worker_incarnation():
    """A worker that dies holding the only slot (concurrency 1) would block every other caller forever; when Ray
    restarts it, `register` frees the dead incarnation's lease, a waiter of the dead incarnation gives its slot back
    at once, and a second release of a lease is a no-op."""

    async def run() -> dict[str, int]:
        limiter = RateLimiter(None, concurrency=1)
        limiter.register("actor-a", "first")
        await limiter.acquire("actor-a", "first")  # held by an incarnation about to die
        other = asyncio.ensure_future(limiter.acquire("actor-b", "only"))
        stale_waiter = asyncio.ensure_future(limiter.acquire("actor-a", "first"))
        await asyncio.sleep(0.05)
        assert not other.done() and limiter.stats()["in_flight"] == 1  # blocked behind the dead holder
        assert limiter.register("actor-a", "second") == 1  # the restart frees the dead incarnation's slot
        lease_b = await asyncio.wait_for(other, 1.0)
        limiter.release(lease_b)
        limiter.release(lease_b)  # twice: ignored, the semaphore is not over-released
        await asyncio.wait_for(stale_waiter, 1.0)  # granted to a dead incarnation: released at once
        lease_new = await asyncio.wait_for(limiter.acquire("actor-a", "second"), 1.0)
        blocked = asyncio.ensure_future(limiter.acquire("actor-b", "only"))
        await asyncio.sleep(0.05)
        assert not blocked.done()  # still one slot: the double release did not add one
        limiter.release(lease_new)
        limiter.release(await asyncio.wait_for(blocked, 1.0))
        return limiter.stats()

    stats = asyncio.run(run())
    assert stats["in_flight"] == 0 and stats["reclaimed"] == 2 and stats["peak_in_flight"] == 1
    assert stats["granted"] == 5


@pytest.mark.slow
def test_two_workers_share_one_rate_limit(wide_store, tmp_path, ray_cluster):
    """Q calls/s over 2 workers: the endpoint never sees more than Q (+ the bucket's one token, + 1 for arrival
    jitter) calls in any 1-second window, and never more calls in flight than the global concurrency."""
    path = tmp_path / "store.duckdb"
    shutil.copy(wide_store, path)
    qps = 12.0
    with FakeLLM(responder=scripted(delay_s=0.05)) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=2)
        backend = RayExplainBackend(2, qps=qps, batch_size=4)
        job = ExplainJob(Store.open(path), PLANTED_SAE, ExplainConfig("oneshot", negatives=NEGATIVES), llm,
                         progress=False, remote=backend)  # fmt: skip
        summary = job.run(range(20))
        times = sorted(r.started for r in server.requests)
        peak = server.peak_in_flight
    assert summary.explained == 20 and len(times) == summary.usage.calls >= 40
    most = max(sum(1 for u in times if t <= u < t + 1.0) for t in times)
    assert most <= qps + 2, most
    assert (times[-1] - times[0]) >= (len(times) - 1 - 1) / qps * 0.9
    assert peak <= 2  # each worker's own client allows 2: together they would reach 4 without the limiter


class _StatsAtStop(RayExplainBackend):
    """A Ray backend that keeps its limiter's counters from just before the job stops it."""

    final: dict[str, int] | None = None

    async def stop(self) -> None:
        """Read the limiter's counters, then stop as usual."""
        self.final = self.limiter_stats()
        await super().stop()


def run_with_watchdog(fn: Callable[[], T], seconds: float) -> T:
    """fn() in a daemon thread; fail (instead of hanging the session) if it has not returned after `seconds`."""
    values: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            values.append(fn())
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: a slot of the rate limit was never freed"
    if errors:
        raise errors[0]
    return values[0]


@pytest.mark.slow
def test_worker_dying_inside_the_rate_limit_gate_loses_nothing(
    wide_store, tmp_path, ray_cluster, monkeypatch
):
    """With one global LLM slot (concurrency 1), a worker process exits while it holds the slot: Ray restarts it
    and retries its batch, the restarted worker reclaims the dead one's slot, and the job finishes with the same
    rows as the local backend (without the reclaim, every worker would wait for that slot forever)."""
    local_path, ray_path = tmp_path / "local.duckdb", tmp_path / "ray.duckdb"
    shutil.copy(wide_store, local_path)
    shutil.copy(wide_store, ray_path)
    marker = tmp_path / "gate.fired"
    features = range(12)
    with FakeLLM(responder=scripted(delay_s=0.02)) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=1)
        config = ExplainConfig("oneshot", negatives=NEGATIVES)
        local = ExplainJob(Store.open(local_path), PLANTED_SAE, config, llm, progress=False).run(features)
        monkeypatch.setenv("SAE_WORKBENCH_FAULT", f"llm.gate:{marker}")  # workers get it via worker_options()
        backend = _StatsAtStop(2, batch_size=3)
        job = ExplainJob(Store.open(ray_path), PLANTED_SAE, config, llm, progress=False, remote=backend)
        remote = run_with_watchdog(lambda: job.run(features), 240)
    assert marker.exists()  # the fault fired: a worker died holding the slot
    assert remote.explained == local.explained == len(features)
    assert backend.final is not None and backend.final["reclaimed"] >= 1 and backend.final["in_flight"] == 0
    assert backend.final["peak_in_flight"] == 1  # the one slot was never exceeded, before or after the death
    n, only_local, only_ray = rows_except(Store.open(local_path), Store.open(ray_path), "explanations",
                                          {"id", "created_at", "seconds"})  # fmt: skip
    assert n == len(features) and only_local == 0 and only_ray == 0
