"""`workbench cache`: cache a model's activations at one or more hooks over a corpus (placeholder being replaced)."""

from __future__ import annotations

import typer


def cache(
    model: str = typer.Option("smollm2-135m", help="Model name: smollm2-135m, tiny, a local HF dir or a TL name."),
) -> None:
    """Cache activations of a model over a corpus to sharded safetensors files (work in progress)."""
    raise typer.Exit(1)
