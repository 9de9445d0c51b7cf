"""Integration (slow): cached SmolLM2 activations at the default hook equal `run_with_cache` output."""

from __future__ import annotations

import pytest
import torch

from sae_workbench.activation_cache.caching import cache_activations
from sae_workbench.activation_cache.reader import ActivationCache
from sae_workbench.corpus import resolve_corpus
from sae_workbench.models import DEFAULT_HOOK


@pytest.mark.slow
def test_cached_activations_equal_run_with_cache(smollm2, tmp_path):
    stats = cache_activations(
        smollm2, [DEFAULT_HOOK], resolve_corpus("default"), tmp_path / "c", n_tokens=6 * 64, context_size=64,
        batch_size=3, dtype="float32", shard_tokens=192, progress=False,
    )  # fmt: skip
    cache = ActivationCache(tmp_path / "c")
    assert stats.new_tokens == cache.n_tokens == 384 and cache.n_shards == 2
    assert cache.manifest.d_model == 576 and cache.manifest.bos_id == 0
    for i in range(cache.n_shards):
        shard = cache.load_shard(i)
        _, ref = smollm2.run_with_cache(shard.tokens_WT.long(), names_filter=[DEFAULT_HOOK])
        torch.testing.assert_close(shard.acts[DEFAULT_HOOK], ref[DEFAULT_HOOK], rtol=1e-5, atol=1e-4)
        # design.md: the BOS position's layer-3 norm is ~8.6× other tokens; the mask excludes it.
        norms = shard.acts[DEFAULT_HOOK].norm(dim=-1)
        assert (norms[:, 0] > 4 * norms[:, 1:].median()).all() and not shard.mask_WT[:, 0].any()
    half = cache_activations(
        smollm2, [DEFAULT_HOOK], resolve_corpus("default"), tmp_path / "h", n_tokens=3 * 64, context_size=64,
        batch_size=3, dtype="float16", progress=False,
    )  # fmt: skip
    got = ActivationCache(half.folder).load_shard(0).acts[DEFAULT_HOOK].float()
    torch.testing.assert_close(got, cache.load_shard(0).acts[DEFAULT_HOOK], rtol=2e-3, atol=2e-2)
