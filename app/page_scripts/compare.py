"""Compare: explainers × scorers (sortable), and features whose verdict changed with close negatives."""

import streamlit as st

from sae_workbench.app import commands, queries, ui

ui.page_setup()
path = ui.require_store()
sae = ui.pick_sae(path)
ui.sidebar_footer()
st.title("Compare explainers and scorers")

table = ui.guarded(queries.score_table, path, sae.sae_id)
if table.empty:
    st.info(
        "**No scores for this SAE yet.** Explain features, then score the explanations:\n\n"
        f"`{commands.FILL_COMMANDS['explain']}`\n\n`{commands.FILL_COMMANDS['score']}`"
    )
    st.stop()

st.markdown(
    "Mean headline metric per explainer (rows) and scorer · negative source · metric (columns); click a column to "
    "sort. Higher is better for every headline metric shown."
)
st.dataframe(queries.explainer_scorer_matrix(table), hide_index=True, width="stretch")

st.subheader("Where close negatives changed the verdict")
metric_names = sorted(table["metric"].unique())
threshold = st.slider(
    "Verdict threshold (score ≥ threshold counts as a good explanation)", 0.0, 1.0, 0.7, 0.05
)
flips = queries.verdict_flips(table, threshold)
if flips.empty:
    st.caption(
        "No explanation changed verdict between random and close (SIMILAR) negatives at this threshold"
        + (
            ""
            if table["negative_source"].str.startswith("SIMILAR").any()
            else " — no close-negative scores stored yet"
        )
        + f" (metrics: {', '.join(metric_names)})."
    )
else:
    st.dataframe(flips, hide_index=True, width="stretch")
    for f in flips["feature"].unique()[:10]:
        st.page_link(
            ui.page_script("feature"),
            label=f"open feature {f}",
            query_params={"sae": sae.sae_id, "feature": str(f)},
        )

models = ui.guarded(queries.llm_models, path, sae.sae_id)
if not models.empty:
    st.subheader("LLMs behind the explanations")
    st.dataframe(models, hide_index=True, width="stretch")
    warning = queries.smoke_test_note(models)
    if warning:
        st.warning(warning)

with st.expander("All scores"):
    st.dataframe(table, hide_index=True, width="stretch")
