"""Playground: type text, see which features fire on each token (model + SAE loaded once per server)."""

import numpy as np
import pandas as pd
import streamlit as st

from sae_workbench.app import live_model, queries, render, ui

ui.page_setup()
path = ui.require_store()
sae = ui.pick_sae(path)
ui.sidebar_footer()
st.title("Playground")

recorded = live_model.sae_location(sae)
restricted = live_model.playground_restricted()
if restricted:
    st.caption(
        "Served on the network: the Playground loads only SAEs registered in the store, from the files the store "
        "recorded (serve on 127.0.0.1 to load other SAE files)."
    )
sae_spec = st.text_input(
    "SAE files",
    value=recorded or "",
    help="The SAE folder the store recorded"
    + (" (fixed: this app is served on the network)." if restricted else "; change it if the files moved."),
    key="playground_sae_path",
    disabled=restricted,
)
if restricted:
    sae_spec = recorded or ""  # a disabled field's value is never trusted: the recorded location only
if not sae_spec:
    st.info(
        "The store does not say where this SAE's files are. "
        + (
            "A network-served app loads only recorded SAE files: register it with `workbench index --sae PATH`."
            if restricted
            else "Enter the folder `workbench train` wrote."
        )
    )
    st.stop()
text = st.text_area(
    "Text", value="In the beginning God created the heaven and the earth.", key="playground_text"
)
if not st.button("Run", type="primary", key="playground_run") and "playground_result" not in st.session_state:
    st.caption(f"Runs {sae.model} to {sae.hook} and the SAE on your text (first run loads them).")
    st.stop()

result = ui.guarded(
    live_model.run_playground, sae, sae_spec, text, ui.guarded(queries.index_bos_id, path, sae.sae_id)
)
st.session_state["playground_result"] = True
acts_TF = result.acts_TF
counted = np.ones(len(result.token_strings), dtype=bool)
counted[result.skip_positions] = False
totals_F = acts_TF[counted].sum(axis=0)
top_features = [int(f) for f in np.argsort(-totals_F)[:20] if totals_F[f] > 0]
if not top_features:
    st.info("No feature fired on this text.")
    st.stop()

labels = queries.feature_labels(path, sae.sae_id, top_features)
chosen = st.selectbox(
    "Shade tokens by feature",
    top_features,
    format_func=lambda f: f"{f} · {labels.get(f, '')[:60]}",
    key="playground_feature",
)
values = acts_TF[:, chosen]
st.markdown(
    render.render_tokens(
        result.token_strings, values, max_value=float(values.max()) or 1.0, skip=result.skip_positions
    ),
    unsafe_allow_html=True,
)
st.markdown("**Top features per token**")
rows = []
for pos in np.flatnonzero(counted):
    order = np.argsort(-acts_TF[pos])[:5]
    rows.append(
        {
            "position": int(pos),
            "token": result.token_strings[pos],
            "features": ", ".join(f"{int(f)} ({acts_TF[pos, f]:.2f})" for f in order if acts_TF[pos, f] > 0),
        }
    )
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
st.page_link(
    ui.page_script("feature"),
    label=f"Open feature {chosen}",
    query_params={"sae": sae.sae_id, "feature": str(chosen)},
)
if st.toggle(
    f"Why feature {chosen} fires at its peak (DePass token shares)",
    value=False,
    key="playground_depass",
    help="Each token's exact share of the feature's pre-activation at its peak (DePass, arXiv 2510.18462).",
):
    peak = int(np.argmax(np.where(counted, values, -np.inf)))
    shares = ui.guarded(
        live_model.run_playground_depass,
        sae,
        sae_spec,
        text,
        ui.guarded(queries.index_bos_id, path, sae.sae_id),
        chosen,
        peak,
    )
    shares_N = list(shares.scores_N) + [0.0] * (len(result.token_strings) - len(shares.scores_N))
    skip = [*result.skip_positions]
    scale = max((abs(s) for i, s in enumerate(shares_N) if i not in skip), default=0.0)
    top = max(
        (i for i in range(len(shares.scores_N)) if i not in skip), key=lambda i: shares_N[i], default=None
    )
    st.markdown(
        f'<div class="wb-special" style="font-size:0.75rem">position {shares.position} · activation '
        f"{shares.activation:.3f} · pre-activation {shares.pre_activation:.3f} · completeness error "
        f"{shares.completeness_error:.2g}"
        + (f" · top token {render.escape_text(repr(result.token_strings[top]))} ({shares_N[top]:+.3f})"
           if top is not None else "")
        + "</div>"
        + render.render_tokens(
            result.token_strings, shares_N, max_value=max(scale, 1e-9), skip=skip, peak_position=shares.position
        ),
        unsafe_allow_html=True,
    )  # fmt: skip
