"""Shared test fixtures: an isolated WORKBENCH_HOME per session that reuses converted models."""

import os
from pathlib import Path

import pytest
import torch

# Tests never touch the hub; two threads match this machine and keep parallel helpers from oversubscribing.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def tiny_model():
    """A randomly initialised 2-layer HookedTransformer with SmolLM2's tokenizer."""
    from sae_workbench.models import load_model

    return load_model("tiny")


@pytest.fixture(scope="session")
def smollm2():
    """The real embedded default model (converted once per WORKBENCH_HOME)."""
    from sae_workbench.models import load_model

    return load_model("smollm2-135m")


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    """A fresh folder for a test's outputs."""
    return tmp_path


@pytest.fixture(scope="session")
def app_sample_store(tmp_path_factory: pytest.TempPathFactory):
    """A small real store for the app's tests: tiny model + TopK SAE indexed over real text, with explanations."""
    from tests.app.sample_store import build_sample_store

    return build_sample_store(tmp_path_factory.mktemp("app_sample"))


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster per test session (2 CPUs, no GPU, loopback only, usage reporting off), shut down after."""
    from sae_workbench.raycluster import RayConfig, import_ray, init_ray

    started = init_ray(RayConfig(num_cpus=2, num_gpus=0))
    ray = import_ray()
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="module", params=["single", "partitioned"])
def store_layout(request: pytest.FixtureRequest) -> str:
    """Which layout a populated-store fixture hands out: the single file, or the same store graduated to
    partitioned Parquet (`graduated_copy`); module-scoped, so each module builds each layout once."""
    return request.param


@pytest.fixture(scope="session")
def graduated_copy():
    """A function (store, folder) -> a copy of the single-file store under `folder`, graduated with `Store.graduate`
    to partitioned Parquet under `folder/root`: every SAE's activations and every corpus's windows moved out of the
    file (checked, so a test never silently reads the single layout twice). The original store is left as it was."""
    import shutil

    from sae_workbench.store import Store

    def copy(store, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "parted.duckdb"
        shutil.copy(store.path, path)  # the store checkpoints and detaches its file after every operation
        parted = Store.open(path)
        n_rows = {s.sae_id: store.activation_count(s.sae_id) for s in store.list_saes()}
        corpora = store.query("SELECT DISTINCT corpus FROM windows").column("corpus").to_pylist()
        parted.graduate(str(folder / "root"))
        for sae_id, n in n_rows.items():
            assert parted.activations_root(sae_id) is not None and parted.activation_count(sae_id) == n
        assert corpora and all(parted.windows_root(c) is not None for c in corpora)
        return parted

    return copy
