"""Where the app finds its store: `--store PATH` after `--` on the streamlit command line, else $WORKBENCH_STORE."""

from __future__ import annotations

import os
import sys
from pathlib import Path

STORE_ENV = "WORKBENCH_STORE"
# How long cached query results live: short, so a running job's new rows appear without a restart.
CACHE_TTL_S = 10.0


def store_path_from_argv(argv: list[str]) -> Path | None:
    """The value of `--store` in `argv`, if present."""
    for i, arg in enumerate(argv):
        if arg == "--store" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--store="):
            return Path(arg.split("=", 1)[1])
    return None


def configured_store_path() -> Path | None:
    """The store this app serves: `--store` from the script arguments, else $WORKBENCH_STORE, else None."""
    from_argv = store_path_from_argv(sys.argv[1:])
    if from_argv is not None:
        return from_argv
    env = os.environ.get(STORE_ENV)
    return Path(env) if env else None
