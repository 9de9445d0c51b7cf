"""Position-aware LRP of one SAE feature (Bakish, Zimerman, Chefer, Wolf, NeurIPS 2025, arXiv 2506.02138).

    r = lrp_attribution(model, sae, "blocks.3.hook_resid_post", tokens_N, feature=123, mode="pa_lrp")
    r.token_scores_N, r.position_scores_N           # which tokens, which positions made the feature fire
    sum(token) + sum(position) + r.dropped_position + sum(r.bias_shares) + sum(r.softmax_leak_L) == r.target

PA-LRP is AttnLRP (Achtibat et al., ICML 2024) plus rules that treat the positional encoding as an input, so the
relevance that reaches the positions is reported instead of lost (learned PE) or folded into the tokens (RoPE). The
rules are in `lrp_rules.py`; one forward and one backward give every map (spec pe-lrp.md §1, §4).

The target is T = α·x_t·W_enc[:, k], the feature's pre-activation without its constant part (b_enc[k] minus
b_dec·W_enc[:, k] when the SAE subtracts b_dec): the same split DePass reports as its SAE bias term. The SAE's input
normalisation α is frozen at the clean state.

The conservation identity, exact in gradient×input form (spec §1.4):
    Σ R_tok + Σ R_pos + dropped_position + Σ_b b⊙∂b + Σ_ℓ S_ℓ = T,
with S_ℓ = ½(Σ A⊙∂A − Σ_unmasked scores⊙∂scores) the relevance layer ℓ's softmax does not pass on (its Taylor bias) and
`dropped_position` what AttnLRP drops at a learned position embedding (zero in the other modes and for RoPE).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.evaluation.attribution.depass import check_inputs, parse_hook
from sae_workbench.evaluation.attribution.errors import DecompositionMismatchError
from sae_workbench.evaluation.attribution.lrp_rules import LrpMode, LrpRules, bias_parameters
from sae_workbench.evaluation.attribution.readout import FeatureReadout, feature_readout

# Closure tolerance relative to max(1, |T|) (spec §6 P1: 1e-9 in float64; float32 is checked loosely here, as a
# guard against a broken rule, and the measured error is stored with every result).
CLOSURE_TOL = {torch.float64: 1e-9, torch.float32: 1e-3}


@dataclass(frozen=True)
class LrpAttribution:
    """PA-LRP / AttnLRP / CP relevance of one feature's pre-activation at one position of one text."""

    mode: str
    """pa_lrp, attnlrp or cp."""
    feature: int
    position: int
    positional: str
    """How the model encodes positions: learned (added to the embedding) or rotary."""
    target: float
    """T = α·x_t·W_enc[:, k], what the relevance splits (the pre-activation minus `sae_bias`)."""
    sae_bias: float
    """The pre-activation's constant part, b_enc[k] − b_dec·W_enc[:, k] (times the decoder norm for rescaling TopK)."""
    token_scores_N: tuple[float, ...]
    """Signed relevance of each token embedding, positions 0..position."""
    position_scores_N: tuple[float, ...]
    """Signed relevance of each position's encoding, summed over layers."""
    position_layers: tuple[str, ...]
    """Names of the rows of `position_scores_LN`: "embed" (learned PE) or "L0", "L1", … (RoPE per layer)."""
    position_scores_LN: tuple[tuple[float, ...], ...]
    """Position relevance per layer."""
    dropped_position: float
    """What AttnLRP loses at a learned position embedding (p⊙∂p, not credited); 0 in pa_lrp and cp modes."""
    bias_shares: dict[str, float]
    """b⊙∂b of every model bias with a non-zero share, by TL parameter name."""
    softmax_leak_L: tuple[float, ...]
    """S_ℓ per attention layer: the relevance the softmax does not pass on; 0 in cp mode."""
    closure_error: float
    """T minus the sum of all terms of the identity (float rounding only)."""
    paper_map_N: tuple[float, ...]
    """The paper's heat map, R_tok + Σ_ℓ Σ_{cos,sin} |Σ_d R|, divided by max|·| (reference llama_engine.py:222-278).
    A ranking view, NOT conservative."""

    @property
    def pre_activation(self) -> float:
        """The feature's pre-activation (the activation when the feature is active)."""
        return self.target + self.sae_bias

    @property
    def pair_scores_N(self) -> tuple[float, ...]:
        """Token plus position relevance per position (signed, conservative with the residual terms)."""
        return tuple(a + b for a, b in zip(self.token_scores_N, self.position_scores_N, strict=True))

    def residual_terms(self) -> dict[str, float]:
        """The identity's terms that are not on a token or position, summed: biases, softmax leak, dropped PE."""
        return {
            "bias": sum(self.bias_shares.values()),
            "softmax_leak": sum(self.softmax_leak_L),
            "dropped_position": self.dropped_position,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (tuples as lists) plus the pre-activation."""
        out = dataclasses.asdict(self)
        out = {k: [list(r) for r in v] if k.endswith("_LN") else v for k, v in out.items()}
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}
        return {**out, "pre_activation": self.pre_activation}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LrpAttribution:
        """Inverse of `to_dict`."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        for k, v in list(kw.items()):
            if k.endswith("_LN"):
                kw[k] = tuple(tuple(float(x) for x in row) for row in v)
            elif isinstance(v, list):
                kw[k] = tuple(v)
        return cls(**kw)


def target_value(readout: FeatureReadout, x_D: torch.Tensor) -> torch.Tensor:
    """T = α·x·w with the SAE's input normalisation α frozen at `x_D` (differentiable in x_D)."""
    w_D = readout.direction_D.to(dtype=x_D.dtype, device=x_D.device)
    if readout.normalize == "layer_norm":
        x_D = x_D - x_D.mean()
    scale = readout.scale_N(x_D.detach()[None])[0].to(x_D.dtype)
    return scale * (x_D @ w_D)


def lrp_attribution(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    tokens_N: torch.Tensor,
    feature: int,
    position: int = -1,
    mode: LrpMode = "pa_lrp",
    aware_layers: frozenset[int] | None = None,
) -> LrpAttribution:
    """Token and position relevance of `feature`'s pre-activation at `position` (one forward, one backward)."""
    t = check_inputs(model, sae, hook, tokens_N, position)
    target_hook = parse_hook(model, hook)
    readout = feature_readout(sae, feature, dtype=model.cfg.dtype)
    tokens_N = tokens_N[: t + 1]
    n_blocks = target_hook.block + 1
    stop = n_blocks if n_blocks < model.cfg.n_layers else None
    grabbed: dict[str, torch.Tensor] = {}

    def grab(act: torch.Tensor, hook: Any) -> None:
        grabbed["x"] = act

    with LrpRules(model, mode, t + 1, aware_layers) as rules, torch.enable_grad():
        model.run_with_hooks(
            tokens_N[None].to(model.cfg.device), fwd_hooks=[*rules.hooks(), (hook, grab)], stop_at_layer=stop,
            return_type=None,
        )  # fmt: skip
        if not rules.scale_hooks and model.cfg.normalization_type is not None:
            raise DecompositionMismatchError(
                "no hook_scale fired: this TL version's norm does not expose its scale, so LRP cannot detach it."
            )
        T = target_value(readout, grabbed["x"][0, t])
        biases = bias_parameters(model, n_blocks)
        layers = sorted(rules.scores)
        leaves = rules.leaves()
        inputs = [
            *leaves, *biases.values(), *(rules.patterns[ell] for ell in layers),
            *(rules.scores[ell] for ell in layers),
        ]  # fmt: skip
        grads = torch.autograd.grad(T, inputs, allow_unused=True)
    grad_of = dict(zip(range(len(inputs)), grads, strict=True))

    def relevance(i: int) -> torch.Tensor:
        g = grad_of[i]
        x = inputs[i].detach()
        return torch.zeros_like(x) if g is None else x * g

    assert rules.embed is not None
    R_tok_N = relevance(0)[0].sum(-1)
    dropped = 0.0
    if rules.rotary_model:
        names = tuple(f"L{ell}" for ell in range(n_blocks))
        rows_LN = torch.zeros(n_blocks, t + 1, dtype=R_tok_N.dtype)
        paper_pos_N = torch.zeros(t + 1, dtype=R_tok_N.dtype)
        for j, ell in enumerate(rules.rotary):
            cos_N = relevance(1 + 2 * j).sum(-1)
            sin_N = relevance(2 + 2 * j).sum(-1)
            if ell < n_blocks:  # later blocks do not run (stop_at_layer)
                rows_LN[ell] = cos_N + sin_N
                paper_pos_N += cos_N.abs() + sin_N.abs()
        n_leaves = 1 + 2 * len(rules.rotary)
    else:
        assert rules.pos_embed is not None
        names = ("embed",)
        pos_N = relevance(1)[0].sum(-1)
        if mode == "attnlrp":  # p is added detached; ∂p would equal ∂e, the gradient at resid_pre_0
            g_e = grad_of[0]
            dropped = 0.0 if g_e is None else float((rules.pos_embed.detach() * g_e).sum())
            pos_N = torch.zeros_like(pos_N)
        rows_LN = pos_N[None]
        paper_pos_N = pos_N.abs()
        n_leaves = 2
    bias_shares = {}
    for j, name in enumerate(biases):
        share = float(relevance(n_leaves + j).sum())
        if share != 0.0:
            bias_shares[name] = share
    off = n_leaves + len(biases)
    leak = [0.0] * n_blocks
    for j, ell in enumerate(layers):
        A_term = relevance(off + j).sum()
        s = inputs[off + len(layers) + j].detach()
        g = grad_of[off + len(layers) + j]
        s_term = 0.0 if g is None else torch.where(torch.isfinite(s), s * g, torch.zeros_like(s)).sum()
        leak[ell] = float(0.5 * (A_term - s_term))
    pos_total_N = rows_LN.sum(0)
    target = float(T.detach())
    total = float(R_tok_N.sum() + pos_total_N.sum()) + dropped + sum(bias_shares.values()) + sum(leak)
    error = target - total
    tol = CLOSURE_TOL.get(R_tok_N.dtype, 1e-3) * max(1.0, abs(target))
    if not abs(error) <= tol:
        raise DecompositionMismatchError(
            f"LRP conservation failed for feature {feature}: T={target:.6g} but the terms sum to {total:.6g} "
            "(a TL component the rules do not cover); report the model."
        )
    paper_N = R_tok_N + paper_pos_N
    paper_N = paper_N / paper_N.abs().max().clamp_min(1e-30)
    return LrpAttribution(
        mode=mode,
        feature=feature,
        position=t,
        positional="rotary" if rules.rotary_model else "learned",
        target=target,
        sae_bias=readout.bias,
        token_scores_N=tuple(R_tok_N.tolist()),
        position_scores_N=tuple(pos_total_N.tolist()),
        position_layers=names,
        position_scores_LN=tuple(tuple(r) for r in rows_LN.tolist()),
        dropped_position=dropped,
        bias_shares=bias_shares,
        softmax_leak_L=tuple(leak),
        closure_error=error,
        paper_map_N=tuple(paper_N.tolist()),
    )
