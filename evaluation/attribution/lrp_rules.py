"""The LRP rules of AttnLRP / PA-LRP in gradient×input form, installed on a TransformerLens model with hooks.

    with LrpRules(model, mode="pa_lrp", n_positions=t + 1) as rules:
        model.run_with_hooks(tokens, fwd_hooks=rules.hooks(), stop_at_layer=L + 1)
        ...  # autograd.grad of the target w.r.t. rules.leaves(); relevance = leaf ⊙ grad

LXT 2.x computes LRP as gradient × input after making the backward of a few operations follow the LRP rules
(rachtibat/LRP-eXplains-Transformers v2.1, lxt/efficient; Achtibat et al., ICML 2024). LXT patches Hugging Face
classes and cannot patch TransformerLens (spec pe-lrp.md §5), so the rules are written here as three autograd
primitives and a set of TL hooks:

| op | rule | here |
|---|---|---|
| RMSNorm / LayerNorm | identity on 1/std (ε on the centring = linear) | `hook_scale` detached |
| SiLU / GELU / ReLU | identity | `identity_act`: backward g·act(x)/x |
| gate · up | uniform ½ / ½ | `scale_grad` ½ on both factors |
| q·kᵀ and A·V | uniform | q, k ÷4 (½ for q·kᵀ times ½ for A·V, moved below the softmax); v ÷2 |
| softmax | R_in = x⊙(R − s·ΣR) | plain autograd (the same quantity in gradient×input form) |
| e + p (learned PE) | ε-rule with both operands inputs | e and p are both leaves (PA-LRP, Bakish et al. 2025) |
| q⊙cos + rot(q)⊙sin (RoPE) | ε then uniform: ½ to q, ½ to cos/sin | cos, sin leaves; rotated dims ÷8 instead of ÷4 |

Modes (spec §0): ``pa_lrp`` (positional encoding is an input), ``attnlrp`` (positions detached, as LXT does), ``cp``
(conservative propagation: the attention pattern is a constant, so q and k get nothing and v gets the full gradient).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import torch
from transformer_lens import HookedTransformer

from sae_workbench.evaluation.attribution.errors import UnsupportedModelError

LrpMode = Literal["pa_lrp", "attnlrp", "cp"]
LRP_MODES: tuple[LrpMode, ...] = ("pa_lrp", "attnlrp", "cp")
_ACTS = ("relu", "gelu", "silu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "quick_gelu")
# Slope used where x == 0 exactly (act(0) = 0 for every activation above, so the relevance there is 0 either way).
_ZERO_SLOPE = 0.5


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient by a constant (a float or a broadcastable tensor)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(factor)
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None]:
        (factor,) = ctx.saved_tensors
        return grads[0] * factor, None


class _IdentityAct(torch.autograd.Function):
    """act(x) forward; backward g·act(x)/x, so the relevance x⊙grad equals act(x)⊙g (LRP identity rule)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        slope = torch.where(
            x == 0, torch.full_like(x, _ZERO_SLOPE), y / torch.where(x == 0, torch.ones_like(x), x)
        )
        ctx.save_for_backward(slope)
        return y.view_as(y)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None]:
        (slope,) = ctx.saved_tensors
        return grads[0] * slope, None


def scale_grad(x: torch.Tensor, factor: float | torch.Tensor) -> torch.Tensor:
    """`x` unchanged, with its gradient multiplied by `factor` on the way back."""
    f = factor if isinstance(factor, torch.Tensor) else torch.tensor(factor, dtype=x.dtype, device=x.device)
    out: torch.Tensor = _ScaleGrad.apply(x, f.to(dtype=x.dtype, device=x.device))  # pyright: ignore[reportAssignmentType]
    return out


def identity_act(act: Any, x: torch.Tensor) -> torch.Tensor:
    """`act(x)`, whose backward passes relevance through unchanged (gradient act(x)/x)."""
    out: torch.Tensor = _IdentityAct.apply(x, act(x.detach()))  # pyright: ignore[reportAssignmentType]
    return out


def check_model(model: HookedTransformer) -> None:
    """Raise UnsupportedModelError for a TL model whose forward the rules above do not cover."""
    cfg = model.cfg
    problems = []
    if cfg.positional_embedding_type not in ("standard", "rotary"):
        problems.append(
            f"positional_embedding_type={cfg.positional_embedding_type!r} (learned or rotary only)"
        )
    if cfg.act_fn is not None and cfg.act_fn not in _ACTS:
        problems.append(f"act_fn={cfg.act_fn!r} (one of {_ACTS})")
    if getattr(cfg, "attn_scores_soft_cap", -1.0) > 0:
        problems.append("attention score soft-capping")
    if getattr(cfg, "use_attention_sinks", False):
        problems.append("learned attention sinks")
    if getattr(cfg, "num_experts", None):
        problems.append("mixture-of-experts MLPs")
    if getattr(cfg, "clip_qkv", None) is not None:
        problems.append("q/k/v clipping")
    if problems:
        raise UnsupportedModelError(
            f"position-aware LRP does not cover {model.cfg.model_name!r}: {'; '.join(problems)}. "
            "Use DePass (`workbench attribute --method depass`) for this model."
        )


@dataclass
class LrpRules:
    """Hooks, leaves and captured tensors of one LRP forward pass (a context: restores the model on exit)."""

    model: HookedTransformer
    mode: LrpMode
    n_positions: int
    """Tokens in the forward pass (the RoPE leaves cover positions 0..n_positions-1)."""
    aware_layers: frozenset[int] | None = None
    """Layers whose RoPE gets relevance in pa_lrp mode (None: all). Used by the fold-back check (spec §6 P3)."""
    embed: torch.Tensor | None = None
    """The token-embedding leaf (N, D), set by the hook_embed hook."""
    pos_embed: torch.Tensor | None = None
    """The learned position-embedding leaf (N, D), set by the hook_pos_embed hook."""
    rotary: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=lambda: {})
    """Per layer, the (cos, sin) leaves (N, rotary_dim) put in place of the attention's buffers."""
    scores: dict[int, torch.Tensor] = field(default_factory=lambda: {})
    """Per layer, the masked attention scores seen by the softmax (captured, not changed)."""
    patterns: dict[int, torch.Tensor] = field(default_factory=lambda: {})
    """Per layer, the attention pattern leaving the softmax (captured before cp mode detaches it)."""
    scale_hooks: set[str] = field(default_factory=lambda: set[str]())
    """The norms whose `hook_scale` fired (and was detached)."""
    _saved_buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=lambda: {})
    _saved_acts: dict[int, Any] = field(default_factory=lambda: {})
    _saved_grad: dict[str, bool] = field(default_factory=lambda: {})

    def __repr__(self) -> str:
        # TL formats each hook function when adding it; the default dataclass repr would print the whole model.
        return f"LrpRules(mode={self.mode!r}, n_positions={self.n_positions})"

    # -- context: swap in RoPE leaves and identity-rule activations, freeze weights; restore on exit --------------
    def __enter__(self) -> LrpRules:
        check_model(self.model)
        for name, p in self.model.named_parameters():
            self._saved_grad[name] = p.requires_grad
            p.requires_grad_(is_bias(name))
        for ell, block in enumerate(self.model.blocks):
            mlp = getattr(block, "mlp", None)
            if mlp is not None and hasattr(mlp, "act_fn"):
                self._saved_acts[ell] = mlp.act_fn
                # ½ for the gate·up product (uniform rule); hook_pre_linear takes the other ½.
                object.__setattr__(
                    mlp, "act_fn", _IdentityActFn(mlp.act_fn, 0.5 if self.model.cfg.gated_mlp else 1.0)
                )
            if self.rope_aware(ell):
                attn = block.attn
                cos, sin = attn.rotary_cos, attn.rotary_sin
                if cos.shape[0] < self.n_positions:
                    raise UnsupportedModelError(
                        f"the text has {self.n_positions} tokens but the model's rotary table covers {cos.shape[0]}."
                    )
                self._saved_buffers[ell] = (cos, sin)
                leaf_cos = cos[: self.n_positions].detach().clone().requires_grad_(True)
                leaf_sin = sin[: self.n_positions].detach().clone().requires_grad_(True)
                attn.rotary_cos, attn.rotary_sin = leaf_cos, leaf_sin
                self.rotary[ell] = (leaf_cos, leaf_sin)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for ell, (cos, sin) in self._saved_buffers.items():
            attn = self.model.blocks[ell].attn
            attn.rotary_cos, attn.rotary_sin = cos, sin
        for ell, act in self._saved_acts.items():
            object.__setattr__(self.model.blocks[ell].mlp, "act_fn", act)
        for name, p in self.model.named_parameters():
            p.requires_grad_(self._saved_grad.get(name, True))

    @property
    def rotary_model(self) -> bool:
        """Whether positions enter through RoPE (else through a learned embedding added to the tokens)."""
        return self.model.cfg.positional_embedding_type == "rotary"

    def rope_aware(self, layer: int) -> bool:
        """Whether layer `layer`'s RoPE tables are inputs that receive relevance."""
        if not self.rotary_model or self.mode != "pa_lrp":
            return False
        return self.aware_layers is None or layer in self.aware_layers

    # -- hooks ---------------------------------------------------------------------------------------------------
    def hooks(self) -> list[tuple[Any, Any]]:
        """The forward hooks that put the rules in place (pass to `run_with_hooks`)."""
        out: list[tuple[Any, Any]] = [
            ("hook_embed", self._embed_leaf),
            (lambda name: name.endswith("hook_scale"), self._detach_scale),
            (lambda name: name.endswith("attn.hook_attn_scores"), self._capture_scores),
            (lambda name: name.endswith("attn.hook_pattern"), self._pattern),
            (lambda name: name.endswith("mlp.hook_pre_linear"), _half_grad),
        ]
        if not self.rotary_model:
            out.append(("hook_pos_embed", self._pos_leaf))
        if self.mode != "cp":
            qk = ("hook_rot_q", "hook_rot_k") if self.rotary_model else ("hook_q", "hook_k")
            out.append((lambda name: name.rsplit(".", 1)[-1] in qk, self._qk_grad))
            out.append((lambda name: name.endswith("attn.hook_v"), _half_grad))
        return out

    def _embed_leaf(self, act: torch.Tensor, hook: Any) -> torch.Tensor:
        self.embed = act.detach().clone().requires_grad_(True)
        return self.embed

    def _pos_leaf(self, act: torch.Tensor, hook: Any) -> torch.Tensor:
        self.pos_embed = act.detach().clone().requires_grad_(True)
        if self.mode == "attnlrp":  # AttnLRP adds the positions detached (LXT explicit gpt2.py:886-887)
            return self.pos_embed.detach()
        return self.pos_embed

    def _detach_scale(self, act: torch.Tensor, hook: Any) -> torch.Tensor:
        self.scale_hooks.add(str(hook.name))
        return act.detach()

    def _capture_scores(self, act: torch.Tensor, hook: Any) -> torch.Tensor:
        self.scores[_layer_of(hook)] = act
        return act

    def _pattern(self, act: torch.Tensor, hook: Any) -> torch.Tensor:
        self.patterns[_layer_of(hook)] = act
        return act.detach() if self.mode == "cp" else act

    def _qk_grad(self, act: torch.Tensor, hook: Any) -> torch.Tensor:
        # ½ for the bilinear q·kᵀ times ½ for A·V (whose share for A is applied here, below the softmax).
        factor = torch.full((act.shape[-1],), 0.25, dtype=act.dtype, device=act.device)
        if self.rope_aware(_layer_of(hook)):  # ½ more on rotated dims: the other half goes to cos / sin
            factor[: int(self.model.cfg.rotary_dim or act.shape[-1])] = 0.125
        return scale_grad(act, factor)

    def leaves(self) -> list[torch.Tensor]:
        """Every input that receives relevance: embeddings, position leaves, then the biases."""
        out = [t for t in (self.embed, self.pos_embed) if t is not None]
        for cos, sin in self.rotary.values():
            out += [cos, sin]
        return out


class _IdentityActFn:
    """An MLP activation whose backward is the LRP identity rule, times `factor` (½ for a gated MLP's gate)."""

    def __init__(self, act: Any, factor: float) -> None:
        self.act = act
        self.factor = factor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = identity_act(self.act, x)
        return y if self.factor == 1.0 else scale_grad(y, self.factor)


def _half_grad(act: torch.Tensor, hook: Any) -> torch.Tensor:
    return scale_grad(act, 0.5)


def _layer_of(hook: Any) -> int:
    return int(str(hook.name).split(".")[1])


def is_bias(name: str) -> bool:
    """Whether a TL parameter name is an additive bias (b_Q, _b_K, ln.b, b_in, b_out, …)."""
    leaf = name.rsplit(".", 1)[-1]
    return leaf == "b" or leaf.lstrip("_").startswith("b_")


def bias_parameters(model: HookedTransformer, n_blocks: int) -> dict[str, torch.Tensor]:
    """The additive biases of the first `n_blocks` blocks (and the embedding), by name."""
    out: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        parts = name.split(".")
        if not is_bias(name):
            continue
        if parts[0] == "blocks" and int(parts[1]) >= n_blocks:
            continue
        if parts[0] in ("unembed", "ln_final"):
            continue
        out[name] = p
    return out
