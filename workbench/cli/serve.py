"""`workbench app`: serve the Streamlit feature browser over a store (read-only; safe while jobs write to it).

workbench app --store runs/store.duckdb --port 8501
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

import sae_workbench.app
from sae_workbench import defaults
from sae_workbench.app.settings import STORE_ENV
from sae_workbench.cli import options

# The package folder of the app (its own folder when installed; the repository's app/ in an editable install).
MAIN_SCRIPT = Path(sae_workbench.app.__file__).parent / "serve" / "streamlit_app.py"


def streamlit_argv(store: Path, port: int, host: str) -> list[str]:
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
    ]


def app(
    store: options.Store,
    port: int = typer.Option(defaults.APP_PORT, help="Port to serve on."),
    host: str = typer.Option(defaults.APP_HOST, help="Address to bind (0.0.0.0 to serve on the network)."),
) -> None:
    """Browse a store's SAEs, features, explanations, scores and evals in a Streamlit app (read-only, one short
    query at a time: safe while jobs write to the store)."""
    store = store.expanduser().resolve()
    if not store.exists():
        typer.secho(
            f"note: no store at {store} yet; the app will show how to fill it (`workbench index ...`).",
            err=True,
            fg="yellow",
        )
    env = dict(os.environ, **{STORE_ENV: str(store)})
    argv = streamlit_argv(store, port, host)
    # exec: the server becomes this process, so stopping `workbench app` stops the server with no orphan.
    os.execve(argv[0], argv, env)
