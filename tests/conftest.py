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
