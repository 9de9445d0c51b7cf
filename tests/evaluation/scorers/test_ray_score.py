"""`score --backend ray` (evaluation/scorers/ray_backend.py): the same score rows as the local loop, offline (lexical
simulation) and with the scripted LLM (detection), and a rerun scores nothing twice.

Runs on the session's local Ray cluster (tests/conftest.py `ray_cluster`) and the scripted OpenAI-compatible server
on 127.0.0.1 (tests/fake_llm.py); the stores are real DuckDB files over real windows.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from sae_workbench.evaluation.scorers.base import ScoreConfig, ScoreConfigError
from sae_workbench.evaluation.scorers.job import run_scoring, score_backends
from sae_workbench.evaluation.scorers.ray_backend import run_scoring_ray
from sae_workbench.explainers.job import ExplainConfig, ExplainJob
from sae_workbench.faults import FAULT_EXIT_STATUS
from sae_workbench.llm.cache import StoreCache
from sae_workbench.llm.config import LLMConfig
from sae_workbench.store import Store
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.explainers.test_ray_explain import NEGATIVES, rows_except, run_with_watchdog, scripted
from tests.fake_llm import FakeLLM, Reply

_TEXT = re.compile(r"Text (\d+):\n(.*?)(?=\n\nText \d+:|\n\nFor each of)", re.S)


def classifier(body: dict) -> Reply:
    """A deterministic detection judge: 1 for a text that contains 'the', else 0."""
    user = body["messages"][-1]["content"]
    texts = [t for _, t in _TEXT.findall(user)]
    n = int(re.search(r"JSON array of exactly (\d+) integers", user).group(1))  # type: ignore[union-attr]
    assert len(texts) == n, user
    return Reply("[" + ", ".join("1" if " the " in f" {t} " else "0" for t in texts) + "]")


@pytest.fixture(scope="module")
def explained_pair(tmp_path_factory, tiny_model) -> tuple[Path, Path]:
    """Two identical stores holding lexical and one-shot explanations of the planted features 0-4."""
    folder = tmp_path_factory.mktemp("ray_score")
    store = build_planted_store(folder, tiny_model.tokenizer)
    with FakeLLM(responder=scripted()) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url)
        for name, cfg in (("lexical", None), ("oneshot", llm)):
            ExplainJob(store, PLANTED_SAE, ExplainConfig(name, negatives=NEGATIVES), cfg, progress=False).run(
                range(5)
            )
    shutil.copy(folder / "store.duckdb", folder / "copy.duckdb")
    shutil.copy(folder / "store.duckdb", folder / "cli.duckdb")
    return folder / "store.duckdb", folder / "copy.duckdb"


@pytest.mark.slow
def test_ray_scores_equal_local_scores(explained_pair, ray_cluster):
    """Lexical simulation (offline) and LLM detection give identical score rows on both backends; the workers'
    LLM answers reach the driver's llm_cache; a rerun finds everything scored."""
    local, remote = (Store.open(p) for p in explained_pair)
    offline = ScoreConfig("simulation", NEGATIVES)
    a = run_scoring(local, PLANTED_SAE, offline, progress=False)
    b = run_scoring_ray(remote, PLANTED_SAE, offline, workers=2, batch_size=2, progress=False)
    assert (a.scored, a.failed, a.dead) == (b.scored, b.failed, b.dead) and a.scored >= 6 and a.dead == 2
    with FakeLLM(responder=classifier) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url)
        detection = ScoreConfig("detection", NEGATIVES)
        a = run_scoring(
            local, PLANTED_SAE, detection, score_backends(llm, cache=StoreCache(local)), progress=False
        )
        calls_local = server.calls
        b = run_scoring_ray(remote, PLANTED_SAE, detection, llm=llm, workers=2, batch_size=2, progress=False)
        assert (a.scored, a.failed, a.dead) == (b.scored, b.failed, b.dead) and a.scored >= 6
        assert server.calls == 2 * calls_local > 0
        again = run_scoring_ray(remote, PLANTED_SAE, detection, llm=llm, workers=2, progress=False)
        assert (again.scored, again.skipped) == (0, a.scored + a.failed + a.dead)
        assert server.calls == 2 * calls_local
    n, only_local, only_ray = rows_except(local, remote, "scores", {"id", "created_at"})
    assert n == 2 * 10 and only_local == 0 and only_ray == 0
    n, only_local, only_ray = rows_except(local, remote, "llm_cache", {"created_at"})
    assert n > 0 and only_local == 0 and only_ray == 0
    keys = remote.query("SELECT count(*) AS n, count(DISTINCT score_key) AS k FROM scores").to_pylist()[0]
    assert keys["n"] == keys["k"] == 20


def test_cosy_stays_local(explained_pair):
    """CoSy needs the model and the SAE in the driver: the Ray backend refuses it before starting anything."""
    with pytest.raises(ScoreConfigError, match="backend local"):
        run_scoring_ray(Store.open(explained_pair[1]), PLANTED_SAE, ScoreConfig("cosy"), progress=False)


@pytest.mark.slow
def test_cli_score_backend_ray_joins_the_cluster_and_resumes(explained_pair, ray_cluster):
    """`workbench score --backend ray --ray-address A` scores every explanation once; the rerun skips them all."""
    path = explained_pair[0].with_name("cli.duckdb")
    address = ray_cluster.get_runtime_context().gcs_address
    args = [sys.executable, "-m", "sae_workbench", "score", "--store", str(path), "--sae", PLANTED_SAE,
            "--scorer", "simulation", "--negatives", "random_negative", "--no-progress", "--backend", "ray",
            "--ray-address", address, "--ray-workers", "2"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "scored 8, skipped 0" in first.stdout and "2 dead" in first.stdout, first.stdout
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "scored 0, skipped 10" in again.stdout, again.stdout
    keys = (
        Store.open(path, read_only=True)
        .query("SELECT count(DISTINCT score_key) AS k FROM scores")
        .to_pylist()
    )
    assert keys[0]["k"] == 10


@pytest.mark.slow
def test_worker_dying_in_the_gate_and_a_dead_driver_leave_every_score_once(explained_pair, tmp_path, ray_cluster,
                                                                         monkeypatch):  # fmt: skip
    """LLM detection on Ray with one global slot: (1) a worker exits while it holds the slot; Ray restarts it, the
    slot is reclaimed and the run gives the local rows. (2) A CLI driver exits right after its first commit; the
    rerun scores only the rest, and every score key is stored once."""
    pristine = explained_pair[0].with_name("cli.duckdb")
    local_path, ray_path, cli_path = (tmp_path / f"{n}.duckdb" for n in ("local", "ray", "cli"))
    for path in (local_path, ray_path, cli_path):
        shutil.copy(pristine, path)
        with duckdb.connect(str(path)) as con:  # the other tests' scores out: only this test's detection rows
            con.execute("DELETE FROM scores")
    detection = ScoreConfig("detection", NEGATIVES)
    with FakeLLM(responder=classifier) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, concurrency=1)
        local = Store.open(local_path)
        a = run_scoring(
            local, PLANTED_SAE, detection, score_backends(llm, cache=StoreCache(local)), progress=False
        )
        monkeypatch.setenv("SAE_WORKBENCH_FAULT", f"llm.gate:{tmp_path / 'gate.fired'}")
        b = run_with_watchdog(
            lambda: run_scoring_ray(Store.open(ray_path), PLANTED_SAE, detection, llm=llm, workers=2, batch_size=2,
                                    progress=False), 240)  # fmt: skip
        assert (tmp_path / "gate.fired").exists()
        assert (a.scored, a.failed, a.dead) == (b.scored, b.failed, b.dead) and a.scored >= 6
        n, only_local, only_ray = rows_except(local, Store.open(ray_path), "scores", {"id", "created_at"})
        assert n == 10 and only_local == 0 and only_ray == 0

        monkeypatch.delenv("SAE_WORKBENCH_FAULT")
        address = ray_cluster.get_runtime_context().gcs_address
        args = [sys.executable, "-m", "sae_workbench", "score", "--store", str(cli_path), "--sae", PLANTED_SAE,
                "--scorer", "detection", "--negatives", NEGATIVES.lower(), "--no-progress", "--backend", "ray",
                "--ray-address", address, "--ray-workers", "2", "--llm-model", "fake", "--llm-base-url",
                server.base_url]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
        killed = subprocess.run(args, env={**env, "SAE_WORKBENCH_FAULT": f"score.commit:{tmp_path / 'commit.fired'}"},
                                capture_output=True, text=True, timeout=300)  # fmt: skip
        assert killed.returncode == FAULT_EXIT_STATUS, killed.stderr[-3000:]
        first = (
            Store.open(cli_path, read_only=True).query("SELECT count(*) AS n FROM scores").to_pylist()[0]["n"]
        )
        assert 0 < first < 10
        rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert f"skipped {first}" in rerun.stdout, rerun.stdout
    n, only_local, only_cli = rows_except(
        local, Store.open(cli_path, read_only=True), "scores", {"id", "created_at"}
    )
    assert n == 10 and only_local == 0 and only_cli == 0
    keys = (
        Store.open(cli_path, read_only=True)
        .query("SELECT count(*) AS n, count(DISTINCT score_key) AS k FROM scores")
        .to_pylist()[0]
    )
    assert keys["n"] == keys["k"] == 10
