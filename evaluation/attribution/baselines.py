"""Token-attribution baselines for a feature's pre-activation, through the same interface as `depass_tokens`.

    scores = grad_x_input(model, sae, hook, tokens_N, feature)          # TokenScores
    scores = integrated_gradients(model, sae, hook, tokens_N, feature, steps=100)
    scores = attention_rollout(model, hook, tokens_N, position=-1)
    scores = random_scores(tokens_N, rng=np.random.default_rng(0))

Gradients are taken at ``hook_embed`` (for rotary models the whole residual input). IG integrates from a zero
embedding in 100 steps and rollout uses 0.5·A + 0.5·I with heads averaged, as the DePass evaluation code does
(spec A.4, arXiv 2510.18462).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.evaluation.attribution.depass import TokenAttribution, check_inputs, parse_hook
from sae_workbench.evaluation.attribution.readout import feature_readout

# IG steps and the rollout residual weight of the DePass evaluation code (arXiv 2510.18462, spec A.4).
IG_STEPS = 100
ROLLOUT_RESIDUAL = 0.5
IG_BATCH = 25


@dataclass(frozen=True)
class TokenScores:
    """One method's score for each input token (n = 0..position) of a text, for one feature."""

    method: str
    feature: int | None
    position: int
    scores_N: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def from_depass(result: TokenAttribution) -> TokenScores:
    """DePass token shares as TokenScores (method "depass:<rule>")."""
    return TokenScores(f"depass:{result.rule}", result.feature, result.position, result.scores_N)


def _pre_at(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    embed_BND: torch.Tensor,
    tokens_N: torch.Tensor,
    feature: int,
) -> torch.Tensor:
    """The feature's pre-activation at the last position (B,), with `hook_embed` replaced by `embed_BND`."""
    target = parse_hook(model, hook)
    readout = feature_readout(sae, feature)
    grabbed: dict[str, torch.Tensor] = {}

    def put_embed(_act: torch.Tensor, hook: Any) -> torch.Tensor:
        return embed_BND

    def grab(act: torch.Tensor, hook: Any) -> None:
        grabbed["x"] = act

    stop = target.block + 1 if target.block + 1 < model.cfg.n_layers else None
    tokens_BN = tokens_N[None].expand(embed_BND.shape[0], -1)
    model.run_with_hooks(
        tokens_BN,
        fwd_hooks=[("hook_embed", put_embed), (hook, grab)],
        stop_at_layer=stop,
        return_type=None,
    )
    x_BD = grabbed["x"][:, -1].float()
    return readout.pre_activation_N(x_BD)


def _clean_embed(model: HookedTransformer, tokens_N: torch.Tensor) -> torch.Tensor:
    """The clean `hook_embed` output (N, D)."""
    with torch.no_grad():
        return model.embed(tokens_N[None])[0].float()


def grad_x_input(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    tokens_N: torch.Tensor,
    feature: int,
    position: int = -1,
) -> TokenScores:
    """Gradient × input of the pre-activation at `hook_embed`, summed over d_model."""
    t = check_inputs(model, sae, hook, tokens_N, position)
    tokens_N = tokens_N[: t + 1]
    embed_ND = _clean_embed(model, tokens_N).requires_grad_(True)
    pre = _pre_at(model, sae, hook, embed_ND[None], tokens_N, feature)[0]
    (grad_ND,) = torch.autograd.grad(pre, embed_ND)
    scores = (grad_ND * embed_ND).sum(-1).detach()
    return TokenScores("grad_x_input", feature, t, tuple(scores.tolist()))


def integrated_gradients(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    tokens_N: torch.Tensor,
    feature: int,
    position: int = -1,
    steps: int = IG_STEPS,
) -> TokenScores:
    """Integrated gradients from a zero embedding (midpoint rule, `steps` points), summed over d_model."""
    t = check_inputs(model, sae, hook, tokens_N, position)
    tokens_N = tokens_N[: t + 1]
    embed_ND = _clean_embed(model, tokens_N)
    total_ND = torch.zeros_like(embed_ND)
    alphas = (torch.arange(steps, dtype=torch.float32) + 0.5) / steps
    for chunk in alphas.split(IG_BATCH):
        scaled_BND = (chunk[:, None, None] * embed_ND[None]).requires_grad_(True)
        pre_B = _pre_at(model, sae, hook, scaled_BND, tokens_N, feature)
        (grad_BND,) = torch.autograd.grad(pre_B.sum(), scaled_BND)
        total_ND += grad_BND.sum(0)
    scores = (total_ND / steps * embed_ND).sum(-1)
    return TokenScores("integrated_gradients", feature, t, tuple(scores.tolist()))


@torch.no_grad()
def attention_rollout(
    model: HookedTransformer, hook: str, tokens_N: torch.Tensor, position: int = -1
) -> TokenScores:
    """Attention rollout (Abnar & Zuidema 2020) through the blocks whose attention precedes the hook."""
    target = parse_hook(model, hook)
    n = tokens_N.numel()
    t = position % n
    tokens_N = tokens_N[: t + 1]
    n_attn = (target.n_sublayers + 1) // 2
    names = {f"blocks.{ell}.attn.hook_pattern" for ell in range(n_attn)}
    stop = target.block + 1 if target.block + 1 < model.cfg.n_layers else None
    _, cache = model.run_with_cache(tokens_N[None], names_filter=lambda k: k in names, stop_at_layer=stop)
    roll_NN = torch.eye(t + 1)
    for ell in range(n_attn):
        A_NN = cache[f"blocks.{ell}.attn.hook_pattern"][0].float().mean(0)
        A_NN = ROLLOUT_RESIDUAL * A_NN + (1 - ROLLOUT_RESIDUAL) * torch.eye(t + 1)
        roll_NN = A_NN @ roll_NN
    return TokenScores("attention_rollout", None, t, tuple(roll_NN[t].tolist()))


def random_scores(tokens_N: torch.Tensor, rng: np.random.Generator, position: int = -1) -> TokenScores:
    """Uniform random scores (the chance baseline)."""
    t = position % tokens_N.numel()
    return TokenScores("random", None, t, tuple(float(x) for x in rng.random(t + 1)))
