"""Reads behind the feature page's position-aware LRP view (issue 35): stored `lrp_attributions`, aligned to their
windows' tokens so the page can show them beside DePass's token shares for the same example.

Like `queries.py` (whose read-only store handle and file-version cache key these reuse), every public function takes
the store path first and caches at this boundary, keyed by the store's file version.
"""

from __future__ import annotations

from typing import NamedTuple

import streamlit as st

from sae_workbench.app.queries import _open, store_version, windows_of_rows  # pyright: ignore[reportPrivateUsage]
from sae_workbench.app.settings import CACHE_TTL_S

LRP_NOTE = {
    "pa_lrp": "PA-LRP conserves T = pre-activation − SAE constant: tokens + positions + biases + softmax leak = T.",
    "attnlrp": "AttnLRP conserves T only with its losses: tokens + dropped position embedding + biases + softmax "
    "leak = T (positions get nothing).",
    "cp": "CP conserves T over tokens + positions + biases; the attention pattern is held constant (no softmax "
    "term, RoPE gets nothing).",
}
DEPASS_NOTE = "DePass conserves the pre-activation exactly: token shares + model biases + SAE constant (QK path frozen)."


class LrpView(NamedTuple):
    """One stored LRP result, padded to its window's tokens."""

    window_id: int | None
    position: int
    mode: str
    positional: str
    """learned or rotary."""
    token_strings: list[str]
    token_scores: list[float]
    position_scores: list[float]
    """Position relevance summed over layers (0 past `position`)."""
    paper_map: list[float]
    """The paper's absolute-value heat map (normalised; not conservative)."""
    target: float
    pre_activation: float
    residual: dict[str, float]
    """bias, softmax_leak and dropped_position totals."""
    closure_error: float


def feature_lrp(path: str, sae_id: str, feature: int) -> list[LrpView]:
    """A feature's stored LRP results (every mode), oldest first, aligned to their windows' tokens."""
    return _feature_lrp(path, store_version(path), sae_id, int(feature))


def _pad(values: list[float], n: int) -> list[float]:
    return [float(v) for v in values] + [0.0] * (n - len(values))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=256)
def _feature_lrp(path: str, version: tuple[int, ...], sae_id: str, feature: int) -> list[LrpView]:
    store = _open(path)
    with store.session():
        rows = store.lrp_attributions(sae_id, feature)
        windows = windows_of_rows(store, sae_id, rows)
    out: list[LrpView] = []
    for row in rows:
        res = row.result
        tokens = res.get("token_scores_N", [])
        window = windows.get(row.window_id) if row.window_id is not None else None
        strings = list(window.token_strings) if window is not None else [f"#{i}" for i in range(len(tokens))]
        strings = strings + [""] * (len(tokens) - len(strings))
        n = len(strings)
        out.append(
            LrpView(
                window_id=row.window_id,
                position=row.position,
                mode=row.mode,
                positional=str(res.get("positional", "")),
                token_strings=strings,
                token_scores=_pad(tokens, n),
                position_scores=_pad(res.get("position_scores_N", []), n),
                paper_map=_pad(res.get("paper_map_N", []), n),
                target=row.target,
                pre_activation=row.pre_activation,
                residual={
                    "bias": float(sum(res.get("bias_shares", {}).values())),
                    "softmax_leak": float(sum(res.get("softmax_leak_L", []))),
                    "dropped_position": float(res.get("dropped_position", 0.0)),
                },
                closure_error=row.closure_error,
            )
        )
    return out
