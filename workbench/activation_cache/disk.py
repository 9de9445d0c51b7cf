"""Refuse a caching run that cannot fit on its disk, before the first forward pass."""

from __future__ import annotations

import shutil
from pathlib import Path

from sae_workbench.activation_cache.errors import CacheWriteError


def check_disk_space(folder: Path, n_tokens: int, bytes_per_token: int) -> None:
    """Raise CacheWriteError if `n_tokens` more tokens of `bytes_per_token` each do not fit in `folder`'s disk."""
    need = n_tokens * bytes_per_token
    free = shutil.disk_usage(folder).free
    if need > free:
        raise CacheWriteError(
            f"caching {n_tokens:,} more tokens needs ~{need / 2**30:.2f} GiB but {folder} has "
            f"{free / 2**30:.2f} GiB free; pass fewer --tokens, --dtype float16, or --out on a larger disk."
        )
