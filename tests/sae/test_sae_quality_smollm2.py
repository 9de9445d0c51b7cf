"""The default TopK training settings give a usable SAE on SmolLM2 layer 3 from a small activation cache."""

from pathlib import Path

import pytest
import torch

from sae_workbench.sae.data import cache_source
from sae_workbench.sae.io import load_sae
from sae_workbench.sae.metrics import evaluate_on_activations
from sae_workbench.sae.train import TrainConfig, train_sae

HOOK = "blocks.3.hook_resid_post"
SHARD = 8192
N_SHARDS = 7  # 6 to train on (~48k non-BOS tokens), 1 held out
# Measured 0.708 (L0 32, dead 15% of 2304 on 8k held-out tokens) with the defaults of sae/train.py; bench/NOTES.md.
EV_FLOOR = 0.6


@pytest.mark.slow  # caches 57k tokens of SmolLM2 and trains a 2304-feature SAE (a few minutes on 2 loaded cores)
def test_default_topk_settings_reach_honest_ev_floor(smollm2, tmp_path: Path):
    from sae_workbench.activation_cache.caching import cache_activations
    from sae_workbench.corpus import resolve_corpus

    cache_activations(
        smollm2,
        [HOOK],
        resolve_corpus("default"),
        tmp_path / "cache",
        n_tokens=SHARD * N_SHARDS,
        context_size=128,
        shard_tokens=SHARD,
        progress=False,
    )
    full = cache_source(tmp_path / "cache", HOOK)

    def train_part(start: int):
        for i, chunk in enumerate(full(start), start=start):
            if i >= N_SHARDS - 1:
                return
            yield chunk

    held_out = torch.cat([c.acts_ND for c in full(N_SHARDS - 1)])
    cfg = TrainConfig(expansion=4, k=32, n_tokens=45_000, shuffle_chunks=2, log_every=20)
    result = train_sae(
        train_part, 576, cfg, tmp_path / "sae", model_name="smollm2-135m", hook=HOOK, progress=False
    )
    metrics = evaluate_on_activations(load_sae(result.folder), held_out.split(4096))
    # The earlier defaults (batch 4096, raw inputs, b_dec 0, lr 4e-4) reached held-out EV 0.05 even on 300k tokens.
    assert metrics["explained_variance"] > EV_FLOOR, metrics
    assert metrics["l0"] <= 32.5
