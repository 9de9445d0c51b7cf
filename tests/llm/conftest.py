"""The real local LLM server (llama-cpp-python serving SmolLM2-135M-Instruct), started once per test session through
`sae_workbench.llm.server`, for the slow tests. Without llama-cpp-python the tests skip, except under CI (CI=true),
where `make venv` must have installed it: there they fail and say so."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sae_workbench.llm.errors import LLMModelFileError, LLMServerNotInstalledError
from sae_workbench.llm.server import LocalLLMServer, ServerSettings


def start_local_server(run_dir: Path) -> LocalLLMServer:
    """A started server for the default model, or a skip (a failure under CI) when it cannot be installed here."""
    try:
        server = LocalLLMServer(ServerSettings(), run_dir=run_dir)
    except (LLMServerNotInstalledError, LLMModelFileError) as err:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the real-LLM tests, but: {err}", pytrace=False)
        pytest.skip(f"no local LLM server here: {err}")
    return server.start()


@pytest.fixture(scope="session")
def real_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalLLMServer]:
    """One real server for the session (log in its run folder); stopped at the end."""
    server = start_local_server(tmp_path_factory.mktemp("llm-server"))
    try:
        yield server
    finally:
        server.stop()
