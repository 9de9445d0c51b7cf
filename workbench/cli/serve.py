"""`workbench app`: serve the Streamlit feature browser over a store (reads in short sessions; safe while jobs write).

workbench app --store runs/store.duckdb --port 8501
workbench app --store runs/store.duckdb --host 0.0.0.0 --read-only    # on the network

Served on anything but loopback (`--host 0.0.0.0`, a LAN address), the Playground loads only SAEs registered in the
store, from the files the store recorded: no visitor-typed path or registry id. The app's one write is the feature
page's hypothesis form (a short write session); `--read-only` turns it off.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

import sae_workbench.app
from sae_workbench import defaults
from sae_workbench.app.settings import READ_ONLY_ENV, STORE_ENV, is_loopback
from sae_workbench.cli import options

# The package folder of the app (its own folder when installed; the repository's app/ in an editable install).
MAIN_SCRIPT = Path(sae_workbench.app.__file__).parent / "serve" / "streamlit_app.py"


def streamlit_argv(store: Path, port: int, host: str, read_only: bool = False) -> list[str]:
    """The `python -m streamlit run` command line that serves the browser over `store`."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(MAIN_SCRIPT),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        # The app never edits its own sources at run time; watching them only costs inotify handles.
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--theme.base",
        "light",
        "--",
        "--store",
        str(store),
        *(["--read-only"] if read_only else []),
    ]


def app(
    store: options.Store,
    port: int = typer.Option(defaults.APP_PORT, help="Port to serve on."),
    host: str = typer.Option(
        defaults.APP_HOST,
        help="Address to bind (0.0.0.0 to serve on the network: the Playground then loads only registered SAEs).",
    ),
    read_only: bool = typer.Option(
        False, "--read-only", help="Never write to the store (turns off the feature page's hypothesis form)."
    ),
) -> None:
    """Browse a store's SAEs, features, explanations, scores and evals in a Streamlit app (one short query at a
    time: safe while jobs write to the store)."""
    store = store.expanduser().resolve()
    if not store.exists():
        typer.secho(
            f"note: no store at {store} yet; the app will show how to fill it (`workbench index ...`).",
            err=True,
            fg="yellow",
        )
    if not is_loopback(host):
        typer.secho(
            f"note: serving on {host}: the Playground loads only SAEs registered in the store"
            + ("" if read_only else "; pass --read-only to turn off the hypothesis form"),
            err=True,
            fg="yellow",
        )
    env = dict(os.environ, **{STORE_ENV: str(store)})
    if read_only:
        env[READ_ONLY_ENV] = "1"
    argv = streamlit_argv(store, port, host, read_only)
    # exec: the server becomes this process, so stopping `workbench app` stops the server with no orphan.
    os.execve(argv[0], argv, env)
