"""Readable column names for stored eval payloads: the name of each absorption metric and which way is better.

    readable_columns(["mean.mean_absorption_fraction_score"])  # -> ["Absorption fraction, mean over letters (↓ better)"]

Keys are SAEBench's absorption fields (Chanin et al. 2024, "A is for Absorption"; SAEBench eval_result_metrics /
eval_result_details) and our per-feature entries; unknown keys are shown as they are.
"""

from __future__ import annotations

from collections.abc import Iterable

LOWER = "↓ better"
HIGHER = "↑ better"

# key -> (name, direction or "" when neither way is better)
ABSORPTION_LABELS: dict[str, tuple[str, str]] = {
    "mean_absorption_fraction_score": ("Absorption fraction, mean over letters", LOWER),
    "mean_full_absorption_score": ("Full absorption rate, mean over letters", LOWER),
    "mean_num_split_features": ("Split features per letter, mean", LOWER),
    "std_dev_absorption_fraction_score": ("Absorption fraction, s.d. over letters", ""),
    "std_dev_full_absorption_score": ("Full absorption rate, s.d. over letters", ""),
    "std_dev_num_split_features": ("Split features per letter, s.d.", ""),
    "first_letter": ("First letter", ""),
    "letter": ("Letter", ""),
    "probe_f1": ("Probe F1", HIGHER),
    "included": ("Counted in the means", ""),
    "main_feature_ids": ("Main features", ""),
    "num_split_features": ("Split features", LOWER),
    "num_probe_true_positives": ("Probe true positives", ""),
    "num_full_absorption": ("Fully absorbed words", LOWER),
    "mean_absorption_fraction": ("Absorption fraction", LOWER),
    "full_absorption_rate": ("Full absorption rate", LOWER),
    "feature_id": ("Feature", ""),
    "num_tokens": ("Tokens absorbed", ""),
    "tokens": ("Absorbed tokens", ""),
}


def readable_column(key: str) -> str:
    """A metric key (possibly flattened, 'mean.x') as its name with the better direction, e.g. 'Probe F1 (↑ better)'."""
    name, direction = ABSORPTION_LABELS.get(key.rsplit(".", 1)[-1], (key, ""))
    return f"{name} ({direction})" if direction else name


def readable_columns(keys: Iterable[str]) -> list[str]:
    """`readable_column` of each key, in order."""
    return [readable_column(k) for k in keys]
