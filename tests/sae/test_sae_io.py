"""Saving/loading SAEs: SAELens folders, registry ids via a local mirror, sparsify and Gemma Scope converters."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sae_lens import (
    SAE,
    BatchTopKTrainingSAE,
    BatchTopKTrainingSAEConfig,
    JumpReLUSAE,
    TopKSAE,
    TopKSAEConfig,
    TopKTrainingSAE,
    TopKTrainingSAEConfig,
)
from safetensors.torch import save_file

from sae_workbench.sae.io import (
    SAEFileCorruptError,
    SAELoadError,
    SAEShapeMismatchError,
    UnknownArchitectureError,
    UnsupportedSAEVersionError,
    check_sae_matches,
    compute_sae_id,
    load_sae,
    sae_id_of,
    save_sae,
)

D_IN, D_SAE = 64, 256


def build_topk(seed: int = 0, **overrides) -> TopKTrainingSAE:
    """A tiny TopK training SAE with non-unit decoder norms (so folding on save is exercised)."""
    torch.manual_seed(seed)
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(**{"d_in": D_IN, "d_sae": D_SAE, "k": 8, **overrides}))
    with torch.no_grad():
        sae.W_dec.mul_(torch.rand(D_SAE, 1) + 0.5)
        sae.b_enc.add_(0.01)
    return sae


def test_saelens_roundtrip_same_outputs_and_id(tmp_path: Path):
    sae = build_topk()
    folder = save_sae(sae, tmp_path / "sae")
    assert {p.name for p in folder.iterdir()} >= {
        "cfg.json",
        "sae_weights.safetensors",
        "sparsity.safetensors",
    }
    # sae-lens itself can read the folder.
    direct = SAE.load_from_disk(str(folder))
    loaded = load_sae(folder)
    assert isinstance(loaded, TopKSAE) and isinstance(direct, TopKSAE)
    x = torch.randn(20, D_IN)
    expected = sae.decode(sae.encode(x))
    torch.testing.assert_close(loaded(x), expected, atol=1e-5, rtol=1e-5)
    assert compute_sae_id(sae, "tiny", "blocks.1.hook_resid_post") == compute_sae_id(
        loaded, "tiny", "blocks.1.hook_resid_post"
    )


def test_sae_id_changes_with_weights_model_hook():
    sae = build_topk()
    base = compute_sae_id(sae, "tiny", "blocks.1.hook_resid_post")
    assert len(base) == 16
    assert compute_sae_id(sae, "tiny", "blocks.0.hook_resid_post") != base
    assert compute_sae_id(sae, "other", "blocks.1.hook_resid_post") != base
    assert compute_sae_id(build_topk(k=16), "tiny", "blocks.1.hook_resid_post") != base
    with torch.no_grad():
        sae.b_dec[0] += 1e-3
    assert compute_sae_id(sae, "tiny", "blocks.1.hook_resid_post") != base


# The id of `fixed_sae()` as compute_sae_id gave it at 0e9fae2 (unchanged since the stores were first written):
# existing stores key every row by these ids, so any change to the hashing must show up here.
FIXED_SAE_ID = "c8c9035a32dff981"


def fixed_sae() -> TopKSAE:
    """A 4→6 TopK SAE whose weights are set value by value (no RNG, so no torch version can change them)."""
    sae = TopKSAE(TopKSAEConfig(d_in=4, d_sae=6, k=2))
    with torch.no_grad():
        for i, (_, param) in enumerate(sorted(sae.named_parameters())):
            param.copy_(torch.arange(param.numel(), dtype=torch.float32).reshape(param.shape) / (7 + i) - 0.5)
    return sae


def test_sae_id_of_a_fixed_sae_is_pinned(tmp_path: Path):
    sae = fixed_sae()
    assert compute_sae_id(sae, "tiny", "blocks.1.hook_resid_post") == FIXED_SAE_ID
    # Saved and loaded, without a training record: the id is recomputed and still the same.
    folder = save_sae(sae, tmp_path / "fixed")
    assert sae_id_of(load_sae(folder), "tiny", "blocks.1.hook_resid_post", folder) == FIXED_SAE_ID


def test_batchtopk_saves_as_jumprelu_with_threshold(tmp_path: Path):
    torch.manual_seed(0)
    sae = BatchTopKTrainingSAE(BatchTopKTrainingSAEConfig(d_in=D_IN, d_sae=D_SAE, k=8))
    with torch.no_grad():
        sae.topk_threshold.fill_(0.25)
    loaded = load_sae(save_sae(sae, tmp_path / "b"))
    assert isinstance(loaded, JumpReLUSAE)
    assert torch.allclose(loaded.threshold, torch.full((D_SAE,), 0.25))
    assert compute_sae_id(sae, "m", "h") == compute_sae_id(loaded, "m", "h")


def test_registry_id_loads_from_local_mirror(tmp_path: Path):
    # gpt2-small-res-jb is a real SAELens release whose files live in jbloom/GPT2-Small-SAEs-Reformatted.
    sae = build_topk()
    save_sae(sae, tmp_path / "mirror" / "jbloom" / "GPT2-Small-SAEs-Reformatted" / "blocks.0.hook_resid_pre")
    loaded = load_sae("gpt2-small-res-jb/blocks.0.hook_resid_pre", mirror=tmp_path / "mirror")
    x = torch.randn(5, D_IN)
    torch.testing.assert_close(loaded(x), sae.decode(sae.encode(x)), atol=1e-5, rtol=1e-5)
    with pytest.raises(SAELoadError, match="not in release"):
        load_sae("gpt2-small-res-jb/blocks.99.nope", mirror=tmp_path / "mirror")
    with pytest.raises(SAELoadError, match="not a SAELens release"):
        load_sae("no-such-release/x")


def test_sparsify_converter_matches_reference_math(tmp_path: Path):
    torch.manual_seed(1)
    enc_FD, b_enc = torch.randn(D_SAE, D_IN) / 8, torch.randn(D_SAE) / 10
    W_dec, b_dec = torch.randn(D_SAE, D_IN) / 8, torch.randn(D_IN)
    folder = tmp_path / "layers.1"
    folder.mkdir()
    (folder / "cfg.json").write_text(
        json.dumps({"k": 4, "num_latents": D_SAE, "d_in": D_IN, "activation": "topk"})
    )
    save_file(
        {"encoder.weight": enc_FD, "encoder.bias": b_enc, "W_dec": W_dec, "b_dec": b_dec},
        str(folder / "sae.safetensors"),
    )
    sae = load_sae(folder)
    assert sae.cfg.metadata.hook_name == "blocks.1.hook_resid_post"
    x = torch.randn(6, D_IN)
    # sparsify's own forward: relu(encoder(x - b_dec)), keep top-4, decode with W_dec + b_dec.
    pre = torch.relu((x - b_dec) @ enc_FD.T + b_enc)
    vals, idx = pre.topk(4, dim=-1)
    acts = torch.zeros_like(pre).scatter(-1, idx, vals)
    torch.testing.assert_close(sae(x), acts @ W_dec + b_dec, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fmt", ["npz", "safetensors"])
def test_gemma_scope_converter_matches_reference_math(tmp_path: Path, fmt: str):
    rng = np.random.default_rng(0)
    params = {
        "W_enc": rng.normal(size=(D_IN, D_SAE)).astype(np.float32) / 8,
        "W_dec": rng.normal(size=(D_SAE, D_IN)).astype(np.float32) / 8,
        "b_enc": rng.normal(size=D_SAE).astype(np.float32) / 10,
        "b_dec": rng.normal(size=D_IN).astype(np.float32),
        "threshold": np.full(D_SAE, 0.3, dtype=np.float32),
    }
    folder = tmp_path / "layer_2" / "width_16k"
    folder.mkdir(parents=True)
    if fmt == "npz":
        np.savez(folder / "params.npz", **params)
        path = folder / "params.npz"
    else:
        save_file({k: torch.from_numpy(v) for k, v in params.items()}, str(folder / "params.safetensors"))
        path = folder / "params.safetensors"
    sae = load_sae(path, hook="blocks.2.hook_resid_post")
    assert isinstance(sae, JumpReLUSAE)
    x = torch.randn(7, D_IN)
    p = {k: torch.from_numpy(v) for k, v in params.items()}
    pre = x @ p["W_enc"] + p["b_enc"]  # Gemma Scope: no b_dec subtraction before encoding
    acts = pre * (pre > p["threshold"])
    torch.testing.assert_close(sae(x), acts @ p["W_dec"] + p["b_dec"], atol=1e-5, rtol=1e-5)
    assert load_sae(folder).cfg.d_sae == D_SAE  # a folder with params.* loads too


def test_truncated_weights_raise_typed_error(tmp_path: Path):
    folder = save_sae(build_topk(), tmp_path / "s")
    weights = folder / "sae_weights.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(SAEFileCorruptError, match="truncated or corrupt"):
        load_sae(folder)
    weights.write_bytes(b"garbage")
    with pytest.raises(SAEFileCorruptError):
        load_sae(folder)


def test_missing_tensor_raises_corrupt(tmp_path: Path):
    folder = save_sae(build_topk(), tmp_path / "s")
    save_file({"W_enc": torch.zeros(D_IN, D_SAE)}, str(folder / "sae_weights.safetensors"))
    with pytest.raises(SAEFileCorruptError, match="does not match"):
        load_sae(folder)


def test_unknown_architecture_and_unsupported_version(tmp_path: Path):
    folder = save_sae(build_topk(), tmp_path / "s")
    cfg_path = folder / "cfg.json"
    cfg = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps({**cfg, "architecture": "crosscoder9000"}))
    with pytest.raises(UnknownArchitectureError, match="crosscoder9000"):
        load_sae(folder)
    cfg["metadata"]["sae_lens_version"] = "7.1.0"
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedSAEVersionError, match=r"7\.1\.0"):
        load_sae(folder)
    cfg_path.write_text(json.dumps({"architecture": "topk"}))
    with pytest.raises(UnsupportedSAEVersionError, match="d_in"):
        load_sae(folder)


def test_not_an_sae(tmp_path: Path):
    with pytest.raises(SAELoadError, match="holds no SAE"):
        load_sae(tmp_path)
    with pytest.raises(SAELoadError, match="neither"):
        load_sae("nonexistent-thing")


def test_check_sae_matches_hook_width(tiny_model):
    check_sae_matches(build_topk(), tiny_model, "blocks.1.hook_resid_post")  # d_model 64: fine
    wide = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=576, d_sae=64, k=4))
    with pytest.raises(
        SAEShapeMismatchError, match=r"d_in=576 but hook blocks\.1\.hook_resid_post .* width 64"
    ):
        check_sae_matches(wide, tiny_model, "blocks.1.hook_resid_post")
    mlp = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=256, d_sae=64, k=4))
    check_sae_matches(mlp, tiny_model, "blocks.0.mlp.hook_post")  # d_mlp = 4 × 64
