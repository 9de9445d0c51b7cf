"""The local Ray cluster the `--backend ray` stages start: loopback only, no usage reporting, clean shutdown."""

import os
import subprocess
import sys

import pytest

from sae_workbench.errors import WorkbenchError
from sae_workbench.raycluster import check_backend

PROBE = """
import json, psutil
from sae_workbench.raycluster import RayConfig, ray_session
with ray_session(RayConfig(num_cpus=1)) as ray:
    @ray.remote
    def square(x):
        return x * x
    values = ray.get([square.remote(i) for i in range(4)])
    pids = {p.pid for p in psutil.process_iter() if "ray" in " ".join(p.cmdline()[:2]).lower()
            or p.name().startswith(("raylet", "gcs_server"))}
    listening = sorted({c.laddr.ip for c in psutil.net_connections("inet")
                        if c.status == psutil.CONN_LISTEN and c.pid in pids})
    print(json.dumps({"values": values, "listening": listening, "usage": __import__("os").environ.get("RAY_USAGE_STATS_ENABLED"),
                      "node": ray.nodes()[0]["NodeManagerAddress"]}))
print("after", __import__("ray").is_initialized())
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "exported",
    [{}, {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_USAGE_STATS_ENABLED": "1"}],
    ids=["clean-env", "cluster-mode-exported"],
)
def test_local_cluster_listens_on_loopback_only(exported: dict[str, str]) -> None:
    """Also with Ray's multi-machine mode and usage reporting exported: the local cluster forces them off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | exported
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=180, env=env, check=True
    ).stdout.splitlines()
    import json

    result = json.loads(out[-2])
    assert result["values"] == [0, 1, 4, 9]
    assert result["usage"] == "0"
    assert result["node"] == "127.0.0.1"
    assert result["listening"], "found no Ray listener to check"
    assert set(result["listening"]) <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, result["listening"]
    assert out[-1] == "after False"  # the session that started Ray shut it down


def test_unknown_backend_is_a_clear_error() -> None:
    assert check_backend("ray") == "ray"
    with pytest.raises(WorkbenchError, match="choose one of local, ray"):
        check_backend("spark")


def test_local_cluster_overrides_exported_ray_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exported RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 would make Ray bind the routable address; a local cluster
    forces single-machine mode (in the environment its raylet/GCS/workers inherit, and in this process's copy of the
    constant, read when ray was imported) and no usage reporting. Joining a cluster leaves the environment alone."""
    from ray._private import ray_constants, services

    from sae_workbench.raycluster import import_ray

    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "1")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "1")
    monkeypatch.setattr(
        ray_constants, "ENABLE_RAY_CLUSTER", True
    )  # as an import under the exported value sets it
    import_ray(local=False)
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "1" and ray_constants.ENABLE_RAY_CLUSTER is True
    import_ray(local=True)
    assert (
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
        and os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
    )
    assert ray_constants.ENABLE_RAY_CLUSTER is False
    if not __import__("ray").is_initialized():  # with a node up, Ray answers that node's address instead
        assert services.get_node_ip_address() == "127.0.0.1"
