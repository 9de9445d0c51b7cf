"""The records a tree search reads: train, valid and test splits, each positives then negatives."""

from __future__ import annotations

from dataclasses import dataclass

from sae_workbench.examples.records import Record


@dataclass(frozen=True)
class Split:
    """Records of one split: positives then negatives."""

    positives: tuple[Record, ...]
    """Top-activating records."""
    negatives: tuple[Record, ...]
    """Non-activating (close) negatives."""

    @property
    def records(self) -> tuple[Record, ...]:
        """Positives followed by negatives (the pooled score runs over all of them)."""
        return self.positives + self.negatives


@dataclass(frozen=True)
class TreeSplits:
    """Train, valid and test splits (paper: 10 positives + 10 negatives each)."""

    train: Split
    """Used for proposals, feedback and pruning."""
    valid: Split
    """Held out; picks the returned node."""
    test: Split
    """Held out for the scorer; never seen by the search."""
