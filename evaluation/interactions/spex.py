"""ProxySPEX interactions of any value function, with the faithfulness table (arXiv 2505.17495; specs/attribution.md B).

    result = explain_game(game, n=24, budget=budget_for(24), seed=0, labels=[...])
    result.top_terms[0]      # the largest Möbius term of order >= 2, with its players' singletons
    result.r2                # {"proxyspex": .., "shapley": .., "banzhaf": ..} on 1000 fresh uniform masks

ProxySPEX fits LightGBM to the game on `budget` uniform masks (shapiq 1.4.1's sampler: uniform over subsets, paired
with complements) and reads sparse Fourier, then Möbius, coefficients off the trees. Faithfulness is R^2 of each
model's reconstruction on 1000 fresh i.i.d. uniform masks (spectralexplain utils.py:estimate_r2, NUM_TEST_SAMPLES
1000): ProxySPEX sum_S M(S) prod_{i in S} x_i; Shapley v(empty) + sum phi_i x_i with KernelSHAP at the same budget;
Banzhaf an order-1 ridge on ProxySPEX's own training masks. The marginal rows are always computed, so a reader sees
when the interaction model is not needed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sae_workbench.evaluation.interactions import shapiq_adapter
from sae_workbench.evaluation.interactions.errors import ConstantGameError, PlayerError
from sae_workbench.evaluation.interactions.shapiq_adapter import Game

TEST_MASKS = 1000
"""Held-out masks of the R^2 table (spectralexplain experiments/faithfulness.py NUM_TEST_SAMPLES)."""
TOP_TERMS = 10
"""Möbius terms of order >= 2 kept (specs/attribution.md B.3 display)."""
ORDER2_INDICES = ("FBII", "k-SII")
CONSTANT_VAR = 1e-12
"""var(y) at or below this (relative to max(1, mean(y)^2)) is a constant game: 1.4.1's _refine has no guard."""


def budget_for(n: int) -> int:
    """The project's budget rule min(5000, max(1000, 16 n)) (specs/attribution.md B.3), capped at 2^n.

    The cap is ours: n players have only 2^n distinct masks, and shapiq 1.4.1's sampler draws without repeats and
    clamps a larger budget to 2^n with a warning (approximator/sampling.py), so the stored budget is what was evaluated.
    """
    return min(5000, max(1000, 16 * n), 2**n)


@dataclass(frozen=True)
class InteractionResult:
    """Sparse interactions of one game and how faithfully each model reconstructs it."""

    n_players: int
    labels: tuple[str, ...]
    budget: int
    seed: int
    index: str
    """The order-2 index reported in `order2` (FBII or k-SII)."""
    empty_value: float
    """v(empty): every player masked."""
    full_value: float
    """v(all): nothing masked."""
    top_terms: tuple[dict[str, Any], ...]
    """Largest |Möbius| terms of order >= 2: players, labels, value, and each player's singleton Möbius value."""
    singletons: tuple[float, ...]
    """Möbius value of each single player (0 where ProxySPEX kept none)."""
    order2: tuple[dict[str, Any], ...]
    """`index` at order 2: the pairs, largest |value| first (at most TOP_TERMS)."""
    r2: dict[str, float]
    """Test R^2 of proxyspex, shapley and banzhaf on TEST_MASKS fresh uniform masks."""
    n_moebius: int
    """Non-zero Möbius coefficients ProxySPEX kept."""
    moebius: tuple[tuple[tuple[int, ...], float], ...]
    """Every kept Möbius coefficient (players, value), largest |value| first: the whole sparse model."""
    degenerate: bool
    """The trees found no split (e.g. a pure parity game): the proxy is the training mean."""
    evaluations: int
    """Value-function evaluations (ProxySPEX + KernelSHAP + test masks + the two extremes)."""
    wall_s: float
    game_s: float
    """Of `wall_s`, the seconds spent in the value function (the model forwards); the rest is mostly LightGBM."""
    meta: dict[str, Any] = dataclasses.field(default_factory=lambda: dict[str, Any]())
    """What the game was (feature, position, player type, masking); filled by `feature_interactions`."""
    method: str = "proxyspex"
    """How the Möbius coefficients were found: 'proxyspex', or 'exact' when the budget covers all 2^n coalitions
    (the transform itself; ProxySPEX's 5-fold tree fit fails on fewer than 5 masks, e.g. 2 players)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


class _Recorder:
    """Wraps a game: counts evaluations, keeps ProxySPEX's training masks, and stops a constant game early."""

    def __init__(self, game: Game) -> None:
        self.game = game
        self.calls = 0
        self.seconds = 0.0
        self.X: np.ndarray | None = None
        self.y: np.ndarray | None = None

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        masks = np.asarray(masks, dtype=bool)
        started = time.perf_counter()
        y = np.asarray(self.game(masks), dtype=float).reshape(-1)
        self.seconds += time.perf_counter() - started
        self.calls += len(masks)
        if self.X is None:
            self.X, self.y = masks, y
            check_not_constant(y)
        return y


def check_not_constant(y: np.ndarray) -> None:
    """Raise ConstantGameError when the values do not vary (the feature does not respond to masking)."""
    if y.size == 0 or float(np.var(y)) <= CONSTANT_VAR * max(1.0, float(np.mean(y)) ** 2):
        value = float(y[0]) if y.size else float("nan")
        raise ConstantGameError(
            f"the value function is constant ({value:.4g}) on all {y.size} masks: the feature does not respond to "
            "masking these players (it may never fire here). Pick a position where it fires, or other players."
        )


def moebius_predict(moebius: Mapping[tuple[int, ...], float], X: np.ndarray) -> np.ndarray:
    """sum_S M(S) prod_{i in S} x_i for each mask row of X (B, n)."""
    out = np.zeros(len(X))
    for players, value in moebius.items():
        out += value * (X[:, list(players)].all(axis=1) if players else 1.0)
    return out


def r_squared(y: np.ndarray, y_hat: np.ndarray) -> float:
    """1 - ||y - y_hat||^2 / ||y - mean(y)||^2 (NaN when y is constant)."""
    total = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - y_hat) ** 2).sum()) / total if total > 0 else float("nan")


def banzhaf_linear(X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Intercept and coefficients of an order-1 ridge on uniform masks (Banzhaf values, alphas as ProxySPEX's refit)."""
    from sklearn.linear_model import RidgeCV

    fit = RidgeCV(alphas=np.logspace(-6, 6, 100), fit_intercept=True).fit(X.astype(float), y)
    return float(fit.intercept_), np.asarray(fit.coef_, dtype=float)


def explain_game(
    game: Game,
    n: int,
    budget: int | None = None,
    seed: int = 0,
    labels: Sequence[str] | None = None,
    index: str = "FBII",
    grid: Mapping[str, list[Any]] | None = None,
    test_masks: int = TEST_MASKS,
) -> InteractionResult:
    """ProxySPEX interactions of `game` over n players and the R^2 table vs Shapley and Banzhaf."""
    if n < 2:
        raise PlayerError(
            f"interactions need at least 2 players, got {n}; pick a later position or other players."
        )
    if index not in ORDER2_INDICES:
        raise ValueError(f"unknown order-2 index {index!r}; use one of {ORDER2_INDICES}")
    labels = tuple(labels) if labels is not None else tuple(str(i) for i in range(n))
    budget = budget_for(n) if budget is None else min(int(budget), 2**n)  # n players have only 2^n masks
    start = time.perf_counter()
    recorder = _Recorder(game)
    exact = budget >= 2**n  # every coalition is evaluated: compute the transform instead of fitting a proxy
    try:
        if exact:
            found = shapiq_adapter.exact_moebius(recorder, n)
        else:
            found = shapiq_adapter.proxyspex_moebius(recorder, n, budget, seed, grid)
        degenerate = False
    except shapiq_adapter.DegenerateProxyError:
        found, degenerate = {}, True
    assert recorder.X is not None and recorder.y is not None
    if (
        degenerate
    ):  # no split helped: the proxy is the training mean, and the R^2 table shows it (spec B.4 P2)
        found = {(): float(recorder.y.mean())}
    moebius = {k: v for k, v in found.items() if v != 0}
    phi = shapiq_adapter.kernelshap(recorder, n, budget, seed)
    extremes = recorder(np.array([np.zeros(n, bool), np.ones(n, bool)]))
    X_test = np.random.default_rng(seed + 1).random((test_masks, n)) < 0.5
    y_test = recorder(X_test)
    intercept, beta = banzhaf_linear(recorder.X, recorder.y)
    r2 = {
        "proxyspex": r_squared(y_test, moebius_predict(moebius, X_test)),
        "shapley": r_squared(y_test, extremes[0] + X_test.astype(float) @ phi),
        "banzhaf": r_squared(y_test, intercept + X_test.astype(float) @ beta),
    }
    singles = [float(moebius.get((i,), 0.0)) for i in range(n)]
    high = sorted((k for k in moebius if len(k) >= 2), key=lambda k: -abs(moebius[k]))[:TOP_TERMS]
    top = tuple(
        {
            "players": list(k),
            "labels": [labels[i] for i in k],
            "value": moebius[k],
            "singletons": [singles[i] for i in k],
        }
        for k in high
    )
    pairs = shapiq_adapter.convert(moebius, n, index, 2) if moebius else {}
    order2 = tuple(
        {"players": list(k), "labels": [labels[i] for i in k], "value": v}
        for k, v in sorted(
            ((k, v) for k, v in pairs.items() if len(k) == 2 and v != 0), key=lambda kv: -abs(kv[1])
        )[:TOP_TERMS]
    )
    return InteractionResult(
        n_players=n, labels=labels, budget=budget, seed=seed, index=index, empty_value=float(extremes[0]),
        full_value=float(extremes[1]), top_terms=top, singletons=tuple(singles), order2=order2, r2=r2,
        n_moebius=len(moebius), moebius=tuple(sorted(moebius.items(), key=lambda kv: -abs(kv[1]))),
        degenerate=degenerate, evaluations=recorder.calls, wall_s=time.perf_counter() - start,
        game_s=recorder.seconds, method="exact" if exact else "proxyspex",
    )  # fmt: skip
