"""The one place shapiq and lightgbm are imported (lazily): ProxySPEX, KernelSHAP, the Möbius converter, the exact
transform.

shapiq is pinned `>=1.4.1,<1.5` (specs/attribution.md B.2: 1.5+ needs Python 3.12) and its ProxySPEX defaults changed
between 1.4.1 and 1.5 (index FBII -> k-SII, max_order n -> 2, pairing on -> off), so every parameter is passed here
explicitly; moving to 1.5+ means changing only this module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import numpy as np

from sae_workbench.evaluation.interactions.errors import INSTALL_HINT, InteractionsError, MissingExtraError


class DegenerateProxyError(InteractionsError):
    """The trees hold at most one non-constant coefficient, which shapiq 1.4.1's _refine cannot threshold."""


class _GameFailed(Exception):
    """Carries an exception the value function raised through shapiq (its __cause__ is re-raised)."""


Game = Callable[[np.ndarray], np.ndarray]
"""A value function: bool masks (B, n), True = player kept, to values (B,)."""

REFERENCE_GRID: dict[str, list[Any]] = {
    "max_depth": [3, 5],
    "max_iter": [500, 1000],
    "learning_rate": [0.01, 0.1],
}
"""ProxySPEX's LightGBM grid, 8 configurations x 5-fold CV (shapiq 1.4.1 approximator/sparse/base.py and HEAD
proxy/_models.py _LIGHTGBM_DECODER_GRID; arXiv 2505.17495). The library default; tests may pass a smaller one."""


def require() -> ModuleType:
    """Import shapiq (and check lightgbm); raise MissingExtraError saying how to install the extra."""
    try:
        importlib.import_module("lightgbm")
        return importlib.import_module("shapiq")
    except ImportError as err:
        raise MissingExtraError(
            f"ProxySPEX interactions need the optional `interactions` extra (shapiq, lightgbm): {INSTALL_HINT}"
        ) from err


def proxyspex_moebius(
    game: Game, n: int, budget: int, seed: int, grid: Mapping[str, list[Any]] | None = None
) -> dict[tuple[int, ...], float]:
    """ProxySPEX's sparse Möbius coefficients of `game` (FBII at max_order n equals the Möbius transform, B.1.6)."""
    shapiq = require()
    approx = shapiq.ProxySPEX(n=n, index="FBII", max_order=n, top_order=False, random_state=seed)
    approx.decoder_args = {k: list(v) for k, v in (grid or REFERENCE_GRID).items()}

    def guarded(masks: np.ndarray) -> np.ndarray:
        """The game, its own errors tagged so they are not taken for _refine's IndexError below."""
        try:
            return game(masks)
        except Exception as err:
            raise _GameFailed from err

    try:
        iv = approx.approximate(budget, guarded)
    except _GameFailed as failed:  # the value function's own error, re-raised as it was
        assert failed.__cause__ is not None
        raise failed.__cause__ from None
    except (IndexError, FloatingPointError) as err:  # 1.4.1's _refine without a non-constant coefficient
        raise DegenerateProxyError(
            f"ProxySPEX's trees found no structure to refine ({err!r}): no split reduces the loss, as for a pure "
            "parity game (arXiv 2505.17495's stated limitation) or a nearly constant one."
        ) from err
    return {tuple(int(i) for i in key): float(iv.values[pos]) for key, pos in iv.interaction_lookup.items()}


def kernelshap(game: Game, n: int, budget: int, seed: int) -> np.ndarray:
    """Shapley values (n,) by KernelSHAP at `budget` evaluations (shapiq defaults made explicit)."""
    shapiq = require()
    approx = shapiq.KernelSHAP(n=n, pairing_trick=False, sampling_weights=None, random_state=seed)
    iv = approx.approximate(budget, game)
    return np.array([float(iv[(i,)]) for i in range(n)])


def convert(
    moebius: Mapping[tuple[int, ...], float], n: int, index: str, order: int
) -> dict[tuple[int, ...], float]:
    """Convert Möbius coefficients to another index (FBII, k-SII, STII, FSII, SII, SV, BV) up to `order`."""
    shapiq = require()
    keys = list(moebius)
    iv = shapiq.InteractionValues(
        values=np.array([moebius[k] for k in keys], dtype=float), index="Moebius", min_order=0, max_order=n,
        n_players=n, interaction_lookup={k: i for i, k in enumerate(keys)}, estimated=True,
        baseline_value=float(moebius.get((), 0.0)),
    )  # fmt: skip
    out = shapiq.game_theory.moebius_converter.MoebiusConverter(moebius_coefficients=iv)(
        index=index, order=order
    )
    return {tuple(int(i) for i in key): float(out.values[pos]) for key, pos in out.interaction_lookup.items()}


def exact_moebius(game: Game, n: int) -> dict[tuple[int, ...], float]:
    """The exact Möbius transform over all 2^n coalitions (ground truth for small n)."""
    shapiq = require()
    iv = shapiq.ExactComputer(game, n_players=n, evaluate_game=False).moebius_transform
    return {tuple(int(i) for i in key): float(iv.values[pos]) for key, pos in iv.interaction_lookup.items()}
