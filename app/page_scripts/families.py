"""Families: SAEs of one hook matched with each other — shared-fraction curves, a feature's splitting tree across
widths, and explanation stability (filled by `workbench match`)."""

import pandas as pd
import streamlit as st

from sae_workbench.app import family_queries, render, ui

ui.page_setup()
path = ui.require_store()
ui.sidebar_footer()
st.title("SAE families")

runs = ui.guarded(family_queries.family_runs, path)
if runs.empty:
    st.info(
        "**No matched SAEs yet.** Match two or more SAEs of one hook (seeds, widths), e.g.\n\n"
        f"`workbench match --store {path} --sae <SAE_A> --sae <SAE_B> --method hungarian,greedy`"
    )
    st.stop()

st.subheader("Shared fraction")
st.markdown(
    "Fraction of features whose one-to-one match clears each similarity threshold (Paulo & Belrose, arXiv "
    "2501.16615; 0.7 is the value most often quoted). Dead features are counted apart, not as unshared."
)
curves = ui.guarded(family_queries.shared_curves, path)
if curves.empty:
    st.caption("No one-to-one (hungarian or sinkhorn) run stored: greedy runs give no curve.")
else:
    st.line_chart(curves, x="threshold", y="shared fraction", color="pair", height=280)
    st.dataframe(family_queries.shared_at(curves, 0.7), hide_index=True, width="stretch")

st.subheader("Splitting across widths")
chains = ui.guarded(family_queries.width_chains, path)
if not chains:
    st.caption(
        "No SAEs of different widths linked yet: match SAEs of two or more widths with `workbench match`."
    )
else:
    labels = {" → ".join(c): c for c in chains}
    chain = labels[st.selectbox("Widths (narrowest first)", list(labels), key="family_chain")]
    threshold = st.slider("Child threshold (decoder cosine)", 0.5, 0.95, 0.7, 0.05, key="family_threshold")
    splitting = ui.guarded(family_queries.top_splitting_features, path, chain, threshold)
    st.caption(
        f"{len(splitting)} features of {chain[0]} split into two or more children"
        + (f": {', '.join(str(f) for f in splitting[:20])}" if splitting else "")
    )
    root = int(
        st.number_input(
            "Feature of the narrowest SAE",
            min_value=0,
            value=splitting[0] if splitting else 0,
            key="family_root",
        )
    )
    tree = ui.guarded(family_queries.splitting_tree, path, chain, root, threshold)
    for node in tree:
        sim = "" if node.sim is None else f" · cos {node.sim:.2f}"
        cov = "" if node.coverage is None else f" · children cover {node.coverage:.0%} of its top windows"
        absorb = f" · {node.absorption} absorption entries" if node.absorption else ""
        text = render.escape_text(node.explanation) if node.explanation else "(no explanation)"
        st.markdown(
            f'<div class="wb-tree-node" style="margin-left:{node.level * 1.5}rem">'
            f"<b>d={node.d_sae} · feature {node.feature}</b>{sim}{cov}{absorb} — {text}</div>",
            unsafe_allow_html=True,
        )
        st.page_link(
            ui.page_script("feature"),
            label=f"open feature {node.feature} of {node.sae_id[:8]}",
            query_params={"sae": node.sae_id, "feature": str(node.feature)},
        )

st.subheader("Explanation stability")
one_to_one = [r for r in runs.to_dict("records") if r["method"] in family_queries.ONE_TO_ONE]
if not one_to_one:
    st.caption("No one-to-one run stored.")
else:
    options = {
        f"{r['sae_a'][:8]} ({r['d_a']}) ↔ {r['sae_b'][:8]} ({r['d_b']}) · {r['method']}": str(r["match_key"])
        for r in one_to_one
    }
    key = options[st.selectbox("Matched pair of SAEs", list(options), key="family_run")]
    table: pd.DataFrame = ui.guarded(family_queries.stability, path, key)
    if table.empty:
        st.caption(
            "No explanation pairs stored for this run: explain both SAEs, then "
            f"`workbench match --store {path} --sae A --sae B --explainer lexical`, and score the transfers with "
            "`workbench score --sae B --explainer transfer`."
        )
    else:
        st.markdown(
            "Matched pairs explained on both sides: the similarity of the two explanations (MiniLM cosine), and SAE "
            "A's explanation scored on B's feature (explainer `transfer`, B's test split) next to B's own."
        )
        st.dataframe(table, hide_index=True, width="stretch")

with st.expander("All match runs"):
    st.dataframe(runs, hide_index=True, width="stretch")
