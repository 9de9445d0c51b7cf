"""One writing process per cache folder: an exclusive `flock` held for the life of the writer."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from sae_workbench.activation_cache.errors import CacheBusyError


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock on a cache folder for the life of one writing process (released by the OS on kill)."""
    fh = open(folder / ".lock", "w")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise CacheBusyError(
                f"another process is writing the cache in {folder}; wait for it or pass a different --out."
            ) from err
        yield
    finally:
        fh.close()
