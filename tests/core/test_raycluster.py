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
def test_local_cluster_listens_on_loopback_only() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
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
