"""Prompt of the LLM simulator: predict each token's activation (0..5) from an explanation, answered as JSON.

The tree paper (Ma et al., NeurIPS 2025) simulates with teacher-forced log-probs of a local model; over a chat API
we ask for the per-token digits as a JSON array and parse it strictly (tree-explainer spec).
"""

from __future__ import annotations

from collections.abc import Sequence

SIMULATION_PROMPT_VERSION = "simulation-v1"

SYSTEM = (
    "You simulate a feature of a language model. Given an explanation of when the feature fires, you predict "
    "its activation on every token of a text, on a scale from 0 (does not fire) to 5 (fires maximally)."
)

TEMPLATE = """Explanation of the feature: {explanation}

The text has {n} tokens, listed one per line as index<TAB>token:
{tokens}

Reply with a JSON array of exactly {n} integers between 0 and 5, one per token in order, and nothing else."""


def simulation_messages(explanation: str, tokens: Sequence[str]) -> tuple[dict[str, str], ...]:
    """Chat messages asking for the activation of every token of one record."""
    listing = "\n".join(f"{i}\t{tok!r}" for i, tok in enumerate(tokens))
    user = TEMPLATE.format(explanation=explanation, n=len(tokens), tokens=listing)
    return ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
