"""DePass attribution of one SAE feature (Hong, Jiang et al., "DePass", NeurIPS 2025, arXiv 2510.18462).

    tok = depass_tokens(model, sae, "blocks.3.hook_resid_post", tokens_N, feature=123)      # input tokens
    comp = depass_components(model, sae, "blocks.3.hook_resid_post", tokens_N, feature=123)  # heads and MLPs
    up = depass_upstream(model, sae, hook, tokens_N, 123, upstream_sae, "blocks.1.hook_resid_post")
    tok.scores_N, tok.model_bias, tok.sae_bias      # sum(scores_N) + rest + model_bias + sae_bias == pre_activation

Every score is a component's exact share of the feature's encoder pre-activation at `position` (the activation for
an active feature). The split is exact by construction; what it cannot credit is anything acting through which
positions are attended (QK path) or through gate switching, both frozen (spec A.2.5). Component-level runs are one
decomposition per sublayer, as the paper code does: each run's own scores are complete (rest + parts + biases).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.corpus import default_bos_id
from sae_workbench.errors import CorpusError
from sae_workbench.evaluation.attribution.errors import PositionOutOfRangeError, UnsupportedHookError
from sae_workbench.evaluation.attribution.propagate import (
    MLP_RULES,
    SOFTMAX_TEMPERATURE,
    MlpRule,
    Roles,
    Trace,
    check_sum,
    param,
    propagate,
    step,
    trace_model,
)
from sae_workbench.evaluation.attribution.readout import (
    FeatureReadout,
    check_supported,
    decoder_rows_FD,
    feature_readout,
)
from sae_workbench.models import validate_hooks
from sae_workbench.sae.io import SAEShapeMismatchError

_HOOK_RE = re.compile(
    r"^blocks\.(\d+)\.(hook_resid_pre|hook_resid_mid|hook_resid_post|hook_attn_out|hook_mlp_out)$"
)
# Upstream features kept as their own components; the rest are lumped into "other features" (exact either way).
MAX_UPSTREAM_FEATURES = 64


@dataclass(frozen=True)
class Target:
    """Where an SAE reads the model: a residual state, or the output of the sublayer leaving `state`."""

    hook: str
    block: int
    kind: Literal["state", "attn_out", "mlp_out"]
    state: int
    """The residual state read (kind "state"), or the input state of the sublayer whose output is read."""

    @property
    def n_sublayers(self) -> int:
        """Sublayers whose writes reach the read-out (0 .. n_sublayers-1)."""
        return self.state if self.kind == "state" else self.state + 1


def parse_hook(model: HookedTransformer, hook: str) -> Target:
    """The read-out target of a hook name; raises HookNotFoundError / UnsupportedHookError."""
    validate_hooks(model, [hook])
    match = _HOOK_RE.match(hook)
    if match is None:
        raise UnsupportedHookError(
            f"DePass reads SAEs at blocks.<L>.hook_resid_pre/mid/post, hook_attn_out or hook_mlp_out; got {hook!r}. "
            "Pick an SAE trained on one of those hooks."
        )
    block, name = int(match.group(1)), match.group(2)
    kinds: dict[str, tuple[Literal["state", "attn_out", "mlp_out"], int]] = {
        "hook_resid_pre": ("state", 2 * block),
        "hook_resid_mid": ("state", 2 * block + 1),
        "hook_resid_post": ("state", 2 * block + 2),
        "hook_attn_out": ("attn_out", 2 * block),
        "hook_mlp_out": ("mlp_out", 2 * block + 1),
    }
    kind, state = kinds[name]
    return Target(hook=hook, block=block, kind=kind, state=state)


def check_inputs(
    model: HookedTransformer, sae: SAE[Any], hook: str, tokens_N: torch.Tensor, position: int
) -> int:
    """Validate the SAE, tokens and position; return the position as a non-negative index."""
    check_supported(sae)
    if int(sae.cfg.d_in) != model.cfg.d_model:
        raise SAEShapeMismatchError(
            f"SAE d_in={sae.cfg.d_in} but hook {hook} of model {model.cfg.model_name!r} has d_model="
            f"{model.cfg.d_model}; pick the SAE trained for this model and hook."
        )
    if tokens_N.ndim != 1 or tokens_N.numel() == 0:
        raise PositionOutOfRangeError(
            f"tokens must be one non-empty 1-D tensor of token ids (got shape {tuple(tokens_N.shape)}); "
            "attribute one text at a time (model.to_tokens(text)[0])."
        )
    n = tokens_N.numel()
    if not -n <= position < n:
        raise PositionOutOfRangeError(
            f"position {position} is outside the text's {n} tokens (0..{n - 1} or -1)."
        )
    return position % n


def _readout_at(
    model: HookedTransformer,
    trace: Trace,
    target: Target,
    C_MND: torch.Tensor,
    start: int,
    roles: Roles,
    rule: MlpRule,
    temperature: float,
    t: int,
) -> torch.Tensor:
    """Decompose from residual state `start` to the target hook; the components there at position t (M, D)."""
    at = slice(t, t + 1)
    if target.kind == "state":
        return propagate(model, trace, C_MND, start, target.state, roles, rule, temperature, keep=t)[:, 0]
    if start > target.state:  # the decomposition starts at the sublayer output itself (its own heads / MLP)
        out_MND = C_MND[:, at]
    elif target.kind == "attn_out":  # attention reads every position of its input state
        C_MND = propagate(model, trace, C_MND, start, target.state, roles, rule, temperature)
        out_MND = step(model, trace, target.state, C_MND, roles, rule, temperature, at)
    else:
        C_MND = propagate(model, trace, C_MND, start, target.state, roles, rule, temperature, keep=t)
        out_MND = step(model, trace, target.state, C_MND, roles, rule, temperature, at)
    check_sum(out_MND, trace.acts[target.hook][at], target.hook)
    return out_MND[:, 0]


def _clean_at(trace: Trace, target: Target) -> torch.Tensor:
    """The clean hook activation (N, D)."""
    return trace.state(target.state) if target.kind == "state" else trace.acts[target.hook]


def _activation(sae: SAE[Any], x_D: torch.Tensor, feature: int) -> float:
    """The SAE's own activation of `feature` at one position."""
    with torch.no_grad():
        return float(sae.encode(x_D[None].to(sae.dtype))[0, feature])


def _json_value(value: Any) -> Any:
    """A field as a JSON value (tuples, nested ones too, become lists)."""
    return [_json_value(v) for v in value] if isinstance(value, tuple) else value


@dataclass(frozen=True)
class DePassResult:
    """What every DePass result holds: the feature and position it splits, how, and the pre-activation it splits
    (the token, component and upstream results add their own scores)."""

    feature: int
    hook: str
    position: int
    """Target position t (the text is cut after it: later tokens cannot matter)."""
    rule: str
    """MLP rule used (softmax, up_linear, gate_linear)."""
    temperature: float
    """Softmax-rule temperature (arXiv 2510.18462 default 0.1; unused by the linear rules)."""
    sae_bias: float
    """The encoder's constant: b_enc - apply_b_dec_to_input · b_dec · W_enc (times the TopK decoder norm)."""
    pre_activation: float
    activation: float
    """The SAE's activation at t; equals pre_activation when the feature is active."""
    completeness_error: float
    """How far the scores miss pre_activation: |their sum − pre_activation| (the component result: the largest over
    its runs)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return {k: _json_value(v) for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class TokenAttribution(DePassResult):
    """Each input token's exact share of a feature's pre-activation at one position
    (sum(scores_N) + rest + model_bias + sae_bias == pre_activation)."""

    token_ids_N: tuple[int, ...]
    scores_N: tuple[float, ...]
    """Share of token n (n = 0..t); BOS, if `bos_position` is 0, is the attention sink."""
    bos_position: int | None
    rest: float
    """The residual component's share (zero unless the softmax rule finds no share-holder)."""
    model_bias: float
    """Share of the model's biases (LayerNorm b, b_V, b_O, b_in, b_out)."""


class _Setup(NamedTuple):
    """What every DePass level starts from."""

    t: int
    target: Target
    readout: FeatureReadout
    tokens_N: torch.Tensor
    """The text cut after position t, on the model's device."""
    trace: Trace


def _prepare(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    tokens_N: torch.Tensor,
    feature: int,
    position: int,
    rule: str,
) -> _Setup:
    """Validate the request, cut the text after the target position and trace the clean forward."""
    if rule not in MLP_RULES:
        raise ValueError(f"unknown MLP rule {rule!r}; use one of {MLP_RULES}")
    t = check_inputs(model, sae, hook, tokens_N, position)
    target = parse_hook(model, hook)
    readout = feature_readout(sae, feature)
    tokens_N = tokens_N[: t + 1].to(model.cfg.device)
    return _Setup(t, target, readout, tokens_N, trace_model(model, tokens_N, target.block))


def bos_ids(tokenizer: Any) -> frozenset[int]:
    """Token ids that make position 0 a BOS: the index's window separator (`default_bos_id`) and the tokenizer's BOS.

    SmolLM2 declares `<|im_start|>` (1) as BOS, but every indexed window starts with `<|endoftext|>` (0), the
    separator the corpus puts between documents; both are the attention sink when they come first.
    """
    if tokenizer is None:
        return frozenset()
    ids = {getattr(tokenizer, "bos_token_id", None)}
    try:
        ids.add(default_bos_id(tokenizer))
    except (AttributeError, CorpusError):  # a tokenizer without the separator lookups or any BOS-like token
        pass
    return frozenset(int(i) for i in ids if isinstance(i, int))


def bos_position(model: HookedTransformer, tokens_N: torch.Tensor) -> int | None:
    """0 when the text starts with a BOS (`bos_ids`: the index's window separator or the tokenizer's BOS), else None."""
    return 0 if tokens_N.numel() and int(tokens_N[0]) in bos_ids(model.tokenizer) else None


def depass_tokens(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    tokens_N: torch.Tensor,
    feature: int,
    position: int = -1,
    rule: MlpRule = "softmax",
    temperature: float = SOFTMAX_TEMPERATURE,
    ignore_bos: bool = True,
) -> TokenAttribution:
    """Token-level DePass: C[m, n] = δ(m, n)·embedding[n], propagated to the hook and read by the feature."""
    t, target, readout, tokens_N, trace = _prepare(model, sae, hook, tokens_N, feature, position, rule)
    N = t + 1
    bos = bos_position(model, tokens_N)
    roles = Roles(rest=N, bias=N + 1, bos=bos if ignore_bos else None)
    embed_ND = trace.state(0)
    C_MND = torch.zeros(N + 2, N, embed_ND.shape[-1])
    C_MND[torch.arange(N), torch.arange(N)] = embed_ND
    parts_MD = _readout_at(model, trace, target, C_MND, 0, roles, rule, temperature, t)
    x_D = _clean_at(trace, target)[t]
    scores_M = readout.component_scores(parts_MD, x_D)
    pre = float(readout.pre_activation_N(x_D[None])[0])
    total = float(scores_M.sum()) + readout.bias
    return TokenAttribution(
        feature=feature,
        hook=hook,
        position=t,
        rule=rule,
        temperature=temperature,
        token_ids_N=tuple(int(i) for i in tokens_N.tolist()),
        scores_N=tuple(float(s) for s in scores_M[:N].tolist()),
        bos_position=bos,
        rest=float(scores_M[roles.rest]),
        model_bias=float(scores_M[roles.bias]),
        sae_bias=readout.bias,
        pre_activation=pre,
        activation=_activation(sae, x_D, feature),
        completeness_error=abs(total - pre),
    )


@dataclass(frozen=True)
class ComponentAttribution(DePassResult):
    """Each attention head's and MLP's share of a feature's pre-activation, one exact DePass run per sublayer.

    Run for block ℓ's attention: components [resid_pre_ℓ (rest), head 0 .. H-1 outputs, bias (b_O)] at resid_mid_ℓ;
    run for block ℓ's MLP: [resid_mid_ℓ (rest), MLP output, bias] at resid_post_ℓ; both carried to the hook. Within
    a run, rest + parts + bias + sae_bias = pre_activation. Under the linear rules a head's score does not depend on
    the other components, so the runs agree with one joint pass; under softmax they do not (spec A.3).
    """

    head_scores_LH: tuple[tuple[float, ...], ...]
    """Head h of block ℓ, for the blocks whose attention writes before the hook."""
    head_rest_L: tuple[float, ...]
    """Share of resid_pre_ℓ (everything before block ℓ's attention) in the head run of block ℓ."""
    head_bias_L: tuple[float, ...]
    mlp_scores_L: tuple[float, ...]
    """The MLP of block ℓ, for the blocks whose MLP writes before the hook."""
    mlp_rest_L: tuple[float, ...]
    mlp_bias_L: tuple[float, ...]
    embed_score: float
    """The embeddings' share when block 0's heads are split off (head_rest_L[0])."""

    def ranked(self) -> list[tuple[str, float]]:
        """All heads ("L1.H3") and MLPs ("L1.MLP") by decreasing score."""
        items = [
            (f"L{ell}.H{h}", s) for ell, row in enumerate(self.head_scores_LH) for h, s in enumerate(row)
        ]
        items += [(f"L{ell}.MLP", s) for ell, s in enumerate(self.mlp_scores_L)]
        return sorted(items, key=lambda kv: -kv[1])


def head_outputs_NHD(model: HookedTransformer, trace: Trace, layer: int) -> torch.Tensor:
    """Each head's clean write to the residual stream (N, H, D), without b_O."""
    z_NHE = trace.acts[f"blocks.{layer}.attn.hook_z"]
    W_O_HED = param(model.blocks[layer].attn, "W_O")
    return torch.einsum("nhe,hed->nhd", z_NHE, W_O_HED)


def depass_components(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    tokens_N: torch.Tensor,
    feature: int,
    position: int = -1,
    rule: MlpRule = "softmax",
    temperature: float = SOFTMAX_TEMPERATURE,
) -> ComponentAttribution:
    """Component-level DePass: one run per attention (heads split) and per MLP of the blocks before the hook."""
    t, target, readout, tokens_N, trace = _prepare(model, sae, hook, tokens_N, feature, position, rule)
    x_D = _clean_at(trace, target)[t]
    pre = float(readout.pre_activation_N(x_D[None])[0])
    heads: list[tuple[float, ...]] = []
    head_rest: list[float] = []
    head_bias: list[float] = []
    mlps: list[float] = []
    mlp_rest: list[float] = []
    mlp_bias: list[float] = []
    worst = 0.0
    for sub in range(target.n_sublayers):
        layer, is_mlp = divmod(sub, 2)
        before_ND = trace.state(sub)
        if is_mlp:
            parts = [before_ND, trace.acts[f"blocks.{layer}.hook_mlp_out"]]
        else:
            head_NHD = head_outputs_NHD(model, trace, layer)
            parts = [before_ND, *head_NHD.unbind(1)]
        C_MND = torch.stack([*parts, torch.zeros_like(before_ND)])
        if not is_mlp:
            C_MND[-1] += param(model.blocks[layer].attn, "b_O")
        if target.kind != "state" and sub == target.state:
            C_MND[0] = 0.0  # the read-out is this sublayer's output: its input is not part of it
        roles = Roles(rest=0, bias=C_MND.shape[0] - 1)
        parts_MD = _readout_at(model, trace, target, C_MND, sub + 1, roles, rule, temperature, t)
        scores_M = readout.component_scores(parts_MD, x_D)
        worst = max(worst, abs(float(scores_M.sum()) + readout.bias - pre))
        rest, bias, inner = float(scores_M[0]), float(scores_M[-1]), scores_M[1:-1].tolist()
        if is_mlp:
            mlps.append(inner[0])
            mlp_rest.append(rest)
            mlp_bias.append(bias)
        else:
            heads.append(tuple(inner))
            head_rest.append(rest)
            head_bias.append(bias)
    embed = head_rest[0] if head_rest else pre - readout.bias
    return ComponentAttribution(
        feature=feature,
        hook=hook,
        position=t,
        rule=rule,
        temperature=temperature,
        head_scores_LH=tuple(heads),
        head_rest_L=tuple(head_rest),
        head_bias_L=tuple(head_bias),
        mlp_scores_L=tuple(mlps),
        mlp_rest_L=tuple(mlp_rest),
        mlp_bias_L=tuple(mlp_bias),
        embed_score=embed,
        sae_bias=readout.bias,
        pre_activation=pre,
        activation=_activation(sae, x_D, feature),
        completeness_error=worst,
    )


@dataclass(frozen=True)
class UpstreamAttribution(DePassResult):
    """Each upstream SAE feature's exact share of a downstream feature's pre-activation.

    Components at the upstream hook: a_j[n]·W_dec[j] for the selected features (all positions after BOS), the other
    active features together, b_dec, the BOS position's whole state, and the upstream SAE's error (its own component).
    """

    upstream_hook: str
    upstream_features_K: tuple[int, ...]
    scores_K: tuple[float, ...]
    other_features: float
    b_dec: float
    bos: float
    sae_error: float
    model_bias: float


def depass_upstream(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    tokens_N: torch.Tensor,
    feature: int,
    upstream_sae: SAE[Any],
    upstream_hook: str,
    position: int = -1,
    rule: MlpRule = "softmax",
    temperature: float = SOFTMAX_TEMPERATURE,
    max_features: int = MAX_UPSTREAM_FEATURES,
) -> UpstreamAttribution:
    """Upstream-feature DePass: split the state at `upstream_hook` by `upstream_sae`'s features and carry it."""
    if rule not in MLP_RULES:
        raise ValueError(f"unknown MLP rule {rule!r}; use one of {MLP_RULES}")
    t = check_inputs(model, sae, hook, tokens_N, position)
    check_inputs(model, upstream_sae, upstream_hook, tokens_N, position)
    target = parse_hook(model, hook)
    up = parse_hook(model, upstream_hook)
    if up.kind != "state" or up.state >= target.n_sublayers + (target.kind == "state"):
        raise UnsupportedHookError(
            f"the upstream hook {upstream_hook!r} must be a residual hook (resid_pre/mid/post) before {hook!r}."
        )
    if upstream_sae.cfg.normalize_activations not in ("none", "expected_average_only_in"):
        raise UnsupportedHookError(
            "the upstream SAE normalises its input at run time; fold the normalisation into its weights first."
        )
    readout = feature_readout(sae, feature)
    tokens_N = tokens_N[: t + 1].to(model.cfg.device)
    trace = trace_model(model, tokens_N, target.block)
    x_ND = trace.state(up.state)
    N = t + 1
    first = 1 if bos_position(model, tokens_N) == 0 else 0
    with torch.no_grad():
        acts_NF = upstream_sae.encode(x_ND.to(upstream_sae.dtype)).float()
    acts_NF[:first] = 0.0
    W_dec_FD = decoder_rows_FD(upstream_sae).float()
    mass_F = (acts_NF.abs().sum(0)) * W_dec_FD.norm(dim=-1)
    active = torch.nonzero(mass_F > 0).flatten()
    chosen = active[torch.argsort(mass_F[active], descending=True)[:max_features]]
    K = chosen.numel()
    D = x_ND.shape[-1]
    # Components: K features, other features, b_dec, bos, error (rest), bias.
    C_MND = torch.zeros(K + 5, N, D)
    C_MND[:K] = acts_NF[:, chosen].T[:, :, None] * W_dec_FD[chosen][:, None, :]
    others_NF = acts_NF.clone()
    others_NF[:, chosen] = 0.0
    C_MND[K] = others_NF @ W_dec_FD
    C_MND[K + 1, first:] = upstream_sae.b_dec.detach().float()
    C_MND[K + 2, :first] = x_ND[:first]
    C_MND[K + 3] = x_ND - C_MND[: K + 3].sum(0)
    roles = Roles(rest=K + 3, bias=K + 4)
    parts_MD = _readout_at(model, trace, target, C_MND, up.state, roles, rule, temperature, t)
    x_D = _clean_at(trace, target)[t]
    scores_M = readout.component_scores(parts_MD, x_D)
    pre = float(readout.pre_activation_N(x_D[None])[0])
    return UpstreamAttribution(
        feature=feature,
        hook=hook,
        upstream_hook=upstream_hook,
        position=t,
        rule=rule,
        temperature=temperature,
        upstream_features_K=tuple(int(j) for j in chosen.tolist()),
        scores_K=tuple(float(s) for s in scores_M[:K].tolist()),
        other_features=float(scores_M[K]),
        b_dec=float(scores_M[K + 1]),
        bos=float(scores_M[K + 2]),
        sae_error=float(scores_M[K + 3]),
        model_bias=float(scores_M[K + 4]),
        sae_bias=readout.bias,
        pre_activation=pre,
        activation=_activation(sae, x_D, feature),
        completeness_error=abs(float(scores_M.sum()) + readout.bias - pre),
    )
