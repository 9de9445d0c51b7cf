"""Where the app finds its store (`--store PATH` after `--` on the streamlit command line, else $WORKBENCH_STORE),
and whether it is served beyond this machine (the address streamlit binds, `--server.address`)."""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

STORE_ENV = "WORKBENCH_STORE"
# Set (to 1) by `workbench app --read-only`; `--read-only` after `--` on the streamlit command line does the same.
READ_ONLY_ENV = "WORKBENCH_APP_READ_ONLY"
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


def is_loopback(host: str | None) -> bool:
    """Whether binding `host` serves this machine only (localhost, 127.0.0.0/8, ::1); None or '' binds every
    interface, as streamlit does without `--server.address`."""
    if not host:
        return False
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to a public interface


def served_host() -> str | None:
    """The address this server binds (streamlit's `server.address`; None: every interface)."""
    import streamlit as st

    value = st.get_option("server.address")
    return str(value) if value else None


def served_on_network() -> bool:
    """True unless the app binds a loopback address only: then only SAEs registered in the store may be loaded."""
    return not is_loopback(served_host())


def app_read_only(store: Path | None = None) -> bool:
    """Whether the app must not write to its store: `--read-only` / $WORKBENCH_APP_READ_ONLY, or a store file this
    process cannot write. Only the feature page's hypothesis form ever writes."""
    if "--read-only" in sys.argv[1:] or os.environ.get(READ_ONLY_ENV, "").strip().lower() in (
        "1",
        "true",
        "yes",
    ):
        return True
    return store is not None and store.exists() and not os.access(store, os.W_OK)
