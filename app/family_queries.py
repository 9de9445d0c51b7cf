"""Reads behind the app's SAE-family views: the feature page's "Across SAEs" section and the Families page.

Like `queries.py` (whose read-only store handle and file-version cache key these reuse), every public function takes
the store path first and caches at this boundary, keyed by the store's file version.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import streamlit as st

from sae_workbench.app.queries import _open, store_version  # pyright: ignore[reportPrivateUsage]
from sae_workbench.app.settings import CACHE_TTL_S
from sae_workbench.evaluation.families.agreement import QUOTED_THRESHOLD, flag_disagreement
from sae_workbench.evaluation.families.job import chain_runs_for, family_tree, shared_curve
from sae_workbench.evaluation.families.stability import stability_table
from sae_workbench.status import Status

ONE_TO_ONE = ("hungarian", "sinkhorn")
"""Methods whose runs give a shared-fraction curve (greedy is many-to-one)."""


class AcrossMatch(NamedTuple):
    """A feature's match in another SAE of the same hook."""

    other_sae: str
    other_d_sae: int
    other_feature: int
    method: str
    similarity: str
    sim: float
    act_corr: float | None
    top_jaccard: float | None
    explanation: str | None
    """The other feature's newest explanation."""
    flagged: bool
    """Similar weights but no functional agreement (activation correlation low or absent)."""


def across_saes(path: str, sae_id: str, feature: int) -> list[AcrossMatch]:
    """Stored matches of one feature in the store's other SAEs, most similar first."""
    return _across_saes(path, store_version(path), sae_id, int(feature))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=256)
def _across_saes(path: str, version: tuple[int, ...], sae_id: str, feature: int) -> list[AcrossMatch]:
    store = _open(path)
    out: list[AcrossMatch] = []
    with store.session():
        for m in store.matches_of_feature(sae_id, feature):
            texts = [
                e.text
                for e in store.explanations(sae_id=m.other_sae, feature=m.other_feature)
                if e.status is not Status.DEAD
            ]
            flagged = m.act_corr is not None and bool(
                flag_disagreement(np.array([m.sim]), np.array([m.act_corr]), m.threshold)[0]
            )
            out.append(
                AcrossMatch(
                    m.other_sae, store.get_sae(m.other_sae).d_sae, m.other_feature, m.method, m.similarity, m.sim,
                    m.act_corr, m.top_jaccard, texts[-1] if texts else None, flagged,
                )
            )  # fmt: skip
    return out


def family_runs(path: str) -> pd.DataFrame:
    """Every stored match run: key, both SAEs and widths, method, similarity, pairs, solver, seconds."""
    return _family_runs(path, store_version(path))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _family_runs(path: str, version: tuple[int, ...]) -> pd.DataFrame:
    store = _open(path)
    rows = [
        {
            "match_key": r.match_key, "sae_a": r.sae_a, "d_a": r.params.get("d_a"), "sae_b": r.sae_b,
            "d_b": r.params.get("d_b"), "method": r.method, "similarity": r.similarity, "pairs": r.n_rows,
            "solver": r.params.get("solver"), "seconds": r.params.get("seconds"),
        }
        for r in store.match_runs()
    ]  # fmt: skip
    return pd.DataFrame(rows)


def shared_curves(path: str) -> pd.DataFrame:
    """Long table of the one-to-one runs' shared-fraction curves: pair, method, threshold, fraction, counted, dead."""
    return _shared_curves(path, store_version(path))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _shared_curves(path: str, version: tuple[int, ...]) -> pd.DataFrame:
    store = _open(path)
    rows: list[dict[str, Any]] = []
    with store.session():
        for r in store.match_runs():
            if r.method not in ONE_TO_ONE:
                continue
            curve = shared_curve(store, r)
            label = (
                f"{r.sae_a[:8]} ({r.params.get('d_a')}) ↔ {r.sae_b[:8]} ({r.params.get('d_b')}) · {r.method}"
            )
            for t, f in zip(curve.thresholds, curve.fractions, strict=True):
                rows.append({"pair": label, "match_key": r.match_key, "threshold": t, "shared fraction": f,
                             "counted": curve.n_counted, "dead (apart)": curve.n_dead + curve.n_partner_dead})  # fmt: skip
    return pd.DataFrame(rows)


def shared_at(curves: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """One row per pair of `shared_curves`: its shared fraction at `threshold` (a threshold of the curve)."""
    rows = [
        {"pair": r["pair"], f"shared at {threshold:g}": r["shared fraction"], "counted": r["counted"],
         "dead (apart)": r["dead (apart)"]}
        for r in curves.to_dict("records")
        if abs(float(r["threshold"]) - threshold) < 1e-9
    ]  # fmt: skip
    return pd.DataFrame(rows)


def width_chains(path: str) -> list[tuple[str, ...]]:
    """Chains of SAEs linked by stored greedy wide→narrow runs, narrowest first (each SAE's next wider one: the
    narrowest SAE linked to it)."""
    return _width_chains(path, store_version(path))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _width_chains(path: str, version: tuple[int, ...]) -> list[tuple[str, ...]]:
    store = _open(path)
    wider: dict[str, list[tuple[int, str]]] = {}
    linked_from: set[str] = set()
    for r in store.match_runs():
        d_a, d_b = int(r.params.get("d_a", 0)), int(r.params.get("d_b", 0))
        if r.method == "greedy" and d_a > d_b:
            wider.setdefault(r.sae_b, []).append((d_a, r.sae_a))
            linked_from.add(r.sae_a)
    chains: list[tuple[str, ...]] = []
    for start in sorted(set(wider) - linked_from):
        chain = [start]
        while chain[-1] in wider:
            chain.append(min(wider[chain[-1]])[1])
        chains.append(tuple(chain))
    return chains


class TreeRow(NamedTuple):
    """One node of a splitting tree, flattened depth first."""

    level: int
    sae_id: str
    d_sae: int
    feature: int
    sim: float | None
    explanation: str | None
    coverage: float | None
    absorption: int
    """Absorption-eval entries naming the feature."""
    n_children: int


def splitting_tree(
    path: str, chain: tuple[str, ...], root: int, threshold: float = QUOTED_THRESHOLD
) -> list[TreeRow]:
    """The splitting tree of feature `root` of the chain's narrowest SAE, flattened."""
    return _splitting_tree(path, store_version(path), chain, int(root), float(threshold))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=64)
def _splitting_tree(
    path: str, version: tuple[int, ...], chain: tuple[str, ...], root: int, threshold: float
) -> list[TreeRow]:
    store = _open(path)
    tree = family_tree(store, chain_runs_for(store, list(chain)), root, threshold)
    return [
        TreeRow(
            n.level, str(n.info["sae_id"]), int(n.info["d_sae"]), n.feature, n.sim, n.info.get("explanation"),
            n.info.get("coverage"), len(n.info.get("absorption") or []), len(n.children),
        )
        for n in tree.walk()
    ]  # fmt: skip


def top_splitting_features(
    path: str, chain: tuple[str, ...], threshold: float = QUOTED_THRESHOLD
) -> list[int]:
    """Features of the chain's narrowest SAE with two or more children in the next width, most children first."""
    return _top_splitting(path, store_version(path), chain, float(threshold))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _top_splitting(
    path: str, version: tuple[int, ...], chain: tuple[str, ...], threshold: float
) -> list[int]:
    store = _open(path)
    link = store.feature_matches(chain_runs_for(store, list(chain[:2]))[0].match_key).to_pydict()
    kids = [p for p, s in zip(link["feature_b"], link["sim"], strict=True) if s >= threshold]
    counts = {p: len(list(g)) for p, g in itertools.groupby(sorted(kids))}
    return [p for p, c in sorted(counts.items(), key=lambda pc: (-pc[1], pc[0])) if c >= 2]


def stability(path: str, match_key: str) -> pd.DataFrame:
    """The stability table of one run: both texts, their similarity, B's own score and A's transferred one."""
    return _stability(path, store_version(path), match_key)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _stability(path: str, version: tuple[int, ...], match_key: str) -> pd.DataFrame:
    store = _open(path)
    run = store.match_run(match_key)
    if run is None:
        return pd.DataFrame()
    rows = stability_table(store, run)
    return pd.DataFrame(
        [
            {
                "feature A": r.feature_a, "feature B": r.feature_b, "weight cos": r.sim, "explanation A": r.text_a,
                "explanation B": r.text_b, "text similarity": r.text_similarity, "scorer": r.scorer,
                "negatives": r.negative_source, "metric": r.metric, "B's own score": r.own_score,
                "A's explanation on B": r.transfer_score,
            }
            for r in rows
        ]
    )  # fmt: skip
