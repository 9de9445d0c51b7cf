"""Causal effects of one SAE feature: ablation in the SAE-spliced forward, and steering along its decoder row.

    ab = ablate_feature(model, sae, "blocks.3.hook_resid_post", tokens_BN, feature=123, mode="zero")
    ab.mean_delta_loss_fired, ab.promoted[:5]
    st = steer_feature(model, sae, "blocks.3.hook_resid_post", prompt_N, feature=123, alphas=(-5.0, 5.0, 10.0))
    st.effects[1].continuation

The spliced forward replaces the hook state x by decode(a') + (x − decode(a)): the SAE error term is kept, so with
a' = a it is the clean forward and only the ablated feature's change reaches the loss. Steering adds
alpha · W_dec[k] (the row `decode` applies, so alpha is in the feature's activation units) at every position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.evaluation.attribution.errors import FeatureOutOfRangeError, PositionOutOfRangeError
from sae_workbench.evaluation.attribution.readout import check_supported, decoder_rows_FD
from sae_workbench.models import validate_hooks
from sae_workbench.sae.io import SAEShapeMismatchError

AblationMode = Literal["zero", "mean"]
TOP_TOKENS = 10
DEFAULT_ALPHAS = (-5.0, 5.0, 10.0)
DEFAULT_NEW_TOKENS = 12


@dataclass(frozen=True)
class TokenShift:
    """A vocabulary token and its mean logit change."""

    token_id: int
    token: str
    logit_change: float


@dataclass(frozen=True)
class AblationEffect:
    """What removing a feature does to next-token predictions (losses in nats)."""

    feature: int
    hook: str
    mode: str
    """zero: a_k → 0 where it fires; mean: a_k → `value` at every position."""
    value: float
    fired_BN: tuple[tuple[bool, ...], ...]
    """Whether the feature is active (> 0) at each position."""
    delta_loss_BN: tuple[tuple[float, ...], ...]
    """Ablated minus clean next-token loss at positions 0..N-2 (position n predicts token n+1)."""
    kl_BN: tuple[tuple[float, ...], ...]
    """KL(clean ‖ ablated) of the next-token distribution at each position."""
    mean_delta_loss: float
    mean_delta_loss_fired: float
    """Mean over positions where the feature fires (NaN when it never fires)."""
    mean_kl: float
    promoted: tuple[TokenShift, ...]
    """Tokens whose logit the feature raises most (clean − ablated, mean over affected positions)."""
    suppressed: tuple[TokenShift, ...]
    splice_max_logit_error: float
    """max |spliced − clean| logits without ablation (should be ~1e-5: the error term is kept)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return _jsonable(dataclasses.asdict(self))


@dataclass(frozen=True)
class SteeringEffect:
    """One steering strength: its effect on the prompt's predictions and a greedy continuation."""

    alpha: float
    mean_delta_loss: float
    mean_kl: float
    promoted: tuple[TokenShift, ...]
    suppressed: tuple[TokenShift, ...]
    continuation_ids: tuple[int, ...]
    continuation: str


@dataclass(frozen=True)
class SteeringResult:
    """Steering a feature at several strengths from one prompt."""

    feature: int
    hook: str
    prompt_ids: tuple[int, ...]
    baseline_continuation: str
    effects: tuple[SteeringEffect, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return _jsonable(dataclasses.asdict(self))


def _jsonable(obj: Any) -> Any:
    """Tuples to lists, recursively (asdict already turned dataclasses into dicts)."""
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


def _check(model: HookedTransformer, sae: SAE[Any], hook: str, feature: int) -> None:
    """Validate hook (exists), SAE (d_model wide, linear encoder input) and feature."""
    validate_hooks(model, [hook])
    check_supported(sae)
    if int(sae.cfg.d_in) != model.cfg.d_model:
        raise SAEShapeMismatchError(
            f"SAE d_in={sae.cfg.d_in} but model {model.cfg.model_name!r} has d_model={model.cfg.d_model}; "
            f"ablation and steering splice SAEs on d_model-wide hooks: pick the SAE trained for {hook}."
        )
    if not 0 <= feature < int(sae.cfg.d_sae):
        raise FeatureOutOfRangeError(
            f"feature {feature} is out of range: this SAE has features 0..{sae.cfg.d_sae - 1}."
        )


def _decode(model: HookedTransformer, ids: list[int]) -> str:
    """The text of token ids (the ids themselves for a model without tokenizer)."""
    if model.tokenizer is None:
        return " ".join(map(str, ids))
    return str(model.tokenizer.decode(ids))


def _shifts(
    model: HookedTransformer, change_V: torch.Tensor
) -> tuple[tuple[TokenShift, ...], tuple[TokenShift, ...]]:
    """The most raised and most lowered tokens of a mean logit change (V,)."""
    top = torch.topk(change_V, TOP_TOKENS)
    bottom = torch.topk(-change_V, TOP_TOKENS)
    up = tuple(
        TokenShift(int(i), _decode(model, [int(i)]), float(v))
        for v, i in zip(top.values, top.indices, strict=True)
    )
    down = tuple(
        TokenShift(int(i), _decode(model, [int(i)]), -float(v))
        for v, i in zip(bottom.values, bottom.indices, strict=True)
    )
    return up, down


def _losses_BN(logits_BNV: torch.Tensor, tokens_BN: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy at positions 0..N-2, shape (B, N-1)."""
    logp = logits_BNV[:, :-1].log_softmax(-1)
    return -logp.gather(-1, tokens_BN[:, 1:, None])[..., 0]


def _kl_BN(clean_BNV: torch.Tensor, other_BNV: torch.Tensor) -> torch.Tensor:
    """KL(clean ‖ other) per position, shape (B, N)."""
    p = clean_BNV.log_softmax(-1)
    q = other_BNV.log_softmax(-1)
    return (p.exp() * (p - q)).sum(-1)


def _run(
    model: HookedTransformer, tokens_BN: torch.Tensor, hook: str, fn: Callable[..., Any] | None
) -> torch.Tensor:
    """Full-model logits (float32), with an optional hook function at `hook`."""
    hooks: list[tuple[str | Callable[..., Any], Callable[..., Any]]] = [(hook, fn)] if fn is not None else []
    with torch.no_grad():
        return model.run_with_hooks(tokens_BN, fwd_hooks=hooks).float()


def ablate_feature(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    tokens_BN: torch.Tensor,
    feature: int,
    mode: AblationMode = "zero",
    mean_value: float | None = None,
) -> AblationEffect:
    """Zero- or mean-ablate `feature` in the SAE-spliced forward and measure loss, KL and logit shifts."""
    _check(model, sae, hook, feature)
    if tokens_BN.ndim != 2 or tokens_BN.shape[1] < 2:
        raise PositionOutOfRangeError(
            f"tokens must be a (batch, n ≥ 2) tensor of token ids, got shape {tuple(tokens_BN.shape)}; "
            "use model.to_tokens(texts)."
        )
    fired: dict[str, torch.Tensor] = {}

    def splice(new_value: Callable[[torch.Tensor], torch.Tensor] | None) -> Callable[..., torch.Tensor]:
        def fn(x: torch.Tensor, hook: Any) -> torch.Tensor:
            with torch.no_grad():
                acts = sae.encode(x.to(sae.dtype))
                recon = sae.decode(acts)
                error = x.to(sae.dtype) - recon
                fired["acts"] = acts[..., feature]
                if new_value is not None:
                    acts = sae.encode(x.to(sae.dtype))  # re-encode: normalising SAEs keep per-call state
                    acts[..., feature] = new_value(acts[..., feature])
                    recon = sae.decode(acts)
                return (recon + error).to(x.dtype)

        return fn

    clean_BNV = _run(model, tokens_BN, hook, None)
    spliced_BNV = _run(model, tokens_BN, hook, splice(None))
    acts_BN = fired["acts"].float()
    if mode == "zero":
        value = 0.0
    elif mode == "mean":
        value = float(acts_BN[:, 1:].mean()) if mean_value is None else float(mean_value)
    else:
        raise ValueError(f"unknown ablation mode {mode!r}; use 'zero' or 'mean'.")
    ablated_BNV = _run(model, tokens_BN, hook, splice(lambda a: torch.full_like(a, value)))
    fired_BN = acts_BN > 0
    delta_BN = _losses_BN(ablated_BNV, tokens_BN) - _losses_BN(clean_BNV, tokens_BN)
    kl_BN = _kl_BN(clean_BNV, ablated_BNV)
    fired_pred = fired_BN[:, :-1]
    affected_BN = fired_BN if mode == "zero" else torch.ones_like(fired_BN)
    change_V = (
        (clean_BNV - ablated_BNV)[affected_BN].mean(0)
        if affected_BN.any()
        else torch.zeros(clean_BNV.shape[-1])
    )
    promoted, suppressed = _shifts(model, change_V)
    return AblationEffect(
        feature=feature,
        hook=hook,
        mode=mode,
        value=value,
        fired_BN=tuple(tuple(bool(v) for v in row) for row in fired_BN.tolist()),
        delta_loss_BN=tuple(tuple(row) for row in delta_BN.tolist()),
        kl_BN=tuple(tuple(row) for row in kl_BN.tolist()),
        mean_delta_loss=float(delta_BN.mean()),
        mean_delta_loss_fired=float(delta_BN[fired_pred].mean()) if fired_pred.any() else float("nan"),
        mean_kl=float(kl_BN.mean()),
        promoted=promoted,
        suppressed=suppressed,
        splice_max_logit_error=float((spliced_BNV - clean_BNV).abs().max()),
    )


def _greedy(
    model: HookedTransformer, prompt_N: torch.Tensor, hook: str, fn: Callable[..., Any] | None, n_new: int
) -> list[int]:
    """Greedy continuation of `n_new` tokens with the hook active at every position."""
    tokens = prompt_N[None]
    out: list[int] = []
    for _ in range(n_new):
        nxt = int(_run(model, tokens, hook, fn)[0, -1].argmax())
        out.append(nxt)
        tokens = torch.cat([tokens, torch.tensor([[nxt]], device=tokens.device)], dim=1)
    return out


def steer_feature(
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    prompt_N: torch.Tensor,
    feature: int,
    alphas: tuple[float, ...] = DEFAULT_ALPHAS,
    n_new: int = DEFAULT_NEW_TOKENS,
) -> SteeringResult:
    """Add alpha·W_dec[k] at `hook` for each alpha: loss/KL/logit shifts on the prompt and a greedy continuation."""
    _check(model, sae, hook, feature)
    if prompt_N.ndim != 1 or prompt_N.numel() < 2:
        raise PositionOutOfRangeError(
            "the prompt must be a 1-D tensor of at least 2 token ids (model.to_tokens(text)[0])."
        )
    direction_D = decoder_rows_FD(sae)[feature].float()
    tokens_BN = prompt_N[None]
    clean_BNV = _run(model, tokens_BN, hook, None)
    clean_loss = _losses_BN(clean_BNV, tokens_BN)

    def adder(alpha: float) -> Callable[..., torch.Tensor]:
        def fn(x: torch.Tensor, hook: Any) -> torch.Tensor:
            return x + (alpha * direction_D).to(x.dtype)

        return fn

    effects = []
    for alpha in alphas:
        steered_BNV = _run(model, tokens_BN, hook, adder(alpha))
        change_V = (steered_BNV - clean_BNV)[0].mean(0)
        promoted, suppressed = _shifts(model, change_V)
        ids = _greedy(model, prompt_N, hook, adder(alpha), n_new)
        effects.append(
            SteeringEffect(
                alpha=alpha,
                mean_delta_loss=float((_losses_BN(steered_BNV, tokens_BN) - clean_loss).mean()),
                mean_kl=float(_kl_BN(clean_BNV, steered_BNV).mean()),
                promoted=promoted,
                suppressed=suppressed,
                continuation_ids=tuple(ids),
                continuation=_decode(model, ids),
            )
        )
    return SteeringResult(
        feature=feature,
        hook=hook,
        prompt_ids=tuple(int(i) for i in prompt_N.tolist()),
        baseline_continuation=_decode(model, _greedy(model, prompt_N, hook, None, n_new)),
        effects=tuple(effects),
    )
