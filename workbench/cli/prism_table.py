"""`workbench prism-table1`: PRISM's Table 1 recomputed from the paper's released result CSVs.

    workbench prism-table1 --data ../shared/data/prism-table1

The CSVs are lkopf/prism's `results/cosy-evaluation_*.csv` and `results/meta-evaluation_*.csv` (only the numeric
columns are read). They are summarised by the same aggregation the project's `workbench report` applies to its own
CoSy scores (evaluation/scorers/cosy_summary.py), so matching the paper's printed numbers checks those rules.
"""

from __future__ import annotations

from pathlib import Path

import typer


def prism_table1(
    data: Path = typer.Option(..., "--data", help="Folder of lkopf/prism result CSVs (results/*.csv)."),
    out: Path | None = typer.Option(None, help="Write the Markdown here instead of stdout."),
) -> None:
    """Recompute PRISM's Table 1, k ablation, sanity check and polysemanticity from the paper's released results."""
    from sae_workbench.evaluation.reproductions.prism_table1 import reference_tables, render_markdown
    from sae_workbench.paths import atomic_write_bytes

    text = render_markdown(reference_tables(data))
    if out is None:
        typer.echo(text, nl=False)
    else:
        atomic_write_bytes(out, text.encode())
        typer.echo(f"wrote {out}")
