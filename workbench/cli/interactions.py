"""`workbench interactions`: ProxySPEX interactions behind stored features (arXiv 2505.17495), into the store, resumably.

    workbench interactions --store runs/store.duckdb --sae <SAE_ID> --sae-path runs/sae --features 0-9
    workbench interactions --store S --sae ID --sae-path P --features 3 --players heads --ablation mean
    workbench interactions --store S --sae ID --sae-path P --features 3 --players upstream \
        --upstream-sae runs/sae-layer1 --upstream-hook blocks.1.hook_resid_post

For each feature's top example(s), at the peak: ProxySPEX over the tokens before it (or the heads below the SAE, or an
upstream SAE's active features), the top Möbius interactions with their singletons, FBII or k-SII at order 2, and
the R^2 table on 1000 fresh masks (ProxySPEX vs Shapley vs Banzhaf). Needs the `interactions` extra
(pip install 'sae-workbench[interactions]'). A rerun skips what is stored.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sae_workbench import defaults
from sae_workbench.cli import loaders, options

QUICK_GRID = {"max_depth": [3], "max_iter": [1000], "learning_rate": [0.1]}
"""One configuration of the reference grid (shapiq_adapter.REFERENCE_GRID): 5 LightGBM fits instead of 40."""


def interactions(
    store: options.Store,
    sae: options.SaeId,
    sae_path: Path = typer.Option(..., help="The SAE's folder (the one indexed under --sae)."),
    features: options.Features = "all",
    players: str = typer.Option("tokens", help="tokens, heads or upstream (needs --upstream-sae)."),
    examples: int = typer.Option(1, help="Top examples per feature, each at its peak."),
    budget: int | None = typer.Option(None, help="Masks per method; default min(5000, max(1000, 16 n))."),
    seed: options.Seed = 0,
    value: str = typer.Option("post", help="post (SAE activation) or pre (encoder pre-activation)."),
    mask: str = typer.Option(
        defaults.INTERACTION_MASK,
        help="Masked tokens: auto (unk if the tokenizer has one, else the mean embedding), unk (unk, else eos, else "
        "pad) or mean (the mean embedding).",
    ),
    ablation: str = typer.Option("zero", help="Masked heads: zero or mean ablation of hook_z."),
    index: str = typer.Option("FBII", help="Order-2 index shown beside the Möbius terms: FBII or k-SII."),
    quick: bool = typer.Option(
        False, help="One LightGBM configuration instead of the reference 8 x 5-fold grid."
    ),
    upstream_sae: Path | None = typer.Option(
        None, help="An SAE at a lower residual hook (upstream players)."
    ),
    upstream_hook: str | None = typer.Option(None, help="The upstream SAE's hook (default: its cfg's)."),
    progress: options.Progress = True,
) -> None:
    """ProxySPEX interactions of stored features at their top examples; store them (rerun to resume)."""
    from sae_workbench.evaluation.interactions.job import InteractConfig, run_interactions
    from sae_workbench.evaluation.interactions.shapiq_adapter import require
    from sae_workbench.store import Store

    require()  # before loading anything: without the extra, say how to install it
    db = Store.open(store)
    record = db.get_sae(sae)
    model, loaded = loaders.load_indexed_sae(db, sae, sae_path)
    config = InteractConfig(
        players=players, examples=examples, budget=budget, seed=seed, value=value, mask=mask, ablation=ablation,
        index=index, grid=dict(QUICK_GRID) if quick else None,
    )  # fmt: skip
    upstream = loaders.load_upstream(upstream_sae, upstream_hook, record.model)
    wanted = options.parse_features(features, record.d_sae)
    summary = run_interactions(db, model, loaded, sae, wanted, config, progress=progress, upstream=upstream)
    typer.echo(
        f"interactions of {summary.features} features: {summary.stored} new results "
        f"({summary.constant} constant: the feature does not respond to masking), {summary.skipped} already stored"
        + summary.no_examples_note()
        + (
            f"; fewer than 2 players for {len(summary.too_few_players)} examples"
            if summary.too_few_players
            else ""
        )
    )
