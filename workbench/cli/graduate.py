"""`workbench graduate`: move a store's sparse activations (feature-partitioned) and its windows (chunked by window id)
out of the DuckDB file into hive-partitioned Parquet.

    workbench graduate --store runs/store.duckdb                          # -> runs/store-data/activations/...
    workbench graduate --store runs/store.duckdb --root s3://bucket/wb --endpoint-url http://127.0.0.1:9000

    workbench graduate --store runs/store.duckdb --repair                 # rebuild damaged/missing files

Every other table stays in the store file, which records where each SAE's rows went (its ledger); every command and
the app then read them from there. Safe to interrupt: rerunning the same command finishes the job and never counts a
row twice (see sae_workbench.store.graduate). Credentials for s3:// come from the usual AWS environment variables.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from sae_workbench import defaults
from sae_workbench.cli import options


def default_root(store: Path) -> Path:
    """The Parquet root used when --root is not given: `<store folder>/<store name>-data` (one per store file, so
    two stores in one folder never share, and so never delete, each other's bucket files)."""
    return store.parent / f"{store.stem}-data"


def graduate(
    store: options.Store = defaults.STORE_PATH,
    root: str | None = typer.Option(
        None,
        "--root",
        help="Folder or s3://bucket/prefix for the Parquet (default: <store folder>/<name>-data).",
    ),
    sae: list[str] | None = typer.Option(
        None,
        "--sae-id",
        help="Graduate only this SAE id and its corpus's windows (repeatable; default: every SAE in the file).",
    ),
    windows: bool = typer.Option(
        True, "--windows/--no-windows", help="Also move the indexed corpora's windows."
    ),
    endpoint_url: str | None = typer.Option(
        None,
        "--endpoint-url",
        help="S3 endpoint (MinIO, moto, other S3-compatible stores); sets AWS_ENDPOINT_URL.",
    ),
    repair: bool = typer.Option(
        False,
        "--repair",
        help="Rebuild missing or damaged Parquet files from their source (windows from the corpus, activations by "
        "re-encoding the windows with the SAE its record names), drop stray files, record files graduated before "
        "file records existed; then graduate as usual.",
    ),
    repair_sae: str | None = typer.Option(
        None, "--sae", help="--repair: the SAE folder (default: the path the store recorded for it)."
    ),
    repair_model: str | None = typer.Option(
        None, "--model", help="--repair: the subject model (default: the one the index run recorded)."
    ),
    repair_corpus: str | None = typer.Option(
        None, "--corpus", help="--repair: the indexed corpus (default: its recorded name)."
    ),
    device: options.Device = defaults.DEFAULT_DEVICE,
) -> None:
    """Move activations (feature buckets of 256) and windows from the store file to Parquet, crash-safely."""
    from sae_workbench.store import Store

    if endpoint_url:
        os.environ["AWS_ENDPOINT_URL"] = endpoint_url
    if repair:
        from sae_workbench.sae.repair import repair_partitions

        actions = repair_partitions(
            Store.open(store),
            device=device,
            sae_path=repair_sae,
            model_name=repair_model,
            corpus_spec=repair_corpus,
            step=lambda line: typer.echo(line, err=True),
        )
        for line in actions:
            typer.echo(f"repaired: {line}")
        if not actions:
            typer.echo("repair: every partitioned file matches the ledger")
    target = root if root is not None else str(default_root(store))
    reports = Store.open(store).graduate(target, sae or None, windows=windows)
    if not reports:
        typer.echo(f"nothing to graduate in {store}: no SAE has activation rows in the file.")
    for r in reports:
        what = f"activations of SAE {r.key}" if r.kind == "activations" else f"windows of corpus {r.key}"
        if r.already:
            typer.echo(f"{what}: already under {r.root} ({r.n_rows:,} rows); leftovers cleaned")
        else:
            typer.echo(f"{what}: {r.n_rows:,} rows in {r.n_buckets} files -> {r.root}")
