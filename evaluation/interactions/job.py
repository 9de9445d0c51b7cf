"""Batch ProxySPEX interactions of stored features at their top examples' peaks, into the store, resumably.

    summary = run_interactions(store, model, sae, sae_id, features=[3, 7], config=InteractConfig(players="tokens"))

Each result is keyed by (SAE, feature, text hash, player type, budget, seed) and a hash of the other settings, so a
rerun skips what is stored. A feature that does not respond to masking is stored with status "constant".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.defaults import INTERACTION_MASK
from sae_workbench.evaluation.attribution.job import JobSummary, config_key, top_examples_of
from sae_workbench.evaluation.interactions.errors import ConstantGameError, PlayerError
from sae_workbench.evaluation.interactions.feature import feature_game
from sae_workbench.evaluation.interactions.games import HEAD_ABLATIONS, MASKS, PLAYER_TYPES, VALUES
from sae_workbench.evaluation.interactions.shapiq_adapter import require
from sae_workbench.evaluation.interactions.spex import ORDER2_INDICES, budget_for, explain_game
from sae_workbench.store import Store
from sae_workbench.store.interactions import InteractionRecord

JOB_VERSION = "interactions-1"


@dataclass(frozen=True)
class InteractConfig:
    """What `run_interactions` computes per feature."""

    players: str = "tokens"
    """tokens, heads or upstream (the last needs an upstream SAE)."""
    examples: int = 1
    """Top examples (highest max activation) per feature, each at its peak position."""
    budget: int | None = None
    """Masks ProxySPEX (and KernelSHAP) may evaluate; None = min(5000, max(1000, 16 n)) (spec B.3)."""
    seed: int = 0
    value: str = "post"
    """post (the SAE's activation) or pre (its encoder pre-activation)."""
    mask: str = INTERACTION_MASK
    """Token players: unk (tokenizer unk, else eos, else pad) or mean (the mean embedding)."""
    ablation: str = "zero"
    """Head players: zero or mean ablation of hook_z."""
    index: str = "FBII"
    """Order-2 index shown beside the Möbius terms: FBII or k-SII."""
    grid: dict[str, list[Any]] | None = None
    """LightGBM grid; None = the reference 8 x 5-fold grid (shapiq_adapter.REFERENCE_GRID)."""

    def check(self) -> None:
        """Raise PlayerError / ValueError for unknown settings."""
        if self.players not in PLAYER_TYPES:
            raise PlayerError(f"players must be one of {PLAYER_TYPES}, got {self.players!r}.")
        bad = [
            (name, v, allowed)
            for name, v, allowed in (
                ("value", self.value, VALUES),
                ("mask", self.mask, MASKS),
                ("ablation", self.ablation, HEAD_ABLATIONS),
                ("index", self.index, ORDER2_INDICES),
            )
            if v not in allowed
        ]
        if bad or self.examples < 1:
            raise ValueError(f"unknown settings {bad or 'examples < 1'}")


@dataclass
class InteractSummary(JobSummary):
    """What a run did."""

    stored: int = 0
    """New results stored (constant ones included)."""
    constant: int = 0
    """Results whose value function was constant (the feature does not respond to masking)."""
    too_few_players: list[int] = field(default_factory=lambda: list[int]())
    """Features with an example of fewer than 2 players (a peak right after BOS), skipped."""


def text_hash(tokens_N: torch.Tensor) -> str:
    """sha256 of the token ids (16 hex digits)."""
    return hashlib.sha256(",".join(str(int(t)) for t in tokens_N.tolist()).encode()).hexdigest()[:16]


def run_interactions(
    store: Store,
    model: HookedTransformer,
    sae: SAE[Any],
    sae_id: str,
    features: list[int],
    config: InteractConfig | None = None,
    progress: bool = True,
    upstream: tuple[SAE[Any], str, str] | None = None,
) -> InteractSummary:
    """ProxySPEX interactions of each feature's top examples at their peaks; stored; stored keys skipped."""
    config = config or InteractConfig()
    config.check()
    require()
    if (config.players == "upstream") != (upstream is not None):
        raise PlayerError(
            "the upstream players need an upstream SAE (--upstream-sae), and only they use one."
        )
    record = store.get_sae(sae_id)
    stored = store.stored_interaction_keys(sae_id)
    summary = InteractSummary()
    extra = {"upstream": [upstream[2], upstream[1]]} if upstream is not None else {}
    for feature, examples, windows in top_examples_of(
        store, sae_id, features, config.examples, summary, "interactions", progress
    ):
        for ex, window in zip(examples, windows, strict=True):
            tokens_N = torch.as_tensor(window.tokens, dtype=torch.long)[: ex.max_position + 1]
            try:
                game = feature_game(
                    model, sae, record.hook, tokens_N, feature, -1, config.players, config.value, config.mask,
                    config.ablation, None if upstream is None else (upstream[0], upstream[1]),
                )  # fmt: skip
            except PlayerError:  # e.g. a peak at position 1: fewer than 2 players, nothing to interact
                summary.too_few_players.append(feature)
                continue
            budget = budget_for(game.n) if config.budget is None else config.budget
            digest = text_hash(tokens_N)
            parts = dict(
                sae_id=sae_id, feature=feature, text=digest, players=config.players, budget=budget,
                seed=config.seed, value=config.value, mask=config.mask, ablation=config.ablation,
                index=config.index, grid=config.grid, version=JOB_VERSION, **extra,
            )  # fmt: skip
            key = config_key(**parts)
            if key in stored:
                summary.skipped += 1
                continue
            meta = game.meta(ex.max_position)
            try:
                result = {
                    **explain_game(
                        game, game.n, budget, config.seed, game.labels, config.index, config.grid
                    ).to_dict(),
                    "meta": meta,
                }
                status = "ok"
            except ConstantGameError as err:
                result, status = {"message": str(err), "labels": game.labels, "meta": meta}, "constant"
                summary.constant += 1
            row = InteractionRecord(
                sae_id, feature, digest, config.players, budget, config.seed, ex.window_id,
                ex.max_position, status, result, key,
            )  # fmt: skip
            summary.stored += store.add_interactions([row])
    return summary
