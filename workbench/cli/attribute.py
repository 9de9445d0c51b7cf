"""`workbench attribute`: DePass attribution, ablation and steering of stored features, into the store, resumably.

    workbench attribute --store runs/store.duckdb --sae <SAE_ID> --sae-path runs/sae --features 0-49
    workbench attribute --store S --sae ID --sae-path P --features 3 --rule up_linear --baselines grad_x_input
    workbench attribute --store S --sae ID --sae-path P --features 3,7 --export-graphs runs/graphs
    workbench attribute --store S --sae ID --sae-path P --features 3 --levels tokens,upstream \
        --upstream-sae runs/sae-layer1 --upstream-hook blocks.1.hook_resid_post
    workbench attribute --store S --sae ID --sae-path P --features 0-9 --method pa_lrp,attnlrp

Each feature's top examples are attributed at their peak (token shares and head/MLP shares, DePass arXiv
2510.18462), then the feature is zero- and mean-ablated over them and steered from the top example's prefix. A rerun
skips what is stored. `--export-graphs` writes one circuit-tracer / Neuronpedia graph JSON per (feature, example).

`--method pa_lrp` (position-aware LRP, arXiv 2506.02138), `attnlrp` (positions detached) or `cp` (attention pattern
constant), comma-separated, store token and position relevance per example instead (evaluation/attribution/pa_lrp.py);
`depass` (the default) is the path above. Methods can be mixed: `--method depass,pa_lrp`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sae_workbench.cli import loaders, options


def attribute(
    store: options.Store,
    sae: options.SaeId,
    sae_path: Path = typer.Option(..., help="The SAE's folder (the one indexed under --sae)."),
    features: options.Features = "all",
    method: str = typer.Option(
        "depass",
        help="depass and/or pa_lrp, attnlrp, cp (position-aware LRP and its modes), comma-separated.",
    ),
    examples: int = typer.Option(3, help="Top examples attributed per feature."),
    rule: str = typer.Option(
        "softmax", help="DePass MLP rule: softmax (paper, T=0.1), up_linear or gate_linear."
    ),
    levels: str = typer.Option(
        "tokens,components", help="tokens, components and/or upstream (needs --upstream-sae)."
    ),
    upstream_sae: Path | None = typer.Option(
        None, help="An SAE at a lower residual hook: the upstream level credits its features."
    ),
    upstream_hook: str | None = typer.Option(
        None, help="The upstream SAE's hook (default: the hook its cfg records)."
    ),
    baselines: str = typer.Option(
        "", help="Token baselines to store too: grad_x_input, integrated_gradients."
    ),
    effects: bool = typer.Option(True, help="Zero/mean ablation over the examples and steering."),
    alphas: str = typer.Option("-5,5,10", help="Steering strengths (activation units)."),
    export_graphs: Path | None = typer.Option(None, help="Write circuit-tracer graph JSON files here."),
    progress: options.Progress = True,
) -> None:
    """Attribute stored features with DePass and/or LRP, ablate and steer them; store the results (rerun to resume)."""
    from sae_workbench.evaluation.attribution.export import export_graphs as write_graphs
    from sae_workbench.evaluation.attribution.job import (
        AttributeConfig,
        Upstream,
        run_attribution,
    )
    from sae_workbench.evaluation.attribution.lrp_job import LrpConfig, run_lrp_attribution
    from sae_workbench.evaluation.attribution.lrp_rules import LRP_MODES
    from sae_workbench.store import Store

    methods = [m.strip() for m in method.split(",") if m.strip()]
    unknown = [m for m in methods if m != "depass" and m not in LRP_MODES]
    if unknown or not methods:
        raise typer.BadParameter(
            f"unknown method(s) {unknown or method!r}: use depass, {', '.join(LRP_MODES)} (comma-separated)",
            param_hint="--method",
        )
    lrp_modes = tuple(m for m in methods if m in LRP_MODES)
    db = Store.open(store)
    record = db.get_sae(sae)
    model, loaded = loaders.load_indexed_sae(db, sae, sae_path)
    wanted = options.parse_features(features, record.d_sae)
    if lrp_modes:
        lrp_config = LrpConfig(modes=lrp_modes, examples=examples)  # type: ignore[arg-type]  # checked above
        lrp = run_lrp_attribution(db, model, loaded, sae, wanted, lrp_config, progress=progress)
        failed = "".join(f"; feature {f} failed: {e}" for f, e in lrp.failed.items())
        typer.echo(
            f"LRP ({', '.join(lrp_modes)}) of {lrp.features} features: {lrp.attributions} new attributions, "
            f"{lrp.skipped} already stored" + lrp.no_examples_note() + failed
        )
    if "depass" not in methods:
        return
    config = AttributeConfig(
        examples=examples,
        rule=rule,  # type: ignore[arg-type]  # checked by config.check()
        levels=tuple(x.strip() for x in levels.split(",") if x.strip()),
        baselines=tuple(x.strip() for x in baselines.split(",") if x.strip()),
        effects=effects,
        alphas=tuple(float(a) for a in alphas.split(",") if a.strip()),
    )
    up = loaders.load_upstream(upstream_sae, upstream_hook, record.model)
    upstream = None if up is None else Upstream(*up)
    summary = run_attribution(db, model, loaded, sae, wanted, config, progress=progress, upstream=upstream)
    typer.echo(
        f"attributed {summary.features} features: {summary.attributions} new attributions, {summary.effects} new "
        f"effects, {summary.skipped} already stored" + summary.no_examples_note()
    )
    if export_graphs is not None:
        paths = write_graphs(db, sae, wanted, export_graphs, model.tokenizer)
        typer.echo(f"wrote {len(paths)} graph files to {export_graphs}")
