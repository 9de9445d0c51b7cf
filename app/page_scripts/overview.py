"""Overview: every SAE in the store with its metrics, density distribution, dead/dense counts and absorption."""

import numpy as np
import pandas as pd
import streamlit as st

from sae_workbench.app import commands, queries, ui
from sae_workbench.app.labels import readable_columns

ui.page_setup()
path = ui.require_store()
ui.sidebar_footer()
st.title("Overview")

saes = ui.guarded(queries.list_saes, path)
if not saes:
    st.info(
        "**The store has no SAEs yet.** Train an SAE and index it over a corpus, then reload:\n\n"
        f"1. `{commands.FILL_COMMANDS['sae']}`\n2. `{commands.FILL_COMMANDS['index']}`\n"
        f"3. `{commands.FILL_COMMANDS['explain']}` (explanations) and `{commands.FILL_COMMANDS['score']}` (scores)"
    )
    st.stop()


def _numeric_metrics(metrics: dict) -> dict[str, float]:
    """Top-level numeric metrics of an SAE (nested dicts flattened one level)."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if isinstance(v, dict):
            out.update({f"{k}.{k2}": float(v2) for k2, v2 in v.items() if isinstance(v2, int | float)})
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out[k] = float(v)
    return out


summaries = [ui.guarded(queries.sae_summary, path, s.sae_id) for s in saes]
table = pd.DataFrame(
    [
        {
            "sae_id": s.record.sae_id,
            "model": s.record.model,
            "hook": s.record.hook,
            "d_sae": s.record.d_sae,
            "indexed tokens": s.progress.n_tokens if s.progress else 0,
            "activation rows": s.n_activation_rows,
            "dead": s.n_dead if s.progress else None,
            "dense": s.n_dense,
            "explanations": s.n_explanations,
            "scores": s.n_scores,
            **_numeric_metrics(s.record.metrics),
        }
        for s in summaries
    ]
)
st.dataframe(table, hide_index=True, width="stretch")

sae = ui.pick_sae(path)
summary = next(s for s in summaries if s.record.sae_id == sae.sae_id)
st.subheader(f"SAE {sae.sae_id[:12]} · {sae.model} · {sae.hook}")

metrics = _numeric_metrics(sae.metrics)
cols = st.columns(5)
cols[0].metric("Features", f"{sae.d_sae:,}")
ev = metrics.get("explained_variance")
cols[1].metric("Explained variance (↑)", f"{ev:.3f}" if ev is not None else "–")
l0 = metrics.get("l0")
cols[2].metric("L0 (features/token)", f"{l0:.1f}" if l0 is not None else "–")
if summary.progress is None:
    cols[3].metric("Dead (↓)", "–")
    cols[4].metric("Dense (↓)", "–")
    ui.fill_note("activations for this SAE", "index")
    st.stop()
cols[3].metric(
    "Dead (↓)",
    f"{summary.n_dead:,}",
    help=f"Never active over {summary.progress.n_tokens:,} indexed tokens ({summary.n_dead / sae.d_sae:.1%}).",
)
cols[4].metric(
    "Dense (↓)", f"{summary.n_dense:,}", help=f"Density > {summary.dense_threshold:.0%} of tokens."
)
if not summary.progress.finalized:
    st.warning(
        f"Indexing in progress: {summary.progress.next_window:,} windows so far; statistics appear when it finishes."
    )

st.markdown("**Feature density** (log10 fraction of indexed tokens; dead features are not shown)")
if len(summary.log10_density):
    counts, edges = np.histogram(summary.log10_density, bins=30)
    hist = pd.DataFrame({"log10 density": np.round((edges[:-1] + edges[1:]) / 2, 2), "features": counts})
    st.bar_chart(hist, x="log10 density", y="features", height=220)
else:
    ui.fill_note("feature statistics", "index")

with st.expander("Features by density"):
    features = ui.guarded(queries.feature_density_table, path, sae.sae_id)
    st.dataframe(features, hide_index=True, width="stretch", height=300)

st.markdown("**Absorption** (first-letter task, SAEBench metrics)")
absorption = [e for e in summary.evals if "absorption" in e.eval_type_id]
if not absorption:
    ui.fill_note("absorption evals", "absorption")
for ev_record in absorption:
    payload = ev_record.eval
    metrics_block = payload.get("eval_result_metrics", payload.get("metrics", payload))
    flat = pd.json_normalize(metrics_block, sep=".") if isinstance(metrics_block, dict) else pd.DataFrame()
    st.caption(f"{ev_record.eval_type_id} · eval {ev_record.id} · {ev_record.created_at}")
    numeric = {k: v for k, v in flat.iloc[0].items() if isinstance(v, int | float)} if len(flat) else {}
    if numeric:
        st.dataframe(
            pd.DataFrame([list(numeric.values())], columns=readable_columns(str(k) for k in numeric)),
            hide_index=True,
        )
    else:
        st.json(payload, expanded=False)

other = [e for e in summary.evals if "absorption" not in e.eval_type_id]
if other:
    st.markdown("**Other evals**")
    for ev_record in other:
        with st.expander(f"{ev_record.eval_type_id} · eval {ev_record.id}"):
            st.json(ev_record.eval, expanded=False)
