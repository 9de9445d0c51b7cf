"""Sparse interactions behind a feature: ProxySPEX (arXiv 2505.17495) over tokens, heads or upstream SAE features.

from sae_workbench.evaluation.interactions import explain_game, feature_interactions

Needs the optional `interactions` extra (shapiq, lightgbm), imported lazily by shapiq_adapter.
"""

from sae_workbench.evaluation.interactions.errors import (
    ConstantGameError,
    InteractionsError,
    MissingExtraError,
    PlayerError,
)
from sae_workbench.evaluation.interactions.feature import feature_game, feature_interactions
from sae_workbench.evaluation.interactions.games import PLAYER_TYPES
from sae_workbench.evaluation.interactions.spex import InteractionResult, budget_for, explain_game

__all__ = [
    "PLAYER_TYPES",
    "ConstantGameError",
    "InteractionResult",
    "InteractionsError",
    "MissingExtraError",
    "PlayerError",
    "budget_for",
    "explain_game",
    "feature_game",
    "feature_interactions",
]
