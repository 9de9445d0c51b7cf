"""What a scoring run returns: one result type shared by the score job and the scorers with their own loops (polysemanticity, complexity), so none of them imports another."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScoreJobResult:
    """What a scoring run did."""

    scored: int
    """Explanations scored."""
    skipped: int
    """Explanations already scored under the same key."""
    failed: int
    """Explanations recorded with a non-ok status (no activations, unscorable explanation, generator failure)."""
    seconds: float
    """Wall time."""
    dead: int = 0
    """Explanations of dead features (explainer status "dead", empty text): recorded as status "dead", not scored."""
