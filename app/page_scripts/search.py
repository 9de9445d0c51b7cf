"""Search: by feature id, by explanation text (semantic, local MiniLM, no API key), and by token."""

import pandas as pd
import streamlit as st

from sae_workbench.app import queries, render, ui

ui.page_setup()
path = ui.require_store()
sae = ui.pick_sae(path)
ui.sidebar_footer()
st.title("Search")

by_text, by_token, by_id = st.tabs(["By explanation", "By token", "By feature id"])

with by_text:
    query = st.text_input(
        "Describe a feature", placeholder="e.g. references to God in scripture", key="explanation_query"
    )
    only_this = st.checkbox("Only this SAE", value=True, key="explanation_only_sae")
    if query:
        with st.spinner("Embedding explanations (first search only)…"):
            hits = ui.guarded(queries.search_explanations, path, query, 20, sae.sae_id if only_this else None)
        if not hits:
            ui.fill_note("explanations", "explain")
        for hit in hits:
            cols = st.columns([1, 6])
            cols[0].page_link(
                ui.page_script("feature"),
                label=f"feature {hit.feature}",
                query_params={"sae": hit.sae_id, "feature": str(hit.feature)},
            )
            cols[1].markdown(
                f'<span class="wb-search-hit">{render.escape_text(hit.text)}</span> '
                f'<span class="wb-special">· {render.escape_text(hit.explainer)} · sim {hit.similarity:.2f}</span>',
                unsafe_allow_html=True,
            )

with by_token:
    token = st.text_input("Token (as it appears in the text; surrounding spaces ignored)", key="token_query")
    ignore_case = st.checkbox("Ignore case", value=False, key="token_ignore_case")
    if token.strip():
        total, found = ui.guarded(queries.features_for_token, path, sae.sae_id, token, ignore_case)
        st.caption(f"{total:,} occurrences of {token.strip()!r} among indexed tokens")
        if not found:
            st.info(
                "No stored feature fires on this token."
                if total
                else "The token does not occur in the corpus."
            )
        else:
            labels = queries.feature_labels(path, sae.sae_id, [h.feature for h in found])
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "feature": h.feature,
                            "fires on": f"{h.n_fires / max(total, 1):.0%}",
                            "n": h.n_fires,
                            "mean act": h.mean_value,
                            "max act": h.max_value,
                            "explanation": labels.get(h.feature, ""),
                        }
                        for h in found
                    ]
                ),
                hide_index=True,
                width="stretch",
            )
            for h in found[:10]:
                st.page_link(
                    ui.page_script("feature"),
                    label=f"open feature {h.feature}",
                    query_params={"sae": sae.sae_id, "feature": str(h.feature)},
                )

with by_id:
    fid = st.number_input(
        "Feature id", min_value=0, max_value=max(sae.d_sae - 1, 0), value=0, key="feature_id_query"
    )
    st.page_link(
        ui.page_script("feature"),
        label=f"Open feature {fid}",
        query_params={"sae": sae.sae_id, "feature": str(fid)},
    )
