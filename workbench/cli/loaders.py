"""What commands load at their edge: the subject model checked once against the command's hooks and window size, an
indexed or upstream SAE, the model an SAE records, and the step lines that announce each load on stderr.

Everything heavy is imported inside the functions, so importing a command module (and `--help`) stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer


def step_lines(progress: bool) -> Callable[[str], None]:
    """A function that prints one step line on stderr ("▶ loading model ...") when `progress`: what a command does
    next, for the steps that have no progress bar of their own."""

    def step(text: str) -> None:
        if progress:
            typer.echo(f"▶ {text}", err=True)

    return step


def model_for_sae(sae: Any, model: str | None, step: Callable[[str], None]) -> str:
    """--model when given, else the model the loaded SAE's cfg records (in a spelling the workbench loads, or the
    known model its fingerprint or name points to: `model_identity.model_for_recorded`), else the default model; a
    step line says which. A recorded model the workbench cannot load raises UnknownModelError asking for --model."""
    from sae_workbench.errors import UnknownModelError
    from sae_workbench.model_identity import model_for_recorded
    from sae_workbench.sae.io import recorded_fingerprint, recorded_model

    if model is not None:
        return model
    resolved, why = model_for_recorded(recorded_model(sae), recorded_fingerprint(sae))
    if resolved is None:
        raise UnknownModelError(why)
    step(f"model {resolved} ({why})")
    return resolved


def load_subject(
    model: str, hooks: list[str], context_size: int | None = None, device: str = "cpu", dtype: str = "float32"
) -> HookedTransformer:
    """Load the subject model and check the command's hooks and window size against it: once, at the command's edge."""
    from sae_workbench.models import check_context_size, load_model, validate_hooks

    loaded = load_model(model, device=device, dtype=dtype)
    validate_hooks(loaded, hooks)
    if context_size is not None:
        check_context_size(loaded, context_size)
    return loaded


def load_indexed_sae(store: Any, sae_id: str, sae_path: Path) -> tuple[HookedTransformer, Any]:
    """The model an indexed SAE reads and the SAE loaded from `sae_path`; raise SAEIdError unless it is that SAE."""
    from sae_workbench.models import load_model
    from sae_workbench.sae.io import SAEIdError, load_sae, sae_id_of

    record = store.get_sae(sae_id)
    model = load_model(record.model)
    loaded = load_sae(str(sae_path))
    if sae_id_of(loaded, record.model, record.hook, sae_path) != sae_id:
        raise SAEIdError(
            f"{sae_path} is not SAE {sae_id} (its weights hash differently); pass the indexed SAE."
        )
    return model, loaded


def load_upstream(path: Path | None, hook: str | None, model_name: str) -> tuple[Any, str, str] | None:
    """(SAE, its hook, its id) of an upstream SAE folder (hook from its cfg unless given), or None without one."""
    from sae_workbench.sae.io import load_sae, resolve_hook, sae_id_of

    if path is None:
        return None
    up = load_sae(str(path), hook=hook)
    up_hook = resolve_hook(up, hook)
    return up, up_hook, sae_id_of(up, model_name, up_hook, path)
