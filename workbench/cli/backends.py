"""The `--backend` / `--llm-qps` pair that `workbench explain` and `workbench score` share, checked in one place."""

from __future__ import annotations

import typer

from sae_workbench.raycluster import Backend, check_backend


def check_llm_backend(backend: str, llm_qps: float | None) -> Backend:
    """The checked backend; `--llm-qps` is the Ray workers' shared rate limit, so it needs `--backend ray`."""
    checked = check_backend(backend)
    if llm_qps is not None and checked != "ray":
        raise typer.BadParameter("--llm-qps is the Ray workers' shared limit: pass it with --backend ray")
    return checked
