"""Errors of the activation cache (corruption and identity mismatches use `sae_workbench.errors`' shared types)."""

from __future__ import annotations

from sae_workbench.errors import WorkbenchError


class CacheWriteError(WorkbenchError):
    """Writing a shard failed (disk full, permissions); earlier shards are intact."""


class CacheNotFoundError(WorkbenchError):
    """The folder holds no activation cache (no manifest.json)."""


class CacheBusyError(WorkbenchError):
    """Another process is writing this cache folder."""


class NonFiniteActivationError(WorkbenchError):
    """A shard contains NaN or infinite activations."""
