"""Feature: the full dashboard of one feature — statistics, examples, logit lens, neighbours, explanations, scores,
PRISM clusters, the tree explainer's tree, negatives and absorption."""

from typing import Any

import pandas as pd
import streamlit as st

from sae_workbench.app import commands, family_queries, hypotheses, lrp_queries, queries, render, ui
from sae_workbench.app.labels import readable_columns
from sae_workbench.status import Status

ui.page_setup()
path = ui.require_store()
sae = ui.pick_sae(path)
ui.sidebar_footer()

try:
    default_feature = int(st.query_params.get("feature", 0))
except ValueError:
    default_feature = 0
feature = int(
    st.sidebar.number_input(
        "Feature", min_value=0, value=max(default_feature, 0), step=1, key="feature_input"
    )
)
if st.query_params.get("feature") != str(feature):
    st.query_params["feature"] = str(feature)
full_windows = st.sidebar.toggle(
    "Show whole windows", value=False, help="Off: 24 tokens before the peak, 8 after."
)

dash = ui.guarded(queries.feature_dashboard, path, sae.sae_id, feature)
stats = dash.stats
st.title(f"Feature {feature}")
st.caption(f"SAE `{sae.sae_id}` · {sae.model} · {sae.hook} · corpus `{dash.corpus}`")

dead = stats.n_active == 0
live_explanations = [e for e in dash.explanations if e.explanation.status is not Status.DEAD]
if dead:
    st.warning(
        f"**Dead feature.** Feature {feature} never fired over the {dash.n_tokens:,} indexed tokens of corpus "
        f"`{dash.corpus}`: it has no activations, examples or statistics to show."
    )
if live_explanations:
    newest = live_explanations[-1].explanation
    st.markdown(
        f'<div class="wb-explanation" style="font-size:1.15rem">“{render.escape_text(newest.text)}”'
        f' <span class="wb-special">— {render.escape_text(newest.explainer)}</span></div>',
        unsafe_allow_html=True,
    )
elif not dead:
    ui.fill_note("explanations for this feature", "explain")

cols = st.columns(5)
cols[0].metric(
    "Density", f"{stats.density:.3%}", help=f"{stats.n_active:,} of {dash.n_tokens:,} indexed tokens"
)
cols[1].metric("Active windows", f"{stats.n_windows_active:,}")
cols[2].metric("Max activation", f"{stats.max_value:.3f}")
cols[3].metric("Mean (when active)", f"{stats.mean_value:.3f}")
cols[4].metric("Explanations", len(dash.explanations))
left, right = st.columns([3, 2])
with left:
    st.markdown("**Activation histogram** (active tokens)")
    if stats.hist_counts:
        mids = [(a + b) / 2 for a, b in zip(stats.hist_edges[:-1], stats.hist_edges[1:], strict=True)]
        st.bar_chart(pd.DataFrame({"activation": [round(m, 3) for m in mids], "tokens": stats.hist_counts}),
                     x="activation", y="tokens", height=200)  # fmt: skip
    elif dead:
        st.caption(f"None: the feature never fired over {dash.n_tokens:,} indexed tokens.")
    else:
        ui.fill_note("activation statistics", "index")
    if stats.quantiles:
        st.dataframe(
            pd.DataFrame([stats.quantiles], columns=[f"q{lv:g}" for lv in stats.quantile_levels]),
            hide_index=True,
        )
with right:
    st.markdown("**Logit lens** — tokens this feature's decoder direction promotes / suppresses")
    if stats.logit_top_tokens:
        st.markdown(
            render.render_token_list(stats.logit_top_tokens, stats.logit_top_values), unsafe_allow_html=True
        )
        st.markdown(
            render.render_token_list(stats.logit_bottom_tokens, stats.logit_bottom_values),
            unsafe_allow_html=True,
        )
    else:
        ui.fill_note("logit-lens tokens", "index")
    st.markdown("**Neighbours**")
    nb_cols = st.columns(2)
    # The statistics step writes every feature's logit lens and both neighbour lists in one row: with that row present
    # an empty co-occurrence list is a result (the feature never fired with another in the rows read), not a gap.
    neighbours_computed = bool(stats.logit_top_tokens or stats.decoder_neighbours)
    for col, title, ids, vals in (
        (nb_cols[0], "decoder cosine", stats.decoder_neighbours, stats.decoder_cosines),
        (nb_cols[1], "co-occurrence (Jaccard)", stats.cooc_neighbours, stats.cooc_jaccard),
    ):
        col.caption(title)
        if not ids and not neighbours_computed:
            col.caption("– (filled by `workbench index`)")
        elif not ids:
            col.caption(
                "– none: the feature never fired"
                if dead
                else "– none: it never fired together with another feature in the rows the statistics step read"
            )
        for nid, val in list(zip(ids, vals, strict=True))[:8]:
            col.page_link(
                ui.page_script("feature"),
                label=f"feature {nid} · {val:.2f}",
                query_params={"sae": sae.sae_id, "feature": str(nid)},
            )


def show_examples(examples: list[Any], max_value: float) -> None:
    """Render windows as shaded tokens (peak outlined, value on hover)."""
    for ex in examples:
        start, stop = (
            (0, None)
            if full_windows
            else render.context_bounds(len(ex.token_strings), ex.max_position, 24, 8)
        )
        html = render.render_tokens(
            ex.token_strings,
            ex.values,
            max_value=max_value,
            skip=[i for i, m in enumerate(ex.mask) if not m],
            peak_position=ex.max_position,
            start=start,
            stop=stop,
        )
        st.markdown(
            f'<div class="wb-special" style="font-size:0.75rem">window {ex.window_id} · max {ex.max_value:.3f}</div>'
            + html,
            unsafe_allow_html=True,
        )


tab_top, tab_q, tab_expl, tab_neg, tab_abs = st.tabs(
    ["Top examples", "Quantile examples", "Explanations & scores", "Negatives", "Absorption"]
)
with tab_top:
    if dash.top:
        show_examples(dash.top, stats.max_value)
    else:
        st.caption("No activating windows for this feature.")
with tab_q:
    if not dash.quantiles:
        st.caption("No activating windows for this feature.")
    for q in sorted({e.quantile for e in dash.quantiles if e.quantile is not None}):
        in_bin = [e for e in dash.quantiles if e.quantile == q]
        st.markdown(
            f"**Bin {q}** (max {max(e.max_value for e in in_bin):.3f} … {min(e.max_value for e in in_bin):.3f})"
        )
        show_examples(in_bin, stats.max_value)


def show_tree(tree: Any) -> None:
    """The tree explainer's search tree: one line per node, indented by depth, best validation node marked."""
    nodes = tree.get("nodes", tree) if isinstance(tree, dict) else tree
    if not isinstance(nodes, list):
        st.json(tree, expanded=False)
        return
    best = tree.get("best") if isinstance(tree, dict) else None
    lines = []
    for node in nodes:
        if not isinstance(node, dict):
            continue
        depth = int(node.get("depth", 0))
        text = node.get("text") or node.get("explanation") or node.get("rules") or ""
        score = node.get("validation_score", node.get("score"))
        mark = " ★" if best is not None and node.get("id") == best else ""
        score_txt = f" [{score:.3f}]" if isinstance(score, int | float) else ""
        lines.append(f"{'&nbsp;' * 4 * depth}• {render.escape_text(str(text))}{score_txt}{mark}")
    st.markdown('<div class="wb-tokens">' + "<br>".join(lines) + "</div>", unsafe_allow_html=True)


def show_clusters(clusters: Any) -> None:
    """PRISM's clusters: each description with the texts it was written from."""
    if not isinstance(clusters, list):
        st.json(clusters, expanded=False)
        return
    for i, cluster in enumerate(clusters):
        if not isinstance(cluster, dict):
            continue
        desc = cluster.get("description") or cluster.get("text") or ""
        texts = cluster.get("texts") or cluster.get("examples") or []
        st.markdown(
            f"**Cluster {cluster.get('cluster', i)}** — {render.escape_text(str(desc))}",
            unsafe_allow_html=True,
        )
        for t in texts[:20]:
            st.markdown(render.text_block(str(t)), unsafe_allow_html=True)


def show_hypothesis_form() -> None:
    """Store a hand-written explanation (explainer `manual`) of this feature, to score it like any other."""
    stored_note = st.session_state.pop("hypothesis_stored", None)
    if stored_note:
        st.success(stored_note)
    if not hypotheses.writable(path):
        st.info(
            "This app serves its store read-only, so hypotheses cannot be stored here. Use "
            f'`workbench hypothesis --store STORE --sae {sae.sae_id} --feature {feature} --text "..."`.'
        )
        return
    with st.form("hypothesis_form"):
        text = st.text_area("Hypothesis in words", key="hypothesis_text")
        rules = st.text_area(
            "Rules (optional), one per line: RULE | STRENGTH",
            key="hypothesis_rules",
            help='Lexical syntax: quoted tokens match exactly (case kept), e.g. `"LORD" after "the" | 4`; '
            "strength 0..5, default 5.",
        )
        author = st.text_input("Your name (optional)", key="hypothesis_author")
        submitted = st.form_submit_button("Store hypothesis")
    if not submitted:
        return
    try:
        stored = hypotheses.submit_hypothesis(
            path, sae.sae_id, feature, text, rules, author, hypotheses.page_window_ids(dash)
        )
    except queries.WorkbenchError as err:
        st.error(f"{type(err).__name__}: {err}")
        return
    st.session_state["hypothesis_stored"] = (
        f"{'Stored' if stored.created else 'Already stored'} as explanation {stored.explanation_id} (explainer "
        f"`manual`). Score it: `workbench score --store STORE --sae {sae.sae_id} --scorer detection "
        f"--explainer manual --features {feature}`."
    )
    st.rerun()


with tab_expl:
    with st.expander("Score your own hypothesis", expanded=not live_explanations and not dead):
        show_hypothesis_form()
    if not dash.explanations:
        ui.fill_note("explanations for this feature", "explain")
    for item in dash.explanations:
        e = item.explanation
        shown = e.text if e.status is not Status.DEAD else f"(none: dead feature, status {e.status})"
        st.markdown(
            f'<div class="wb-explanation"><b>{render.escape_text(e.explainer)}</b> '
            f'<span class="wb-special">v{render.escape_text(e.explainer_version)} · '
            f"{render.escape_text(e.llm_model or 'offline (no LLM)')}</span><br>{render.escape_text(shown)}</div>",
            unsafe_allow_html=True,
        )
        if item.scores:
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "scorer": s.scorer,
                            "version": s.scorer_version,
                            "negatives": s.negative_source or "–",
                            **{k: v for k, v in s.metrics.items() if isinstance(v, int | float | str)},
                        }
                        for s in item.scores
                    ]
                ),
                hide_index=True,
            )
        else:
            st.caption(f"Not scored yet — `{commands.FILL_COMMANDS['score']}`.")
        if e.rules:
            with st.expander("Structured rules"):
                st.json(e.rules, expanded=True)
        if "tree" in e.extra or e.explainer == "tree":
            with st.expander("Tree explainer: the whole search tree"):
                show_tree(e.extra.get("tree", e.extra))
        if "clusters" in e.extra or e.explainer == "prism":
            with st.expander("PRISM clusters and their texts", expanded=True):
                show_clusters(e.extra.get("clusters", e.extra))
        with st.expander("Provenance"):
            st.json(
                {
                    "explanation_id": e.id,
                    "config_key": e.config_key,
                    "explainer_version": e.explainer_version,
                    "prompt_version": e.prompt_version,
                    "llm_model": e.llm_model,
                    "llm_params": e.llm_params,
                    "sampling": e.sampling,
                    "example_ids": e.example_ids,
                    "negative_ids": e.negative_ids,
                    "tokens_in": e.tokens_in,
                    "tokens_out": e.tokens_out,
                    "seconds": e.seconds,
                    "created_at": str(e.created_at),
                    **({"submitted": e.extra["provenance"]} if "provenance" in e.extra else {}),
                },
                expanded=False,
            )
        st.divider()

with tab_neg:
    if not dash.samples:
        ui.fill_note("negatives for this feature", "negatives")
    for sample in dash.samples:
        st.markdown(f"**{sample.source}** · seed {sample.seed} · {len(sample.examples)} windows")
        st.caption(", ".join(f"{k}={v}" for k, v in sample.config.items()))
        show_examples(sample.examples[:10], max(stats.max_value, 1e-9))

with tab_abs:
    if dash.absorption_evals == 0:
        ui.fill_note("absorption evals for this SAE", "absorption")
    elif not dash.absorption:
        st.caption("This feature is neither a main first-letter feature nor an absorber in the stored evals.")
    else:
        table = pd.DataFrame(dash.absorption)
        table.columns = readable_columns(str(c) for c in table.columns)
        st.dataframe(table, hide_index=True)


def show_effect(kind: str, result: dict[str, Any]) -> None:
    """One stored ablation (loss/KL change, promoted/suppressed tokens) or steering run (continuations)."""

    def shift_list(shifts: list[dict[str, Any]]) -> str:
        return render.render_token_list(
            [str(s.get("token", "")) for s in shifts], [float(s.get("logit_change", 0.0)) for s in shifts]
        )

    if kind == "steering":
        st.markdown(
            f"**Steering** from the top example's prefix ({len(result.get('prompt_ids', []))} tokens)"
        )
        st.markdown(
            render.text_block(
                str(result.get("baseline_continuation", "")), '<span class="wb-special">no steering →</span> '
            ),
            unsafe_allow_html=True,
        )
        rows = []
        for eff in result.get("effects", []):
            st.markdown(
                render.text_block(
                    str(eff.get("continuation", "")),
                    f'<span class="wb-special">α = {float(eff.get("alpha", 0.0)):+g} →</span> ',
                ),
                unsafe_allow_html=True,
            )
            rows.append(
                {
                    "alpha": eff.get("alpha"),
                    "loss change (nats)": eff.get("mean_delta_loss"),
                    "KL": eff.get("mean_kl"),
                    "promoted": ", ".join(repr(s.get("token", "")) for s in eff.get("promoted", [])[:5]),
                    "suppressed": ", ".join(repr(s.get("token", "")) for s in eff.get("suppressed", [])[:5]),
                }
            )
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True)
        return
    label = {"zero_ablation": "Zero ablation", "mean_ablation": "Mean ablation"}.get(kind, kind)
    st.markdown(f"**{render.escape_text(label)}** over the attributed examples")
    cols = st.columns(3)
    cols[0].metric("Loss change (nats)", f"{float(result.get('mean_delta_loss', float('nan'))):+.4f}")
    cols[1].metric(
        "Loss change where it fires", f"{float(result.get('mean_delta_loss_fired', float('nan'))):+.4f}"
    )
    cols[2].metric("KL(clean ‖ ablated)", f"{float(result.get('mean_kl', float('nan'))):.4f}")
    if result.get("promoted"):
        st.caption("Tokens the feature promotes (logit change when it is removed, sign flipped)")
        st.markdown(shift_list(result["promoted"]), unsafe_allow_html=True)
    if result.get("suppressed"):
        st.caption("Tokens the feature suppresses")
        st.markdown(shift_list(result["suppressed"]), unsafe_allow_html=True)


def show_why_it_fires() -> None:
    """Stored DePass attributions (token heatmaps, top heads/MLPs) and ablation/steering effects of the feature."""
    st.subheader("Why it fires")
    why = ui.guarded(queries.feature_attributions, path, sae.sae_id, feature)
    lrp = ui.guarded(lrp_queries.feature_lrp, path, sae.sae_id, feature)
    if not why.tokens and not why.components and not why.effects and not lrp:
        st.caption(
            "No DePass attributions stored for this feature — fill with "
            f"`{commands.attribute_command(sae.sae_id, feature)}`."
        )
        return
    show_lrp(why.tokens, lrp)
    if why.tokens:
        st.markdown(
            "**Token shares** (DePass, arXiv 2510.18462): each token's exact share of the feature's pre-activation "
            "at the outlined position; orange adds, blue subtracts."
        )
    for view in why.tokens:
        scale = max((abs(s) for i, s in enumerate(view.shares) if i != view.bos_position), default=0.0)
        start, stop = (
            (0, None)
            if full_windows
            else render.context_bounds(len(view.token_strings), view.position, 24, 1)
        )
        top = max(
            (i for i in range(len(view.shares)) if i != view.bos_position),
            key=lambda i: view.shares[i],
            default=None,
        )
        top_text = (
            f" · top token {render.escape_text(repr(view.token_strings[top]))} ({view.shares[top]:+.3f})"
            if top is not None
            else ""
        )
        st.markdown(
            f'<div class="wb-special" style="font-size:0.75rem">window {view.window_id} · position {view.position}'
            f" · activation {view.activation:.3f} · rule {render.escape_text(view.rule)}"
            f" · completeness error {view.completeness_error:.2g}{top_text}</div>"
            + render.render_tokens(
                view.token_strings,
                view.shares,
                max_value=max(scale, 1e-9),
                skip=[] if view.bos_position is None else [view.bos_position],
                peak_position=view.position,
                start=start,
                stop=stop,
            ),
            unsafe_allow_html=True,
        )
    if why.components:
        st.markdown("**Top heads and MLPs** (DePass share of the pre-activation, mean over the examples)")
        st.dataframe(
            pd.DataFrame(
                [{"component": n, "mean share": s, "examples": k} for n, s, k in why.components[:12]]
            ),
            hide_index=True,
        )
    for kind, result in why.effects:
        show_effect(kind, result)


def _token_heat(strings: list[str], values: list[float], position: int, skip: list[int]) -> str:
    """One heat-mapped token row, scaled to its own largest |value| (skipping `skip`), around `position`."""
    scale = max((abs(v) for i, v in enumerate(values) if i not in skip), default=0.0)
    start, stop = (0, None) if full_windows else render.context_bounds(len(strings), position, 24, 1)
    return render.render_tokens(
        strings, values, max_value=max(scale, 1e-9), skip=skip, peak_position=position, start=start, stop=stop
    )


def show_lrp(depass: list[queries.TokenShareView], lrp: list[lrp_queries.LrpView]) -> None:
    """Position-aware LRP (token and position relevance) beside DePass's token shares for the same example."""
    if not lrp:
        st.caption(
            "No position-aware LRP stored for this feature — fill with "
            f"`workbench attribute --store {path} --sae {sae.sae_id} --sae-path <SAE_DIR> --features {feature} "
            "--method pa_lrp`."
        )
        return
    st.markdown(
        "**Token and position relevance** (PA-LRP, arXiv 2506.02138) beside DePass for the same example: LRP says "
        "which tokens *and which positions* made the feature fire; orange adds, blue subtracts."
    )
    by_example = {(v.window_id, v.position): v for v in depass}
    for view in lrp:
        dp = by_example.get((view.window_id, view.position))
        res = " · ".join(f"{k.replace('_', ' ')} {v:+.3f}" for k, v in view.residual.items() if v)
        st.markdown(
            f'<div class="wb-special" style="font-size:0.75rem">window {view.window_id} · position {view.position}'
            f" · {view.mode} ({view.positional} positions) · T "
            f"{view.target:.3f} · pre-activation {view.pre_activation:.3f}"
            f"{' · ' + res if res else ''} · closure error {view.closure_error:.2g}</div>",
            unsafe_allow_html=True,
        )
        cols = st.columns(3)
        with cols[0]:
            st.caption("DePass token shares — " + lrp_queries.DEPASS_NOTE)
            if dp is None:
                st.caption("(no DePass row for this example)")
            else:
                skip = [] if dp.bos_position is None else [dp.bos_position]
                st.markdown(
                    _token_heat(dp.token_strings, dp.shares, dp.position, skip), unsafe_allow_html=True
                )
        with cols[1]:
            st.caption(f"{view.mode} token relevance — " + lrp_queries.LRP_NOTE.get(view.mode, ""))
            st.markdown(
                _token_heat(view.token_strings, view.token_scores, view.position, []), unsafe_allow_html=True
            )
        with cols[2]:
            st.caption(f"{view.mode} position relevance (per position, summed over layers)")
            st.markdown(
                _token_heat(view.token_strings, view.position_scores, view.position, []),
                unsafe_allow_html=True,
            )
        with st.expander("Paper heat map (|position| per layer added to tokens, normalised) — a ranking view, NOT "
                         "conservative"):  # fmt: skip
            st.markdown(
                _token_heat(view.token_strings, view.paper_map, view.position, []), unsafe_allow_html=True
            )


show_why_it_fires()


def show_interactions() -> None:
    """Stored ProxySPEX interactions (arXiv 2505.17495): top Möbius terms with singletons and the R^2 table."""
    st.subheader("Interactions")
    stored = ui.guarded(queries.feature_interactions, path, sae.sae_id, feature)
    if not stored:
        st.caption(
            "No ProxySPEX interactions stored for this feature — fill with "
            f"`{commands.interactions_command(sae.sae_id, feature)}` (needs `pip install '.[interactions]'`)."
        )
        return
    st.markdown(
        "**Sparse interactions** (ProxySPEX, arXiv 2505.17495): Möbius terms of order ≥ 2 read off gradient-boosted "
        "trees fitted to the feature's activation under random masks, each with its players' own (singleton) terms; "
        "R² on 1000 fresh masks says whether the interaction model beats the marginal ones."
    )
    for view in stored:
        where = (
            f"window {view.window_id} · position {view.position} · {view.player_type} · budget {view.budget}"
        )
        if view.status != "ok":
            st.caption(f"{where}: {view.message}")
            continue
        st.markdown(
            f'<div class="wb-special" style="font-size:0.75rem">{render.escape_text(where)} · seed {view.seed} · '
            f"v(all) {view.full_value:.3f} · v(none) {view.empty_value:.3f} · {view.wall_s:.1f} s</div>",
            unsafe_allow_html=True,
        )
        cols = st.columns(3)
        for col, (name, label) in zip(
            cols,
            (("proxyspex", "R² ProxySPEX"), ("shapley", "R² Shapley"), ("banzhaf", "R² Banzhaf")),
            strict=True,
        ):
            col.metric(label, f"{view.r2.get(name, float('nan')):.3f}")
        if view.top_terms:
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "interaction": " × ".join(repr(lbl) for lbl in t.get("labels", [])),
                            "Möbius": float(t.get("value", 0.0)),
                            "singletons": ", ".join(f"{float(v):+.3f}" for v in t.get("singletons", [])),
                        }
                        for t in view.top_terms
                    ]
                ),
                hide_index=True,
            )
        if view.order2:
            st.caption(
                f"{render.escape_text(view.index)} at order 2: "
                + ", ".join(
                    f"{' × '.join(repr(lbl) for lbl in t.get('labels', []))} {float(t.get('value', 0.0)):+.3f}"
                    for t in view.order2[:5]
                )
            )


show_interactions()


def show_across_saes() -> None:
    """Matches of this feature in the store's other SAEs of the same hook (issue 36, `workbench match`)."""
    st.subheader("Across SAEs")
    matches = ui.guarded(family_queries.across_saes, path, sae.sae_id, feature)
    if not matches:
        st.caption(
            "No matches stored for this feature. Match this SAE with other SAEs of its hook (seeds, widths): "
            f"`workbench match --store {path} --sae {sae.sae_id} --sae <OTHER_SAE>` (add `--agreement` for "
            "activation correlation)."
        )
        return
    st.markdown(
        "This feature's match in each other SAE (decoder/encoder cosine; activation correlation and top-window "
        "overlap where `--agreement` ran). ⚠ marks a match with similar weights but no functional agreement."
    )
    rows = [
        {
            "SAE": f"{m.other_sae[:8]} (d={m.other_d_sae})", "feature": m.other_feature, "method": m.method,
            "similarity": f"{m.similarity} {m.sim:.3f}",
            "activation corr": None if m.act_corr is None else round(m.act_corr, 3),
            "top-window Jaccard": None if m.top_jaccard is None else round(m.top_jaccard, 3),
            "flag": "⚠ geometric only" if m.flagged else "", "explanation": m.explanation or "",
        }
        for m in matches
    ]  # fmt: skip
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    seen: set[tuple[str, int]] = set()
    for m in matches:
        if (m.other_sae, m.other_feature) in seen:
            continue
        seen.add((m.other_sae, m.other_feature))
        st.page_link(
            ui.page_script("feature"),
            label=f"open feature {m.other_feature} of {m.other_sae[:8]} (d={m.other_d_sae})",
            query_params={"sae": m.other_sae, "feature": str(m.other_feature)},
        )


show_across_saes()
