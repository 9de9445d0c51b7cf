"""The real local LLM server (llama-cpp-python serving SmolLM2-135M-Instruct) killed mid-job and restarted on the same
port (issue 32 items 4 and 7): the one-shot explain job and the detection score job each stop with the typed
endpoint-down error, keep every feature they finished, and the rerun of the same command does exactly the features not
stored — nothing lost, nothing asked twice, one row per feature. Slow: skipped without llama-cpp-python (a failure
under CI).

    .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/explainers/test_real_llm_restart.py
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring, score_backends
from sae_workbench.explainers.job import ExplainConfig, ExplainJob, ExplainJobError
from sae_workbench.llm.cache import StoreCache
from sae_workbench.llm.config import LLMConfig
from sae_workbench.llm.errors import LLMEndpointDownError
from sae_workbench.llm.server import LocalLLMServer
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, ScoreRecord, Store
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.llm.conftest import start_local_server

pytestmark = pytest.mark.slow

FEATURES = [0, 1, 2, 3, 4]  # every feature of the planted store: 2 is dead, the other four are live
LIVE = [0, 1, 3, 4]
DEAD = 2
POLL_S = 0.05
FIRST_ROW_WITHIN_S = 240.0


def quick_down(server: LocalLLMServer) -> LLMConfig:
    """The server's config, telling a dead endpoint from a slow one after 3 failed connects (about a second)."""
    return server.llm_config(
        max_tokens=512, max_retries=3, backoff_base_s=0.2, backoff_max_s=0.5, down_after=3
    )


@dataclass
class Killed:
    """What happened to a job whose server was killed once it had stored its first live feature."""

    error: BaseException | None
    """What the job raised (None: it returned)."""
    kill_s: float
    """Seconds from the job's start to the kill."""
    stop_s: float
    """Seconds from the kill to the job's end."""


def kill_after_first_row(server: LocalLLMServer, job: Callable[[], Any], stored: Callable[[], int]) -> Killed:
    """Run `job` on a thread, kill the server as soon as `stored()` (live rows committed) is positive while the job
    still runs, and wait for the job to end."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            job()
        except BaseException as err:  # handed to the test thread
            raised.append(err)

    thread = threading.Thread(target=target, daemon=True)
    t0 = time.monotonic()
    thread.start()
    while stored() == 0:
        assert thread.is_alive(), f"the job ended before any live feature was stored: {raised}"
        assert time.monotonic() < t0 + FIRST_ROW_WITHIN_S, "no live feature was stored in time"
        time.sleep(POLL_S)
    assert thread.is_alive(), "the job had finished before the kill"
    server.kill()
    t_kill = time.monotonic()
    thread.join(timeout=120)
    assert not thread.is_alive(), "the job did not stop after the server was killed"
    return Killed(raised[0] if raised else None, t_kill - t0, time.monotonic() - t_kill)


def oneshot_rows(store: Store) -> list[ExplanationRecord]:
    """The one-shot rows of the planted SAE, in feature order."""
    return sorted(store.explanations(PLANTED_SAE, explainer="oneshot"), key=lambda e: e.feature)


def test_explain_job_killed_server_restarted_resumes_without_losses_or_duplicates(
    tmp_path: Path, tiny_model
) -> None:
    store = build_planted_store(tmp_path, tiny_model.tokenizer)
    with start_local_server(tmp_path / "llm-server") as server:
        explain_resumes(store, server)


def explain_resumes(store: Store, server: LocalLLMServer) -> None:
    """The explain job's half of the test (the server runs)."""
    cfg = quick_down(server)
    method = ExplainConfig("oneshot", negatives="RANDOM_NEGATIVE")
    killed = kill_after_first_row(
        server,
        lambda: ExplainJob(store, PLANTED_SAE, method, cfg, progress=False).run(FEATURES),
        lambda: sum(e.status is Status.OK for e in oneshot_rows(store)),
    )
    # the job stopped with the typed endpoint-down error (not a crash, not a per-feature failure)
    err = killed.error
    assert isinstance(err, ExplainJobError), f"expected a stop on the dead endpoint, got {err!r}"
    assert isinstance(err.__cause__, LLMEndpointDownError), repr(err.__cause__)
    assert "rerun the same command to resume" in str(err)
    before = oneshot_rows(store)
    ok_before = [e.feature for e in before if e.status is Status.OK]
    assert 1 <= len(ok_before) < len(LIVE), f"the kill was not mid-job: {before}"
    # what was stored is complete; what was in flight was not written at all (no failed rows)
    assert all(e.status in (Status.OK, Status.DEAD) for e in before), [e.status for e in before]
    assert all(
        e.text.strip() and e.llm_params["model"] == server.model for e in before if e.status is Status.OK
    )
    missing = sorted(set(LIVE) - set(ok_before))

    # the same command against the restarted server (same port) explains exactly the missing features
    server.start()
    assert server.base_url == cfg.base_url
    rerun = ExplainJob(store, PLANTED_SAE, method, cfg, progress=False)
    summary = rerun.run(FEATURES)
    assert summary.skipped == len(before)
    assert (summary.explained, summary.failed, summary.dead) == (len(missing), 0, 0)
    assert sorted(summary.ids) == missing
    asked = {tag for tag, usage in rerun.ledger.by_tag().items() if usage.calls or usage.cache_hits}
    assert asked == {f"feature:{f}" for f in missing}  # stored features were not asked again

    after = oneshot_rows(store)
    per_key = Counter((e.feature, e.explainer, e.config_key) for e in after)
    assert all(n == 1 for n in per_key.values()), per_key  # no duplicates
    assert [e.feature for e in after] == FEATURES  # nothing lost
    assert all(e.status is (Status.DEAD if e.feature == DEAD else Status.OK) for e in after)
    stored_before = {e.feature: e for e in before}
    for e in after:
        if e.feature in stored_before:
            assert e == stored_before[e.feature]  # the rows stored before the kill are untouched
        else:
            assert e.text.strip() and e.llm_params["model"] == server.model
    print(
        f"\nexplain: killed {killed.kill_s:.1f} s in after {len(ok_before)} of {len(LIVE)} live features, stopped "
        f"{killed.stop_s:.1f} s later; the rerun explained {missing} in {summary.seconds:.1f} s"
    )


def test_score_job_killed_server_restarted_resumes_without_losses_or_duplicates(
    tmp_path: Path, tiny_model
) -> None:
    store = build_planted_store(tmp_path, tiny_model.tokenizer)
    lexical = ExplainConfig("lexical", negatives="RANDOM_NEGATIVE")
    ExplainJob(store, PLANTED_SAE, lexical, progress=False).run(FEATURES)  # offline explanations to score
    with start_local_server(tmp_path / "llm-server") as server:
        score_resumes(store, server)


def score_resumes(store: Store, server: LocalLLMServer) -> None:
    """The detection score job's half of the test (the server runs)."""
    feature_of = {int(e.id or 0): e.feature for e in store.explanations(PLANTED_SAE, explainer="lexical")}
    (dead_id,) = (i for i, f in feature_of.items() if f == DEAD)
    live_ids = set(feature_of) - {dead_id}
    cfg = quick_down(server)
    config = ScoreConfig("detection", "RANDOM_NEGATIVE")

    def scores() -> list[ScoreRecord]:
        return store.scores(sae_id=PLANTED_SAE, scorer="detection")

    def score() -> Any:
        backends = score_backends(cfg, cache=StoreCache(store))
        return run_scoring(
            store, PLANTED_SAE, config, backends, explainer="lexical", progress=False
        ), backends

    killed = kill_after_first_row(
        server, score, lambda: sum(s.explanation_id in live_ids and s.status is Status.OK for s in scores())
    )
    assert isinstance(killed.error, LLMEndpointDownError), (
        f"expected a stop on the dead endpoint: {killed.error!r}"
    )
    before = scores()
    ok_before = {s.explanation_id for s in before if s.status is Status.OK}
    assert 1 <= len(ok_before) < len(live_ids), f"the kill was not mid-job: {before}"
    assert all(s.status in (Status.OK, Status.DEAD) for s in before), [s.status for s in before]
    missing = live_ids - ok_before

    server.start()
    result, backends = score()
    dead_left = int(all(s.explanation_id != dead_id for s in before))  # recorded in store order
    assert (result.skipped, result.scored, result.failed, result.dead) == (
        len(before),
        len(missing),
        0,
        dead_left,
    )
    after = scores()
    per_key = Counter((s.explanation_id, s.scorer, s.score_key) for s in after)
    assert all(n == 1 for n in per_key.values()), per_key  # no duplicates
    assert sorted(s.explanation_id for s in after) == sorted(feature_of)  # nothing lost
    assert all(s.status is (Status.DEAD if s.explanation_id == dead_id else Status.OK) for s in after)
    stored_before = {s.explanation_id: s for s in before}
    new = [s for s in after if s.explanation_id not in stored_before]
    assert {s.explanation_id for s in new} == missing | ({dead_id} if dead_left else set())
    assert all(s == stored_before[s.explanation_id] for s in after if s.explanation_id in stored_before)
    # the rerun's LLM calls are exactly those its new scores record (none went to a score stored before the kill)
    usage = backends.llm_usage()
    assert usage["calls"] > 0
    assert sum(s.provenance["llm_usage"]["calls"] for s in new) == usage["calls"]
    assert sum(s.provenance["llm_usage"]["cache_hits"] for s in new) == usage["cache_hits"]
    print(
        f"\ndetection: killed {killed.kill_s:.1f} s in after {len(ok_before)} of {len(live_ids)} live explanations, "
        f"stopped {killed.stop_s:.1f} s later; the rerun scored {len(missing)} in {result.seconds:.1f} s "
        f"({usage['calls']} calls, {usage['cache_hits']} cache hits)"
    )
