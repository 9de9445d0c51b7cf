"""Value functions of one SAE feature under masks (specs/attribution.md B.3): v(x) = the feature's activation at a
target position with the masked players removed, x_i = 1 keeping player i. The forward stops at the SAE's block.

- tokens: players are the tokens before the target (BOS and the target always kept); a masked token's embedding at
  `hook_embed` becomes a mask embedding (the tokenizer's unk, else eos, else pad, or the mean embedding), so
  positions and rotary phases are unchanged, as in the authors' [UNK] substitution (spectral-explain modelloader.py).
- heads: players are the attention heads whose output reaches the hook; a masked head's `hook_z` is zeroed or set to
  its mean over this text's positions (the paper's head-interaction study).
- upstream: players are the most active features of an SAE at a lower residual hook; a masked feature's a_j W_dec[j]
  is dropped from the state there (the SAE splice with the error term kept: reconstruction + error = the state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.corpus import default_bos_id
from sae_workbench.defaults import INTERACTION_MASK as DEFAULT_MASK
from sae_workbench.errors import CorpusError
from sae_workbench.evaluation.attribution.depass import (
    MAX_UPSTREAM_FEATURES,
    Target,
    bos_position,
    check_inputs,
    parse_hook,
)
from sae_workbench.evaluation.attribution.readout import decoder_rows_FD, feature_readout
from sae_workbench.evaluation.interactions.errors import PlayerError
from sae_workbench.models import stop_layer

PLAYER_TYPES = ("tokens", "heads", "upstream")
MASKS = ("auto", "unk", "mean")
HEAD_ABLATIONS = ("zero", "mean")
VALUES = ("post", "pre")
BATCH = 256
"""Masks per forward (specs/attribution.md B.3)."""

Hooks = list[tuple[str, Callable[..., Any]]]


@dataclass
class FeatureGame:
    """A feature's activation at one position as a function of bool masks (B, n) over `labels`."""

    model: HookedTransformer
    sae: SAE[Any]
    hook: str
    tokens_N: torch.Tensor
    """The text cut after the target position."""
    feature: int
    labels: list[str]
    make_hooks: Callable[[torch.Tensor], Hooks]
    """The masking hooks for a bool batch of masks (B, n)."""
    value: str = "post"
    batch_size: int = BATCH
    settings: dict[str, Any] = field(default_factory=lambda: dict[str, Any]())
    """How players are masked (stored with the result)."""
    player_type: str = "tokens"

    def meta(self, position: int) -> dict[str, Any]:
        """What the game is, stored beside its result (`position` in the caller's text)."""
        return {
            "feature": self.feature, "hook": self.hook, "position": position, "player_type": self.player_type,
            "value": self.value, "token_ids": [int(t) for t in self.tokens_N.tolist()], **self.settings,
        }  # fmt: skip

    @property
    def n(self) -> int:
        """Number of players."""
        return len(self.labels)

    @torch.no_grad()
    def __call__(self, masks: np.ndarray) -> np.ndarray:
        """v(x) for each mask row (B,), in batches."""
        masks_BP = torch.as_tensor(np.asarray(masks, dtype=bool))
        out = [
            self._batch(masks_BP[i : i + self.batch_size]) for i in range(0, len(masks_BP), self.batch_size)
        ]
        return torch.cat(out).numpy().astype(float) if out else np.zeros(0)

    def _batch(self, masks_BP: torch.Tensor) -> torch.Tensor:
        """One forward of up to `batch_size` masks to the SAE hook; the feature's value at the last position."""
        grabbed: dict[str, torch.Tensor] = {}

        def grab(act: torch.Tensor, hook: Any) -> None:
            grabbed["x"] = act[:, -1].float()

        tokens_BN = self.tokens_N[None].expand(len(masks_BP), -1)
        self.model.run_with_hooks(
            tokens_BN, fwd_hooks=[*self.make_hooks(masks_BP), (self.hook, grab)],
            stop_at_layer=stop_layer([self.hook], self.model.cfg.n_layers), return_type=None,
        )  # fmt: skip
        x_BD = grabbed["x"]
        if self.value == "pre":
            return feature_readout(self.sae, self.feature).pre_activation_N(x_BD).cpu()
        return self.sae.encode(x_BD.to(self.sae.dtype))[:, self.feature].float().cpu()


def first_player(model: HookedTransformer, tokens_N: torch.Tensor) -> int:
    """1 when the text starts with a BOS (`depass.bos_position`: the index's window separator or the tokenizer's BOS),
    else 0."""
    return 0 if bos_position(model, tokens_N) is None else 1


def _decode(model: HookedTransformer, ids: list[int]) -> str:
    """A token's text (its id for a model without tokenizer)."""
    return str(model.tokenizer.decode(ids)) if model.tokenizer is not None else str(ids[0])


def mask_embedding(model: HookedTransformer, mask: str) -> tuple[torch.Tensor, str]:
    """The embedding a masked token gets and its name: `unk` = unk, else eos, else pad token; `mean` = the mean
    embedding; `auto` = unk if the tokenizer has one of its own (not also its eos/bos/pad), else the mean embedding."""
    _choice("mask", mask, MASKS)
    W_E = model.W_E.detach()
    tok = model.tokenizer
    names: tuple[str, ...] = ("unk_token_id", "eos_token_id", "pad_token_id")
    if mask == "mean" or (mask == "auto" and not _dedicated_unk(tok)):
        names = ()
    for name in names:
        token_id = getattr(tok, name, None) if tok is not None else None
        if token_id is not None:
            return W_E[int(token_id)], f"{name[:-9]} {_decode(model, [int(token_id)])!r}"
    return W_E.mean(0), "mean embedding"


def _dedicated_unk(tokenizer: Any) -> bool:
    """Whether the tokenizer has an unk token that is not also its eos, bos, pad or document separator (SmolLM2's unk
    is <|endoftext|>, the separator its pre-training put between documents)."""
    unk = getattr(tokenizer, "unk_token_id", None) if tokenizer is not None else None
    if unk is None:
        return False
    others = {getattr(tokenizer, f"{n}_token_id", None) for n in ("eos", "bos", "pad")}
    try:
        others.add(default_bos_id(tokenizer))
    except (AttributeError, CorpusError):  # a tokenizer without the separator lookups
        pass
    return unk not in others


def _choice(name: str, got: str, allowed: tuple[str, ...]) -> None:
    """Raise ValueError unless `got` is one of `allowed`."""
    if got not in allowed:
        raise ValueError(f"unknown {name} {got!r}; use one of {allowed}")


def _prepare(
    model: HookedTransformer, sae: SAE[Any], hook: str, tokens_N: torch.Tensor, feature: int, position: int,
    value: str,
) -> tuple[torch.Tensor, Target]:  # fmt: skip
    """Validate, cut the text after the target and parse the hook."""
    _choice("value", value, VALUES)
    t = check_inputs(model, sae, hook, tokens_N, position)
    feature_readout(sae, feature)  # validates the feature index
    return tokens_N[: t + 1].to(model.cfg.device), parse_hook(model, hook)


def token_game(
    model: HookedTransformer, sae: SAE[Any], hook: str, tokens_N: torch.Tensor, feature: int,
    position: int = -1, value: str = "post", mask: str = DEFAULT_MASK, batch_size: int = BATCH, include_target: bool = False,
) -> FeatureGame:  # fmt: skip
    """Players: the tokens before the target (BOS kept); masked = the mask embedding at hook_embed.

    `include_target` also makes the target token a player (its embedding masked, its position kept), so a term
    like ("river", " bank") at " bank" itself is measurable; the spec's default keeps the target (B.3)."""
    _choice("mask", mask, MASKS)
    tokens_N, _ = _prepare(model, sae, hook, tokens_N, feature, position, value)
    first = first_player(model, tokens_N)
    players = list(range(first, len(tokens_N) - (0 if include_target else 1)))
    if len(players) < 2:
        raise PlayerError(f"only {len(players)} token(s) before the target: pick a later position.")
    mask_D, mask_name = mask_embedding(model, mask)
    idx = torch.tensor(players)

    def make_hooks(masks_BP: torch.Tensor) -> Hooks:
        def put(embed_BND: torch.Tensor, hook: Any) -> torch.Tensor:
            embed_BND = embed_BND.clone()
            drop_BP = ~masks_BP.to(embed_BND.device)
            sub = embed_BND[:, idx]
            sub[drop_BP] = mask_D.to(embed_BND.dtype)
            embed_BND[:, idx] = sub
            return embed_BND

        return [("hook_embed", put)]

    labels = [_decode(model, [int(tokens_N[p])]) for p in players]
    settings = {"mask": mask_name, "positions": players}
    return FeatureGame(
        model, sae, hook, tokens_N, feature, labels, make_hooks, value, batch_size, settings, "tokens"
    )


def head_game(
    model: HookedTransformer, sae: SAE[Any], hook: str, tokens_N: torch.Tensor, feature: int,
    position: int = -1, value: str = "post", ablation: str = "zero", batch_size: int = BATCH,
) -> FeatureGame:  # fmt: skip
    """Players: every (layer, head) whose output reaches the hook; masked = zero or mean ablation of hook_z."""
    _choice("head ablation", ablation, HEAD_ABLATIONS)
    tokens_N, target = _prepare(model, sae, hook, tokens_N, feature, position, value)
    layers = [ell for ell in range(target.block + 1) if 2 * ell < target.n_sublayers]
    H = model.cfg.n_heads
    means: dict[int, torch.Tensor] = {}
    if ablation == "mean":
        names = {f"blocks.{ell}.attn.hook_z" for ell in layers}
        with torch.no_grad():
            _, cache = model.run_with_cache(
                tokens_N[None],
                names_filter=lambda k: k in names,
                stop_at_layer=stop_layer([hook], model.cfg.n_layers),
            )
        means = {ell: cache[f"blocks.{ell}.attn.hook_z"][0].mean(0) for ell in layers}

    def make_hooks(masks_BP: torch.Tensor) -> Hooks:
        hooks: Hooks = []
        for j, ell in enumerate(layers):

            def ablate(z_BNHd: torch.Tensor, hook: Any, j: int = j, ell: int = ell) -> torch.Tensor:
                drop_BH = ~masks_BP[:, j * H : (j + 1) * H].to(z_BNHd.device)
                keep = (~drop_BH)[:, None, :, None].to(z_BNHd.dtype)
                fill = means[ell][None, None] if ell in means else torch.zeros_like(z_BNHd[:1, :1])
                return z_BNHd * keep + fill * (1 - keep)

            hooks.append((f"blocks.{ell}.attn.hook_z", ablate))
        return hooks

    labels = [f"L{ell}.H{h}" for ell in layers for h in range(H)]
    settings = {"ablation": ablation}
    return FeatureGame(
        model, sae, hook, tokens_N, feature, labels, make_hooks, value, batch_size, settings, "heads"
    )


def upstream_game(
    model: HookedTransformer, sae: SAE[Any], hook: str, tokens_N: torch.Tensor, feature: int,
    upstream_sae: SAE[Any], upstream_hook: str, position: int = -1, value: str = "post",
    max_features: int = MAX_UPSTREAM_FEATURES, batch_size: int = BATCH,
) -> FeatureGame:  # fmt: skip
    """Players: the upstream SAE's most active features (by sum |a_j| ||W_dec[j]||, BOS excluded); masked = dropped."""
    tokens_N, target = _prepare(model, sae, hook, tokens_N, feature, position, value)
    check_inputs(model, upstream_sae, upstream_hook, tokens_N, -1)
    up = parse_hook(model, upstream_hook)
    if up.kind != "state" or up.state >= target.n_sublayers + (target.kind == "state"):
        raise PlayerError(f"the upstream hook {upstream_hook!r} must be a residual hook before {hook!r}.")
    first = first_player(model, tokens_N)
    with torch.no_grad():
        _, cache = model.run_with_cache(
            tokens_N[None], names_filter=lambda k: k == upstream_hook,
            stop_at_layer=stop_layer([upstream_hook], model.cfg.n_layers),
        )  # fmt: skip
        acts_NF = upstream_sae.encode(cache[upstream_hook][0].to(upstream_sae.dtype)).float()
    acts_NF[:first] = 0.0
    W_dec_FD = decoder_rows_FD(upstream_sae).float()
    mass_F = acts_NF.abs().sum(0) * W_dec_FD.norm(dim=-1)
    active = torch.nonzero(mass_F > 0).flatten()
    chosen = active[torch.argsort(mass_F[active], descending=True)[:max_features]]
    if chosen.numel() < 2:
        raise PlayerError(f"only {chosen.numel()} upstream feature(s) active before the target.")
    parts_PND = acts_NF[:, chosen].T[:, :, None] * W_dec_FD[chosen][:, None, :]

    def make_hooks(masks_BP: torch.Tensor) -> Hooks:
        def drop(x_BND: torch.Tensor, hook: Any) -> torch.Tensor:
            dropped_BP = (~masks_BP).float().to(x_BND.device)
            return x_BND - torch.einsum("bp,pnd->bnd", dropped_BP, parts_PND.to(x_BND.device)).to(x_BND.dtype)

        return [(upstream_hook, drop)]

    labels = [f"F{int(j)}" for j in chosen.tolist()]
    settings = {"upstream_hook": upstream_hook, "upstream_features": [int(j) for j in chosen.tolist()]}
    return FeatureGame(
        model, sae, hook, tokens_N, feature, labels, make_hooks, value, batch_size, settings, "upstream"
    )
