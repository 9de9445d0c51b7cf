"""The app's read-only query layer: the only module pages read the store through. Store results are cached here and
only here (the Playground's model and SAE are cached per server in `live_model.py`; the hypothesis form's one write is
`hypotheses.py`; the command lines shown for empty parts are `commands.py`).

Every public function takes the store path first. Results are cached with `st.cache_data` keyed by the path AND the
store's file version (size + mtime of the .duckdb and its .wal), so a page shows new rows as soon as a job commits
them and reuses results while nothing changed. The store is opened read-only and each call holds it only for its
own short session (workbench.store's concurrency design), so a writer process can index or explain meanwhile; if a
writer holds the lock longer than `BUSY_TIMEOUT_S`, `StoreBusyError` reaches the page, which offers a retry.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import streamlit as st

from sae_workbench.app.commands import FILL_COMMANDS
from sae_workbench.app.semantic import ExplanationIndex
from sae_workbench.app.settings import CACHE_TTL_S, configured_store_path
from sae_workbench.app.views import (
    ExampleView,
    ExplanationHit,
    FeatureDashboard,
    NegativeSample,
    SAESummary,
    ScoredExplanation,
    TokenFeatureHit,
)
from sae_workbench.errors import WorkbenchError
from sae_workbench.examples.sampling import quantile_examples
from sae_workbench.status import Status
from sae_workbench.store import Store
from sae_workbench.store.errors import (
    NotIndexedError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreNotFoundError,
    UnknownSAEError,
)
from sae_workbench.store.rows import Example, SAERecord

__all__ = [
    "FeatureOutOfRangeError",
    "NotIndexedError",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreNotFoundError",
    "UnknownSAEError",
    "WorkbenchError",
]

# How long a page waits for a writer's transaction before showing "store busy" (writers commit in short batches).
BUSY_TIMEOUT_S = 8.0
# A feature active on more than this fraction of tokens is counted as dense on the Overview (our display choice).
DENSE_THRESHOLD = 0.1


class FeatureOutOfRangeError(WorkbenchError):
    """A feature index outside [0, d_sae) of its SAE."""


# ---------------------------------------------------------------------------------------------- store handle


def store_path() -> Path | None:
    """The store this app serves (from `--store` / $WORKBENCH_STORE), or None if none was configured."""
    return configured_store_path()


def store_version(path: str) -> tuple[int, int, int, int]:
    """(size, mtime_ns) of the store file and its WAL: changes whenever a writer commits."""
    out: list[int] = []
    for p in (Path(path), Path(path + ".wal")):
        try:
            s = p.stat()
            out.extend((s.st_size, s.st_mtime_ns))
        except FileNotFoundError:
            out.extend((0, 0))
    return out[0], out[1], out[2], out[3]


def _open(path: str) -> Store:
    """Open the store read-only (raises StoreNotFoundError / StoreCorruptError / StoreBusyError)."""
    if not Path(path).exists():
        raise StoreNotFoundError(
            f"No store at {path}. Fill it with `{FILL_COMMANDS['index']}` (after `workbench train`), then reload."
        )
    return _store_handle(path, BUSY_TIMEOUT_S)


@st.cache_resource(show_spinner=False)
def _store_handle(path: str, busy_timeout_s: float) -> Store:
    """The read-only Store object (schema checked once; it holds no connection between calls)."""
    return Store.open(path, read_only=True, busy_timeout_s=busy_timeout_s)


# ---------------------------------------------------------------------------------------------- overview


def list_saes(path: str) -> list[SAERecord]:
    """All SAEs in the store, oldest first."""
    return _list_saes(path, store_version(path))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _list_saes(path: str, version: tuple[int, ...]) -> list[SAERecord]:
    return _open(path).list_saes()


def sae_summary(path: str, sae_id: str) -> SAESummary:
    """Counts, density distribution and evals of one SAE for the Overview."""
    return _sae_summary(path, store_version(path), sae_id)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _sae_summary(path: str, version: tuple[int, ...], sae_id: str) -> SAESummary:
    store = _open(path)
    with store.session():
        record = store.get_sae(sae_id)
        progress = store.index_progress(sae_id)
        n_rows = store.activation_count(sae_id)
        table = store.feature_table(sae_id)
        density = table.column("density").to_numpy().astype(np.float64) if table.num_rows else np.zeros(0)
        n_expl = len(store.explanations(sae_id=sae_id))
        n_scores = len(store.scores(sae_id=sae_id))
        evals = store.evals(sae_id=sae_id)
    positive = density[density > 0]
    return SAESummary(
        record=record,
        progress=progress,
        n_activation_rows=n_rows,
        n_features_active=int((density > 0).sum()),
        n_dense=int((density > DENSE_THRESHOLD).sum()),
        dense_threshold=DENSE_THRESHOLD,
        log10_density=np.log10(positive),
        n_explanations=n_expl,
        n_scores=n_scores,
        evals=evals,
    )


def feature_density_table(path: str, sae_id: str) -> pd.DataFrame:
    """One row per active feature (feature, n_active, density, max_value, mean_value), for sorting on the Overview."""
    return _feature_density_table(path, store_version(path), sae_id)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _feature_density_table(path: str, version: tuple[int, ...], sae_id: str) -> pd.DataFrame:
    return _open(path).feature_table(sae_id).to_pandas()


# ---------------------------------------------------------------------------------------------- feature dashboard


def feature_dashboard(
    path: str, sae_id: str, feature: int, n_top: int = 12, n_quantiles: int = 5, per_quantile: int = 3
) -> FeatureDashboard:
    """Everything the Feature page shows for one feature (one store session)."""
    return _feature_dashboard(
        path, store_version(path), sae_id, int(feature), n_top, n_quantiles, per_quantile
    )


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=256)
def _feature_dashboard(
    path: str,
    version: tuple[int, ...],
    sae_id: str,
    feature: int,
    n_top: int,
    n_quantiles: int,
    per_quantile: int,
) -> FeatureDashboard:
    store = _open(path)
    with store.session():
        record = store.get_sae(sae_id)
        if not 0 <= feature < record.d_sae:
            raise FeatureOutOfRangeError(
                f"Feature {feature} is out of range: SAE {sae_id} has features 0…{record.d_sae - 1}."
            )
        progress = store.index_progress(sae_id)
        if progress is None:
            raise NotIndexedError(
                f"SAE {sae_id} has no activations yet. Fill them with `{FILL_COMMANDS['index']}`."
            )
        stats = store.feature_stats(sae_id, feature)
        top = store.top_examples(sae_id, feature, n_top)
        quant = quantile_examples(store, sae_id, feature, n_quantiles, per_quantile, seed=0)
        explanations = store.explanations(sae_id=sae_id, feature=feature)
        scored = [ScoredExplanation(e, store.scores(explanation_id=e.id)) for e in explanations]
        samples = store.samples(sae_id, feature)
        negative_ids = sorted(
            {i for s in samples for i in s.window_ids} | {i for e in explanations for i in e.negative_ids}
        )
        wanted = [*(e.window_id for e in top), *(e.window_id for e in quant), *negative_ids]
        views = _example_views(store, sae_id, feature, progress.corpus, wanted)
        absorption_evals = [ev for ev in store.evals(sae_id=sae_id) if "absorption" in ev.eval_type_id]

    def as_views(examples: list[Example]) -> list[ExampleView]:
        return [_with_example(views[e.window_id], e) for e in examples]

    sample_views = [
        NegativeSample(s.source, s.seed, s.config, [views[i] for i in s.window_ids if i in views])
        for s in samples
    ]
    return FeatureDashboard(
        sae=record,
        feature=feature,
        corpus=progress.corpus,
        n_tokens=progress.n_tokens,
        stats=stats,
        top=as_views(top),
        quantiles=as_views(quant),
        explanations=scored,
        samples=sample_views,
        absorption=[entry for ev in absorption_evals for entry in _mentions(ev.eval, feature)],
        absorption_evals=len(absorption_evals),
    )


def _example_views(
    store: Store, sae_id: str, feature: int, corpus: str, window_ids: list[int]
) -> dict[int, ExampleView]:
    """Windows + this feature's dense activations on them, keyed by window id (unknown ids are skipped)."""
    ids = list(dict.fromkeys(int(i) for i in window_ids))
    if not ids:
        return {}
    try:
        windows = store.get_windows(corpus, ids)
    except StoreError:
        windows = []
        for i in ids:  # a sample may name windows outside the stored set; show the ones that exist
            try:
                windows.extend(store.get_windows(corpus, [i]))
            except StoreError:
                continue
    acts_NT = store.window_activations(sae_id, feature, [w.window_id for w in windows])
    out: dict[int, ExampleView] = {}
    for w, acts_T in zip(windows, acts_NT, strict=True):
        values = acts_T[: len(w.token_strings)]
        if len(values) < len(w.token_strings):
            values = np.pad(values, (0, len(w.token_strings) - len(values)))
        peak = int(np.argmax(values)) if len(values) else 0
        out[w.window_id] = ExampleView(
            window_id=w.window_id,
            token_strings=w.token_strings,
            values=values,
            mask=w.mask,
            max_value=float(values[peak]) if len(values) else 0.0,
            max_position=peak,
            source=w.source,
        )
    return out


def _with_example(view: ExampleView, example: Example) -> ExampleView:
    """A view carrying the example's peak and quantile bin."""
    return ExampleView(
        window_id=view.window_id,
        token_strings=view.token_strings,
        values=view.values,
        mask=view.mask,
        max_value=example.max_value,
        max_position=example.max_position,
        quantile=example.quantile,
        source=view.source,
    )


def _mentions(payload: Any, feature: int) -> Iterable[dict[str, Any]]:
    """Dicts inside an eval payload that name `feature` (as feature/feature_id, or in *_feature_ids lists)."""
    if isinstance(payload, dict):
        hit = any(payload.get(k) == feature for k in ("feature", "feature_id", "feature_index"))
        hit = hit or any(
            k.endswith("feature_ids") and isinstance(v, list) and feature in v for k, v in payload.items()
        )
        if hit:
            yield {k: v for k, v in payload.items() if not isinstance(v, list | dict) or len(str(v)) < 400}
            return
        for v in payload.values():
            yield from _mentions(v, feature)
    elif isinstance(payload, list):
        for v in payload:
            yield from _mentions(v, feature)


# ---------------------------------------------------------------------------------------------- search


@st.cache_resource(show_spinner=False)
def _explanation_index(path: str) -> ExplanationIndex:
    """One embedding index per store, kept for the life of the server process."""
    return ExplanationIndex()


def search_explanations(
    path: str, query: str, k: int = 20, sae_id: str | None = None
) -> list[ExplanationHit]:
    """Explanations most similar to `query` (MiniLM cosine; embeds only explanations added since the last call)."""
    index = _explanation_index(path)
    index.update(_explanation_rows(path, store_version(path)))
    return index.search(query, k, sae_id)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _explanation_rows(path: str, version: tuple[int, ...]) -> list[tuple[int, str, int, str, str]]:
    return [(int(e.id or 0), e.sae_id, e.feature, e.explainer, e.text) for e in _open(path).explanations()]


def features_for_token(
    path: str, sae_id: str, token: str, ignore_case: bool = False, limit: int = 25
) -> tuple[int, list[TokenFeatureHit]]:
    """(occurrences, features ranked by how often they fire) for a token string over the indexed windows."""
    return _features_for_token(path, store_version(path), sae_id, token, ignore_case, limit)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _features_for_token(
    path: str, version: tuple[int, ...], sae_id: str, token: str, ignore_case: bool, limit: int
) -> tuple[int, list[TokenFeatureHit]]:
    store = _open(path)
    with store.session():
        progress = store.index_progress(sae_id)
        if progress is None:
            raise NotIndexedError(f"SAE {sae_id} has no activations yet; run `{FILL_COMMANDS['index']}`.")
        total, found = store.features_for_token(sae_id, token, ignore_case=ignore_case, limit=limit)
    return total, [TokenFeatureHit(f.feature, f.n_fires, total, f.mean_value, f.max_value) for f in found]


def feature_labels(path: str, sae_id: str, features: list[int]) -> dict[int, str]:
    """The newest explanation text of each feature (features without one are absent)."""
    rows = _explanation_rows(path, store_version(path))
    wanted = set(features)
    return {f: text for _, s, f, _, text in rows if s == sae_id and f in wanted}


# ---------------------------------------------------------------------------------------------- compare


def headline_metric(scorer: str, metrics: dict[str, Any]) -> tuple[str, float] | None:
    """The (name, value) a score is summarised by: its scorer's headline metric (None when absent or not a number)."""
    from sae_workbench.evaluation.scorers.registry import (
        headline_metric as scorer_headline,  # the scorers load on first use
    )

    name = scorer_headline(scorer)
    value = metrics.get(name) if name else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(name), float(value)
    return None


def score_table(path: str, sae_id: str) -> pd.DataFrame:
    """Long table: one row per (explanation, score) with explainer, scorer, negative source and headline metric."""
    return _score_table(path, store_version(path), sae_id)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _score_table(path: str, version: tuple[int, ...], sae_id: str) -> pd.DataFrame:
    from sae_workbench.evaluation.scorers.report import scored_by

    store = _open(path)
    with store.session():
        explanations = {e.id: e for e in store.explanations(sae_id=sae_id)}
        scores = store.scores(sae_id=sae_id)
    rows = []
    for s in scores:
        e = explanations.get(s.explanation_id)
        head = headline_metric(s.scorer, s.metrics) if s.status is Status.OK else None
        if e is None or head is None:
            continue
        rows.append(
            {
                "feature": e.feature,
                "explanation_id": e.id,
                "explainer": e.explainer,
                "llm_model": e.llm_model or "(offline)",
                "scorer": s.scorer,
                "negative_source": s.negative_source or "(none)",
                "metric": head[0],
                "value": head[1],
                "circular": bool(s.metrics.get("circular")),
                "scored_by": scored_by(s.provenance),
            }
        )
    columns = [
        "feature",
        "explanation_id",
        "explainer",
        "llm_model",
        "scorer",
        "negative_source",
        "metric",
        "value",
        "circular",
        "scored_by",
    ]
    return pd.DataFrame(rows, columns=columns)


def llm_models(path: str, sae_id: str) -> pd.DataFrame:
    """One row per explainer and LLM behind the SAE's explanations: the model, its size as its name states it, the
    structured-output form its provenance records, and how many explanations it made (empty when all are offline)."""
    return _llm_models(path, store_version(path), sae_id)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _llm_models(path: str, version: tuple[int, ...], sae_id: str) -> pd.DataFrame:
    from sae_workbench.evaluation.scorers.report import model_rows, model_size

    rows = [
        {"explainer": m.explainer, "model": m.model, "size": model_size(m.model),
         "structured output": m.structured_output, "explanations": m.explanations}
        for m in model_rows(_open(path), sae_id)
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["explainer", "model", "size", "structured output", "explanations"])


def smoke_test_note(models: pd.DataFrame) -> str:
    """The report's plain warning for the models of `llm_models` too small to mean much ('' when none is)."""
    from sae_workbench.evaluation.scorers.report import smoke_test_warning

    return smoke_test_warning(models["model"]) if not models.empty else ""


def explainer_scorer_matrix(table: pd.DataFrame) -> pd.DataFrame:
    """Mean headline metric per explainer (rows) × scorer/negative source (columns), with counts; a scorer judged
    by the model that picked its close negatives (embedding under SIMILAR*) is named "(circular)", and one run by an
    LLM carries the model in brackets (its own column: never averaged with the offline scorer's values)."""
    if table.empty:
        return pd.DataFrame()
    circular = (
        table["circular"].astype(bool).map(lambda c: " (circular)" if c else "")
        if "circular" in table
        else ""
    )
    by = table["scored_by"].map(lambda m: f" [{m}]" if m else "") if "scored_by" in table else ""
    table = table.assign(
        scorer_col=table["scorer"]
        + by
        + circular
        + " · "
        + table["negative_source"]
        + " · "
        + table["metric"]
    )
    means = table.pivot_table(index="explainer", columns="scorer_col", values="value", aggfunc="mean")
    means.columns = [str(c) for c in means.columns]
    means["n_features"] = table.groupby("explainer")["feature"].nunique()
    return means.reset_index()


def verdict_flips(table: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Explanations whose verdict (headline ≥ threshold) differs between random and close (SIMILAR*) negatives."""
    if table.empty:
        return pd.DataFrame()
    close = table["negative_source"].str.startswith("SIMILAR")
    rand = table["negative_source"].str.startswith("RANDOM")
    key = ["explanation_id", "feature", "explainer", "scorer", "scored_by", "metric"]
    a = table[rand].groupby(key).agg(random_negatives=("value", "mean"))
    b = table[close].groupby(key).agg(close_negatives=("value", "mean"))
    both = a.join(b, how="inner").reset_index()
    if both.empty:
        return both
    flipped = (both["random_negatives"] >= threshold) != (both["close_negatives"] >= threshold)
    out = both[flipped].assign(drop=lambda d: d["random_negatives"] - d["close_negatives"])
    return out.sort_values("drop", ascending=False).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------- playground (its stored BOS id)


def index_bos_id(path: str, sae_id: str) -> int | None:
    """The BOS id indexing used for this SAE (so the Playground matches the stored activations), if recorded."""
    progress = _index_progress(path, store_version(path), sae_id)
    if progress is None:
        return None
    value = progress.config.get("bos_id")
    return int(value) if isinstance(value, int | float) and not math.isnan(value) else None


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _index_progress(path: str, version: tuple[int, ...], sae_id: str):
    return _open(path).index_progress(sae_id)


def environment_note() -> str:
    """One line saying which store file is served (shown in the sidebar)."""
    path = store_path()
    return f"store: `{path}`" if path else "no store configured (pass --store or set $WORKBENCH_STORE)"


def clear_caches() -> None:
    """Drop cached query results (the Retry button after a busy store)."""
    st.cache_data.clear()


# ---------------------------------------------------------------------------------------------- why it fires


class TokenShareView(NamedTuple):
    """One stored DePass token attribution, aligned to its window's tokens for the heatmap."""

    window_id: int | None
    position: int
    """The attributed position (the text is cut after it, so later tokens get share 0)."""
    token_strings: list[str]
    shares: list[float]
    """Each token's share of the pre-activation at `position`, padded with 0 to the window's length."""
    bos_position: int | None
    rule: str
    activation: float
    pre_activation: float
    completeness_error: float


class FeatureAttributions(NamedTuple):
    """What the Feature page's "Why it fires" section shows: stored DePass attributions and causal effects."""

    tokens: list[TokenShareView]
    components: list[tuple[str, float, int]]
    """(head or MLP name, mean share over the stored examples, examples it appears in), largest share first."""
    effects: list[tuple[str, dict[str, Any]]]
    """(kind, result) of the stored ablations and steering, oldest first."""


def feature_attributions(path: str, sae_id: str, feature: int) -> FeatureAttributions:
    """A feature's stored DePass token shares (per example), head/MLP shares and ablation/steering effects."""
    return _feature_attributions(path, store_version(path), sae_id, int(feature))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=256)
def _feature_attributions(
    path: str, version: tuple[int, ...], sae_id: str, feature: int
) -> FeatureAttributions:
    store = _open(path)
    with store.session():
        token_rows = store.attributions(sae_id, feature, level="tokens", method="depass")
        component_rows = store.attributions(sae_id, feature, level="components", method="depass")
        effects = [(e.kind, e.result) for e in store.effects(sae_id, feature)]
        windows = windows_of_rows(store, sae_id, token_rows)
    tokens: list[TokenShareView] = []
    for row in token_rows:
        res = row.result
        scores = [float(s) for s in res.get("scores_N", [])]
        window = windows.get(row.window_id) if row.window_id is not None else None
        strings = (
            list(window.token_strings) if window is not None else [str(t) for t in res.get("token_ids_N", [])]
        )
        strings = strings if len(strings) >= len(scores) else strings + [""] * (len(scores) - len(strings))
        tokens.append(
            TokenShareView(
                window_id=row.window_id,
                position=row.position,
                token_strings=strings,
                shares=scores + [0.0] * (len(strings) - len(scores)),
                bos_position=res.get("bos_position"),
                rule=row.rule,
                activation=float(res.get("activation", math.nan)),
                pre_activation=float(res.get("pre_activation", math.nan)),
                completeness_error=float(res.get("completeness_error", math.nan)),
            )
        )
    totals: dict[str, list[float]] = {}
    for row in component_rows:
        res = row.result
        for ell, heads in enumerate(res.get("head_scores_LH", [])):
            for h, score in enumerate(heads):
                totals.setdefault(f"L{ell}.H{h}", []).append(float(score))
        for ell, score in enumerate(res.get("mlp_scores_L", [])):
            totals.setdefault(f"L{ell}.MLP", []).append(float(score))
    components = sorted(
        ((name, sum(v) / len(v), len(v)) for name, v in totals.items()), key=lambda item: -item[1]
    )
    return FeatureAttributions(tokens, components, effects)


class InteractionView(NamedTuple):
    """One stored ProxySPEX result as the Feature page's "Interactions" section shows it."""

    window_id: int | None
    position: int
    player_type: str
    budget: int
    seed: int
    status: str
    """ok, or constant (the feature does not respond to masking: `message` says so)."""
    message: str
    top_terms: list[dict[str, Any]]
    """Largest Möbius terms of order >= 2: players' labels, value, each player's singleton."""
    order2: list[dict[str, Any]]
    index: str
    r2: dict[str, float]
    full_value: float
    empty_value: float
    wall_s: float


def feature_interactions(path: str, sae_id: str, feature: int) -> list[InteractionView]:
    """A feature's stored ProxySPEX interaction results (read only; nothing is computed here)."""
    return _feature_interactions(path, store_version(path), sae_id, int(feature))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=256)
def _feature_interactions(
    path: str, version: tuple[int, ...], sae_id: str, feature: int
) -> list[InteractionView]:
    rows = _open(path).interactions(sae_id, feature)
    return [
        InteractionView(
            window_id=r.window_id, position=r.position, player_type=r.player_type, budget=r.budget, seed=r.seed,
            status=r.status, message=str(r.result.get("message", "")), top_terms=list(r.result.get("top_terms", [])),
            order2=list(r.result.get("order2", [])), index=str(r.result.get("index", "")),
            r2={k: float(v) for k, v in r.result.get("r2", {}).items()},
            full_value=float(r.result.get("full_value", math.nan)),
            empty_value=float(r.result.get("empty_value", math.nan)), wall_s=float(r.result.get("wall_s", math.nan)),
        )
        for r in rows
    ]  # fmt: skip


def windows_of_rows(store: Store, sae_id: str, rows: Sequence[Any]) -> dict[int, Any]:
    """The indexed windows that attribution rows (DePass's or LRP's) name, by id; empty when unreadable."""
    progress = store.index_progress(sae_id)
    ids = sorted({r.window_id for r in rows if r.window_id is not None})
    if not ids or progress is None:
        return {}
    try:
        return {w.window_id: w for w in store.get_windows(progress.corpus, ids)}
    except StoreError:
        return {}
