"""`workbench explain` killed mid-job (SIGKILL) resumes with no duplicate and no lost explanation; CLI bad input."""

import os
import signal
import subprocess
import sys
import time

import pytest

from sae_workbench.store import Store
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.fake_llm import FakeLLM, Reply


def slow(body: dict) -> Reply:
    user = body["messages"][-1]["content"]
    if "JSON array of at most" in user:
        return Reply('[{"activates_on": "\\"lord\\"", "strength": 5}]', delay_s=0.15)
    return Reply("Fires on LORD.", delay_s=0.15)


def cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sae_workbench", "explain", *args],
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture()
def store_path(tmp_path, tiny_model):
    build_planted_store(tmp_path, tiny_model.tokenizer)
    return tmp_path / "store.duckdb"


@pytest.mark.slow
def test_killed_job_resumes_without_duplicates_or_losses(store_path):
    with FakeLLM(responder=slow) as server:
        args = ["--store", str(store_path), "--sae", PLANTED_SAE, "--explainer", "oneshot", "--features", "all",
                "--llm-model", "fake", "--llm-base-url", server.base_url, "--concurrency", "1"]  # fmt: skip
        proc = cli(*args)
        reader = Store.open(store_path, read_only=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            time.sleep(0.3)
            if len(reader.explanations(PLANTED_SAE)) >= 2:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        n_before = len(reader.explanations(PLANTED_SAE))
        assert 2 <= n_before < 5, "the job should have been killed part-way"
        done = cli(*args)
        out, err = done.communicate(timeout=120)
        assert done.returncode == 0, err
        assert f"{n_before} already stored" in out
    rows = Store.open(store_path, read_only=True).explanations(PLANTED_SAE)
    assert sorted(e.feature for e in rows) == [0, 1, 2, 3, 4]
    assert len({e.config_key for e in rows}) == 5


@pytest.mark.slow
def test_cli_no_endpoint_falls_back_to_lexical_with_notice(store_path):
    env = {"WORKBENCH_LLM_MODEL": "", "OPENAI_BASE_URL": "", "WORKBENCH_LLM_BASE_URL": ""}
    out, err = cli(
        "--store", str(store_path), "--sae", PLANTED_SAE, "--features", "0-1", env=env
    ).communicate(timeout=120)
    assert "No LLM endpoint configured" in err and "lexical" in err
    assert "explain lexical: 2 explained" in out


def test_cli_explicit_llm_explainer_without_endpoint_errors(store_path):
    env = {"WORKBENCH_LLM_MODEL": "", "OPENAI_BASE_URL": "", "WORKBENCH_LLM_BASE_URL": ""}
    proc = cli("--store", str(store_path), "--sae", PLANTED_SAE, "--explainer", "oneshot", env=env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "LLMNotConfiguredError" in err and len(err.strip().splitlines()) == 1


def very_slow(body: dict) -> Reply:
    user = body["messages"][-1]["content"]
    if "JSON array of at most" in user:
        return Reply('[{"activates_on": "\\"lord\\"", "strength": 5}]', delay_s=2.5)
    return Reply("Fires on LORD.", delay_s=2.5)


@pytest.mark.slow
def test_a_reader_gets_in_while_the_job_awaits_a_slow_llm(store_path):
    """The job holds the store between calls; a reading process (the app) announces that it waits and is let in
    within a lease period even while every feature in flight awaits an LLM answer for seconds."""
    with FakeLLM(responder=very_slow) as server:
        args = ["--store", str(store_path), "--sae", PLANTED_SAE, "--explainer", "oneshot", "--features", "0,1",
                "--llm-model", "fake", "--llm-base-url", server.base_url, "--concurrency", "2"]  # fmt: skip
        proc = cli(*args)
        reader = Store.open(store_path, read_only=True, busy_timeout_s=30)
        waits = []
        try:
            while server.calls == 0 and proc.poll() is None:  # the job holds the lease from here on
                time.sleep(0.05)
            while server.calls < 4 and proc.poll() is None:
                t = time.monotonic()
                reader.explanations(PLANTED_SAE)
                waits.append(time.monotonic() - t)
                time.sleep(0.2)
        finally:
            out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "2 explained" in out
        assert len(waits) >= 3, waits
        assert max(waits) < 2.0, waits  # a feature takes ≥ 2.5 s: the reader never waited for one to finish
    assert len(Store.open(store_path, read_only=True).explanations(PLANTED_SAE)) == 2
