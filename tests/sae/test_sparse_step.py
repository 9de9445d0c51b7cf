"""The sparse TopK training step: same loss, outputs and gradients as sae-lens's dense TopKTrainingSAE step, and the
same training run through the sae-lens trainer."""

import pytest
import torch
from sae_lens.saes.sae import TrainStepInput, TrainStepOutput
from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig
from safetensors.torch import load_file

from sae_workbench.sae.data import tensor_source
from sae_workbench.sae.sparse_step import SparseTopKTrainingSAE
from sae_workbench.sae.train import TrainConfig, build_training_sae, train_sae
from tests.sae.test_sae_train import D_IN, small_cfg, synthetic_chunks


def _pair(rescale: bool, b_dec_in: bool) -> tuple[TopKTrainingSAE, SparseTopKTrainingSAE]:
    """A dense and a sparse TopK training SAE with the same (non-trivial) weights."""
    torch.manual_seed(0)
    cfg = TopKTrainingSAEConfig(
        d_in=64,
        d_sae=512,
        k=8,
        rescale_acts_by_decoder_norm=rescale,
        apply_b_dec_to_input=b_dec_in,
        normalize_activations="expected_average_only_in",
    )
    dense = TopKTrainingSAE(cfg)
    with torch.no_grad():  # biases and uneven decoder norms, so every gradient path carries signal
        dense.b_enc.normal_(0, 0.5)
        dense.b_dec.normal_()
        dense.W_dec.mul_(torch.rand(cfg.d_sae, 1) + 0.5)
    sparse = SparseTopKTrainingSAE(cfg)
    sparse.load_state_dict(dense.state_dict())
    return dense, sparse


def _step(
    sae: TopKTrainingSAE, x: torch.Tensor, dead: torch.Tensor
) -> tuple[TrainStepOutput, dict[str, torch.Tensor]]:
    """One training forward + backward; the output and every parameter's gradient."""
    sae.zero_grad()
    out = sae.training_forward_pass(
        TrainStepInput(
            sae_in=x, dead_neuron_mask=dead, coefficients={}, n_training_steps=0, is_logging_step=False
        )
    )
    out.loss.backward()
    return out, {name: p.grad.clone() for name, p in sae.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("rescale", [True, False])
@pytest.mark.parametrize("b_dec_in", [True, False])
@pytest.mark.parametrize("n_dead", [0, 10, 200])  # no aux loss; fewer dead than k_aux = 32; more
def test_sparse_step_matches_sae_lens_dense_step(rescale: bool, b_dec_in: bool, n_dead: int) -> None:
    dense, sparse = _pair(rescale, b_dec_in)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(256, 64, generator=gen) * 2
    dead = torch.zeros(512, dtype=torch.bool)
    dead[torch.randperm(512, generator=gen)[:n_dead]] = True
    out_d, grads_d = _step(dense, x, dead)
    out_s, grads_s = _step(sparse, x, dead)
    assert out_s.feature_acts.is_sparse
    torch.testing.assert_close(out_s.feature_acts.to_dense(), out_d.feature_acts)
    torch.testing.assert_close(out_s.sae_out, out_d.sae_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out_s.hidden_pre, out_d.hidden_pre)
    for name in ("mse_loss", "auxiliary_reconstruction_loss"):
        torch.testing.assert_close(out_s.losses[name], out_d.losses[name], rtol=1e-5, atol=1e-6)
    assert (out_d.losses["auxiliary_reconstruction_loss"] > 0) == (n_dead > 0)
    assert set(grads_s) == set(grads_d) == {"W_enc", "b_enc", "W_dec", "b_dec"}
    for name, grad in grads_d.items():
        scale = float(grad.abs().max())
        assert scale > 0
        torch.testing.assert_close(grads_s[name], grad, rtol=1e-4, atol=1e-5 * scale, msg=name)


def test_sparse_step_falls_back_to_the_dense_step_where_it_does_not_apply() -> None:
    _, sparse = _pair(True, True)
    sparse = sparse.double()
    x = torch.randn(32, 64, dtype=torch.float64)
    out, _ = _step(sparse, x, torch.zeros(512, dtype=torch.bool))
    assert not out.feature_acts.is_sparse
    assert not sparse.sparse_step_applies(x)


def test_training_with_the_sparse_step_gives_the_dense_run(tmp_path) -> None:
    chunks = synthetic_chunks(16)
    runs = {}
    for sparse in (True, False):
        cfg = small_cfg(sparse_step=sparse)
        assert isinstance(build_training_sae(cfg, D_IN), SparseTopKTrainingSAE) == sparse
        result = train_sae(
            tensor_source(chunks),
            D_IN,
            cfg,
            tmp_path / str(sparse),
            model_name="synthetic",
            hook="h",
            progress=False,
        )
        runs[sparse] = (result, load_file(str(tmp_path / str(sparse) / "sae_weights.safetensors")))
    (res_s, w_s), (res_d, w_d) = runs[True], runs[False]
    assert res_s.n_steps == res_d.n_steps == 30
    for key in ("loss", "l0", "explained_variance", "dead_fraction", "auxiliary_reconstruction_loss"):
        assert res_s.final[key] == pytest.approx(res_d.final[key], rel=1e-3, abs=1e-4), key
    for name, weight in w_d.items():
        torch.testing.assert_close(w_s[name], weight, rtol=1e-3, atol=1e-4, msg=name)


def test_sparse_step_is_the_cpu_default_for_topk_only() -> None:
    assert isinstance(build_training_sae(TrainConfig(d_sae=128), D_IN), SparseTopKTrainingSAE)
    assert not isinstance(
        build_training_sae(TrainConfig(d_sae=128), D_IN, device="cuda"), SparseTopKTrainingSAE
    )
    assert not isinstance(
        build_training_sae(TrainConfig(architecture="batchtopk", d_sae=128), D_IN), SparseTopKTrainingSAE
    )
