"""ProxySPEX interactions behind one SAE feature at one position of one text (specs/attribution.md B.3).

r = feature_interactions(model, sae, "blocks.3.hook_resid_post", tokens_N, feature=123, players="tokens")
r.top_terms[0]["labels"], r.top_terms[0]["value"], r.r2
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.defaults import INTERACTION_MASK
from sae_workbench.evaluation.interactions.errors import PlayerError
from sae_workbench.evaluation.interactions.games import (
    PLAYER_TYPES,
    FeatureGame,
    head_game,
    token_game,
    upstream_game,
)
from sae_workbench.evaluation.interactions.spex import InteractionResult, explain_game


def feature_game(
    model: HookedTransformer, sae: SAE[Any], hook: str, tokens_N: torch.Tensor, feature: int, position: int = -1,
    players: str = "tokens", value: str = "post", mask: str = INTERACTION_MASK, ablation: str = "zero",
    upstream: tuple[SAE[Any], str] | None = None,
) -> FeatureGame:  # fmt: skip
    """The value function of `feature` at `position` over the chosen players (tokens, heads or upstream)."""
    if players == "tokens":
        return token_game(model, sae, hook, tokens_N, feature, position, value, mask)
    if players == "heads":
        return head_game(model, sae, hook, tokens_N, feature, position, value, ablation)
    if players == "upstream" and upstream is not None:
        return upstream_game(model, sae, hook, tokens_N, feature, upstream[0], upstream[1], position, value)
    raise PlayerError(
        f"players must be one of {PLAYER_TYPES} (upstream needs an upstream SAE and hook), got {players!r}."
    )


def feature_interactions(
    model: HookedTransformer, sae: SAE[Any], hook: str, tokens_N: torch.Tensor, feature: int, position: int = -1,
    players: str = "tokens", value: str = "post", mask: str = INTERACTION_MASK, ablation: str = "zero",
    upstream: tuple[SAE[Any], str] | None = None, budget: int | None = None, seed: int = 0, index: str = "FBII",
    grid: Mapping[str, list[Any]] | None = None,
) -> InteractionResult:  # fmt: skip
    """ProxySPEX over the players of `feature` at `position`; raises ConstantGameError when masking changes nothing."""
    game = feature_game(
        model, sae, hook, tokens_N, feature, position, players, value, mask, ablation, upstream
    )
    result = explain_game(game, game.n, budget, seed, game.labels, index, grid)
    return dataclasses.replace(result, meta=game.meta(len(game.tokens_N) - 1))
