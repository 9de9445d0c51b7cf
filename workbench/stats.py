"""Confidence intervals shared by every stage (the scorers' tables, the absorption eval's spread over seeds).

ci = t_confidence_interval([0.2, 0.4, 0.6])  # MeanCI(mean=0.4, low≈-0.097, high≈0.897, n=3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class MeanCI:
    """A mean with a two-sided Student-t confidence interval."""

    mean: float
    """Mean of the finite values (NaN if none)."""
    low: float
    """Lower bound (NaN with fewer than 2 values)."""
    high: float
    """Upper bound (NaN with fewer than 2 values)."""
    n: int
    """Number of finite values used."""


def t_confidence_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> MeanCI:
    """Mean ± t_{(1+c)/2, n−1} · s / √n over the finite values (PRISM reports mean AUC with a 95% t CI)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, 0)
    m = float(v.mean())
    if n < 2:
        return MeanCI(m, math.nan, math.nan, n)
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * float(v.std(ddof=1)) / math.sqrt(n)
    return MeanCI(m, m - half, m + half, n)
