"""`workbench verify`: check a whole store — schema, ledgers, every partitioned file byte for byte, index runs,
staging leftovers — and exit non-zero when anything is wrong.

    workbench verify --store runs/store.duckdb

Exit status: 0 when the store is whole, 1 when a fault was found (each printed on its own line with what to do),
2 for bad input (no such store). Run it when no job writes the store.
"""

from __future__ import annotations

import typer

from sae_workbench import defaults
from sae_workbench.cli import options

FAULT_EXIT_STATUS = 1
"""Exit status when the store has a fault (2 stays bad input, as for every command)."""


def verify(store: options.Store = defaults.STORE_PATH) -> None:
    """Check schema, ledgers and partitioned files (digests, row counts, strays), index runs and staging files."""
    from sae_workbench.store import Store

    report = Store.open(store, read_only=True).verify()
    for line in report.checked:
        typer.echo(f"checked {line}")
    for fault in report.faults:
        typer.secho(f"FAULT {fault}", fg="red", err=True)
    if report.faults:
        typer.echo(f"{store}: {len(report.faults)} fault(s)")
        raise typer.Exit(FAULT_EXIT_STATUS)
    typer.echo(f"{store}: no fault found")
