"""Starting or joining a Ray cluster for `--backend ray` (specs/scale.md 4.4), in one place.

A local cluster binds to 127.0.0.1 only, has no dashboard, a small object store and Ray's usage reporting off;
`RAY_ADDRESS` (or `--ray-address`) joins an existing cluster (KubeRay, Anyscale, Slurm) with the same command.
Ray is an optional extra (`pip install 'sae-workbench[scale]'`); importing this module does not import it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from sae_workbench.errors import WorkbenchError

Backend = Literal["local", "ray"]
"""Where a stage runs: this process (the default, unchanged) or Ray workers with the driver as sole writer."""
BACKENDS: tuple[Backend, ...] = ("local", "ray")

LOCAL_OBJECT_STORE_BYTES = 256 * 2**20
"""Object store of a local cluster: small, for a laptop or a 24 GiB CI box (specs/scale.md 4.4)."""


LOCAL_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
"""Environment a local cluster forces whatever is exported: Ray's single-machine mode (binds 127.0.0.1, not the
routable address) and no usage reporting."""


class RayUnavailableError(WorkbenchError):
    """`--backend ray` was asked for but Ray is not installed."""


@dataclass(frozen=True)
class RayConfig:
    """How to reach Ray: an address (None = RAY_ADDRESS, else a new local cluster) and a local cluster's size."""

    address: str | None = None
    num_cpus: int | None = None
    num_gpus: int | None = None
    object_store_bytes: int = LOCAL_OBJECT_STORE_BYTES


def check_backend(backend: str) -> Backend:
    """The backend named by `backend`, or a WorkbenchError listing the choices."""
    if backend not in BACKENDS:
        raise WorkbenchError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return backend  # type: ignore[return-value]


def import_ray(local: bool = False) -> Any:
    """The `ray` module (for a `local` cluster: loopback-only), or RayUnavailableError saying how to install it."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no call home, set before ray is imported
    if local:
        # Ray resolves 127.0.0.1 to the machine's routable address (services.resolve_ip_for_localhost) and binds
        # its servers there, unless it runs in its single-machine mode. The local cluster FORCES that mode, not
        # setdefault: an exported RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 (or a usage-stats opt-in) must not turn our
        # loopback-only, no-call-home cluster into one reachable from the network. The switch is read at import
        # by this process (ray_constants.ENABLE_RAY_CLUSTER, set below too in case ray was imported earlier) and by
        # the raylet, GCS and workers, which inherit this environment.
        os.environ.update(LOCAL_RAY_ENV)
    try:
        import ray
    except ImportError as err:  # pragma: no cover - the project's own venv installs the extra
        raise RayUnavailableError(
            "--backend ray needs Ray: pip install 'sae-workbench[scale]' (or pass --backend local)"
        ) from err
    if local:
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
    return ray


def init_ray(config: RayConfig | None = None) -> bool:
    """Connect to the configured cluster or start a loopback-only local one; True if this call started Ray."""
    config = config or RayConfig()
    address = config.address or os.environ.get("RAY_ADDRESS") or None
    ray = import_ray(local=address is None)
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False)
        return True
    ray.init(
        num_cpus=config.num_cpus,
        num_gpus=config.num_gpus,
        include_dashboard=False,
        object_store_memory=config.object_store_bytes,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )
    return True


@contextmanager
def ray_session(config: RayConfig | None = None) -> Iterator[Any]:
    """Ray for the length of a `with` block: shut down on exit only if this block started it."""
    started = init_ray(config)
    try:
        yield import_ray()
    finally:
        if started:
            import_ray().shutdown()
