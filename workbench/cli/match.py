"""`workbench match`: match the features of two or more SAEs on one model and hook, into the store, resumably.

    workbench match --store runs/fam/store.duckdb --sae runs/fam/seed=1-d_sae=1152 --sae runs/fam/seed=2-d_sae=1152
    workbench match --store S --sae ID_A --sae ID_B --method hungarian,greedy,sinkhorn --similarity both
    workbench match --store S --sae W1 --sae W2 --sae W3 --agreement --explainer lexical --tree 17 --export runs/fam/pq

Every pair of SAEs is matched by every --method (hungarian: one-to-one on the sparse top-k candidate graph; greedy:
each feature's best match; sinkhorn: optimal transport with uniform marginals), and the pairs are stored with the
method, similarity, threshold and both SAE ids. Each pair's shared-fraction curve (thresholds 0.5 to 0.95, dead
features counted apart) is printed. With SAEs of two or more widths, each wider SAE's features are linked to their
parents in the next narrower one and the splits are printed. --agreement adds activation correlation and top-window
overlap from the store (both SAEs indexed over the same corpus); --explainer adds explanation stability and stores
SAE A's explanations on B's matched features as explainer `transfer` for `workbench score`. A rerun skips what is
stored.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sae_workbench.cli import options

MATCH_METHODS = "hungarian,greedy,sinkhorn"


def match(
    store: options.Store,
    sae: list[str] = typer.Option(
        ..., "--sae", help="An SAE id in the store or an SAE folder; give two or more (--sae A --sae B ...)."
    ),
    method: str = typer.Option("hungarian", help=f"Comma-separated matching methods: {MATCH_METHODS}."),
    similarity: str = typer.Option(
        "decoder",
        help="decoder or encoder cosine, or both (the smaller of the two, the conservative variant).",
    ),
    k: int = typer.Option(32, help="Candidates kept per feature for the sparse one-to-one assignment."),
    block: int = typer.Option(1024, help="Features per similarity block (memory ~ block × width × 4 bytes)."),
    solver: str = typer.Option(
        "auto", help="hungarian: auto (sparse graph, dense only as fallback when it fits), sparse or dense."
    ),
    dense_max_gib: float = typer.Option(
        1.0, help="Largest dense matrix a dense solve (or sinkhorn) may build."
    ),
    threshold: float = typer.Option(
        0.7, help="Similarity at which a pair counts as shared (and a child splits)."
    ),
    agreement: bool = typer.Option(
        False,
        "--agreement",
        help="Also compute activation correlation and top-window overlap of matched pairs.",
    ),
    explainer: str | None = typer.Option(
        None, help="Explainer whose explanations to compare across matched pairs (explanation stability)."
    ),
    tree: int | None = typer.Option(
        None, help="Print the splitting tree of this feature of the narrowest SAE (needs two or more widths)."
    ),
    export: Path | None = typer.Option(
        None, help="Write the family tables as Parquet files into this folder."
    ),
    progress: options.Progress = True,
) -> None:
    """Match features across SAEs of one hook (one-to-one, greedy, Sinkhorn); store, print curves and splits."""
    import numpy as np

    from sae_workbench.evaluation.families.agreement import MIN_AGREEING_CORR, flag_disagreement
    from sae_workbench.evaluation.families.job import (
        FamilyConfig,
        chain_runs_for,
        family_tree,
        load_member,
        match_family,
        run_agreement,
        width_chain,
    )
    from sae_workbench.evaluation.families.stability import explanation_pairs, record_stability
    from sae_workbench.store import Store

    cfg = FamilyConfig(
        methods=tuple(m.strip() for m in method.split(",") if m.strip()),
        similarity=similarity,
        k=k,
        block=block,
        solver=solver,
        threshold=threshold,
        dense_max_bytes=int(dense_max_gib * 2**30),
    )

    def step(text: str) -> None:
        """One step line on stderr ("▶ loading SAE ...") when progress is on."""
        if progress:
            typer.echo(f"▶ {text}", err=True)

    db = Store.open(store)
    members = []
    for spec in sae:
        step(f"loading SAE {spec}")
        members.append(load_member(db, spec))
    report = match_family(db, members, cfg, progress=progress)
    widths = {m.sae_id: m.d_sae for m in members}
    header = "  ".join(f"{t:.2f}" for t in report.runs[0].curve.thresholds) if report.runs else ""
    typer.echo(f"{'A':16s} {'B':16s} {'method':9s} {'pairs':>6s} {'@0.7':>6s}  shared fraction at {header}")
    for s in report.runs:
        r = s.run
        fractions = "  ".join(f"{f:.2f}" for f in s.curve.fractions)
        at = s.curve.at(0.7) if 0.7 in s.curve.thresholds else float("nan")
        typer.echo(
            f"{r.sae_a:16s} {r.sae_b:16s} {r.method:9s} {r.n_rows:6d} {at:6.3f}  {fractions}"
            f"   (d {widths.get(r.sae_a, '?')}→{widths.get(r.sae_b, '?')}; {s.curve.n_dead} dead, "
            f"{s.curve.n_partner_dead} with a dead partner, counted apart; "
            f"{'computed' if s.computed else 'stored earlier'} {r.match_key})"
        )
    for key, splits in report.splits.items():
        run = db.match_run(key)
        assert run is not None
        typer.echo(
            f"splits of {run.sae_b} (d={widths[run.sae_b]}) into {run.sae_a} (d={widths[run.sae_a]}): {len(splits)} "
            f"parents with two or more children at cosine >= {threshold}"
        )
        for sp in splits[:10]:
            cov = "n/a" if sp.coverage is None else f"{sp.coverage:.2f}"
            kids = ", ".join(f"{c} ({s:.2f})" for c, s in zip(sp.children, sp.sims, strict=True))
            typer.echo(f"  {sp.parent} -> {kids}; coverage of its top windows {cov}")
    if agreement:
        for s in report.runs:
            step(f"functional agreement {s.run.sae_a} -> {s.run.sae_b} ({s.run.method})")
            added = run_agreement(db, s.run, progress=progress)
            g = db.agreement(s.run.match_key)
            sims, corr = g.column("sim").to_numpy(), g.column("act_corr").to_numpy(zero_copy_only=False)
            n_windows = np.asarray(g.column("n_windows").to_numpy(zero_copy_only=False), dtype=np.float64)
            flagged = flag_disagreement(sims, np.asarray(corr, dtype=np.float64), threshold, n_windows)
            typer.echo(
                f"agreement of {s.run.match_key}: {added} pairs computed; median activation correlation "
                f"{np.nanmedian(np.asarray(corr, dtype=np.float64)):.3f}; {int(flagged.sum())} of "
                f"{int((sims >= threshold).sum())} pairs at cosine >= {threshold} flagged (correlation < "
                f"{MIN_AGREEING_CORR}, or one side silent: similar weights, different activations)"
            )
    if explainer is not None:
        for s in report.runs:
            if s.run.method == "greedy":
                continue
            pairs = explanation_pairs(db, s.run, explainer)
            added = record_stability(db, s.run, pairs)
            typer.echo(
                f"stability of {s.run.match_key}: {len(pairs)} pairs explained by {explainer} on both sides "
                f"({added} new); score the transfers with `workbench score --store {store} --sae {s.run.sae_b} "
                "--explainer transfer --scorer ...`"
            )
    if tree is not None:
        chain = width_chain(members)
        if len(chain) < 2:
            typer.echo("--tree needs SAEs of two or more widths.")
        else:
            root = family_tree(db, chain_runs_for(db, [m.sae_id for m in chain]), tree, threshold)
            for node in root.walk():
                text = node.info.get("explanation") or "–"
                sim = "" if node.sim is None else f" cos {node.sim:.2f}"
                typer.echo(
                    f"{'  ' * node.level}d={node.info.get('d_sae')} feature {node.feature}{sim}: {text}"
                )
    if export is not None:
        files = db.export_families_parquet(export)
        typer.echo(f"wrote {', '.join(str(f) for f in files)}")
