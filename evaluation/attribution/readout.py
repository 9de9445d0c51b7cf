"""The SAE adapter: a feature's pre-activation as a linear read-out of the hook state.

sae_lens SAEs (standard, topk, batchtopk, jumprelu, gated) all compute, per position,
``pre = (norm(x) - apply_b_dec_to_input * b_dec) @ W_enc[:, k] + b_enc[k]`` (sae_lens saes/sae.py:process_sae_in, then
the architecture's ``encode``). TopK with ``rescale_acts_by_decoder_norm`` multiplies the pre-activation by
``‖W_dec[k]‖`` before the TopK; gated SAEs' magnitude path uses ``W_enc * exp(r_mag)`` and ``b_mag``. For an active
feature the activation equals this pre-activation, so splitting it splits the activation.

The input normalisation is frozen at the clean state, as DePass freezes RMSNorm (spec A.3, arXiv 2510.18462):
``constant_norm_rescale`` multiplies every component by the clean ``sqrt(d_in)/‖x‖``; ``layer_norm`` centres every
component and divides by the clean ``std + 1e-5``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from sae_lens import SAE

from sae_workbench.evaluation.attribution.errors import FeatureOutOfRangeError, UnsupportedSAEError

# sae_lens's layer_norm input normalisation adds this to the std (saes/sae.py:run_time_activation_ln_in).
SAE_LN_EPS = 1e-5
_NORMS = ("none", "expected_average_only_in", "constant_norm_rescale", "layer_norm")


@dataclass(frozen=True)
class FeatureReadout:
    """How one SAE feature's pre-activation reads the hook state."""

    feature: int
    """Index of the feature in 0..d_sae-1."""
    direction_D: torch.Tensor
    """Encoder column, times the decoder norm for rescaling TopK SAEs (or exp(r_mag) for gated SAEs)."""
    bias: float
    """The constant part: (b_enc[k] - apply_b_dec_to_input * b_dec · W_enc[:, k]) times the same scale."""
    normalize: str
    """sae_lens `normalize_activations` of the SAE."""

    def scale_N(self, x_ND: torch.Tensor) -> torch.Tensor:
        """The frozen per-position input scale of the clean states `x_ND`."""
        if self.normalize == "constant_norm_rescale":
            return x_ND.shape[-1] ** 0.5 / x_ND.norm(dim=-1)
        if self.normalize == "layer_norm":
            return 1.0 / (x_ND.std(dim=-1) + SAE_LN_EPS)
        return torch.ones(x_ND.shape[:-1], dtype=x_ND.dtype)

    def component_scores(self, parts_MD: torch.Tensor, x_D: torch.Tensor) -> torch.Tensor:
        """Each component's share (M,) of the pre-activation at one position whose clean state is `x_D`."""
        if self.normalize == "layer_norm":
            parts_MD = parts_MD - parts_MD.mean(dim=-1, keepdim=True)
        scale = self.scale_N(x_D[None])[0]
        return scale * (parts_MD @ self.direction_D)

    def pre_activation_N(self, x_ND: torch.Tensor) -> torch.Tensor:
        """The pre-activation at every position, computed live (differentiable, used by gradient baselines)."""
        if self.normalize == "layer_norm":
            x_ND = x_ND - x_ND.mean(dim=-1, keepdim=True)
        return self.scale_N(x_ND) * (x_ND @ self.direction_D) + self.bias


def check_supported(sae: SAE[Any]) -> None:
    """Raise UnsupportedSAEError when the SAE's encoder is not a linear read-out of the hook state."""
    reshape = getattr(sae.cfg, "reshape_activations", "none")
    if reshape != "none":
        raise UnsupportedSAEError(
            f"SAE reshapes its input ({reshape!r}); DePass reads SAEs on d_model-wide hooks only "
            "(resid_pre/mid/post, attn_out, mlp_out): use an SAE trained on one of those."
        )
    norm = sae.cfg.normalize_activations
    if norm not in _NORMS:
        raise UnsupportedSAEError(
            f"SAE normalize_activations={norm!r} is not one of {_NORMS}; fold the normalisation into the "
            "weights (sae.fold_activation_norm_scaling_factor) or use an SAE without it."
        )


def decoder_rows_FD(sae: SAE[Any]) -> torch.Tensor:
    """The decoder rows as `decode` applies them to activations (divided by their norm for rescaling TopK SAEs)."""
    W_dec = sae.W_dec.detach()
    if getattr(sae.cfg, "rescale_acts_by_decoder_norm", False):
        W_dec = W_dec / W_dec.norm(dim=-1, keepdim=True)
    return W_dec


def feature_readout(sae: SAE[Any], feature: int, dtype: torch.dtype = torch.float32) -> FeatureReadout:
    """The linear read-out of `feature`'s pre-activation (the value its activation function sees), its direction in
    `dtype` (float32 for DePass; LRP asks for the model's dtype so a float64 check is not limited by the cast)."""
    check_supported(sae)
    d_sae = int(sae.cfg.d_sae)
    if not 0 <= feature < d_sae:
        raise FeatureOutOfRangeError(
            f"feature {feature} is out of range: this SAE has features 0..{d_sae - 1}."
        )
    with torch.no_grad():
        r_mag, b_mag = getattr(sae, "r_mag", None), getattr(sae, "b_mag", None)
        if isinstance(r_mag, torch.Tensor) and isinstance(b_mag, torch.Tensor):  # gated: the magnitude path
            w_D = sae.W_enc[:, feature] * r_mag[feature].exp()
            b = b_mag[feature]
        else:
            w_D = sae.W_enc[:, feature]
            b_enc = getattr(sae, "b_enc")  # noqa: B009 - typed as Tensor | Module on the base SAE
            b = b_enc[feature]
        b = b - float(sae.cfg.apply_b_dec_to_input) * (sae.b_dec @ w_D)
        scale = 1.0
        if getattr(sae.cfg, "rescale_acts_by_decoder_norm", False):
            scale = float(sae.W_dec[feature].norm())
        return FeatureReadout(
            feature=feature,
            direction_D=(w_D * scale).detach().to(dtype).clone(),
            bias=float(b) * scale,
            normalize=str(sae.cfg.normalize_activations),
        )
