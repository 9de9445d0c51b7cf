"""The `workbench` command lines the app shows where a part of the store is still empty (strings only; nothing runs)."""

from __future__ import annotations

# Which command fills which part of the store (shown wherever that part is still empty).
FILL_COMMANDS = {
    "sae": "workbench train … (or register an existing SAE with `workbench index --sae PATH`)",
    "index": "workbench index --store STORE --sae SAE_DIR",
    "explain": "workbench explain --store STORE --explainer lexical",
    "prism": "workbench explain --store STORE --explainer prism",
    "tree": "workbench explain --store STORE --explainer tree",
    "score": "workbench score --store STORE",
    "absorption": "workbench absorption --store STORE",
    "negatives": "workbench explain / workbench score (they store the negatives they draw)",
}


def attribute_command(sae_id: str, feature: int) -> str:
    """The exact `workbench attribute` command that stores this feature's attributions and effects."""
    return f"workbench attribute --store STORE --sae {sae_id} --sae-path SAE_DIR --features {int(feature)}"


def interactions_command(sae_id: str, feature: int) -> str:
    """The exact `workbench interactions` command that stores this feature's ProxySPEX interactions."""
    return f"workbench interactions --store STORE --sae {sae_id} --sae-path SAE_DIR --features {int(feature)}"
