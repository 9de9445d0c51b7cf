"""Prompt of the rule-complexity rater (tree paper, Ma et al. NeurIPS 2025: an LLM rates each rule 0..5; abstract
concepts and specific required context are more complex than token lists)."""

from __future__ import annotations

from collections.abc import Sequence

COMPLEXITY_PROMPT_VERSION = "complexity-v1"

TEMPLATE = """Rate the complexity of each rule below, which describe when a feature of a language model fires.
0 = a single literal token; 1-2 = a short list of tokens or spellings; 3 = a token in a specific required context;
4 = a semantic category or topic; 5 = an abstract concept or a combination of conditions.

Rules:
{rules}

Reply with a JSON array of exactly {n} integers between 0 and 5, one per rule in order, and nothing else."""


def ratings_schema(n: int) -> dict[str, object]:
    """JSON schema of the answer: an array of exactly `n` integers 0..5 (tree paper's rating scale)."""
    return {
        "type": "array",
        "items": {"type": "integer", "enum": list(range(6))},
        "minItems": n,
        "maxItems": n,
    }


def complexity_messages(rules: Sequence[str]) -> tuple[dict[str, str], ...]:
    """Chat messages asking for one complexity rating per rule."""
    listing = "\n".join(f"{i + 1}. {r}" for i, r in enumerate(rules))
    return ({"role": "user", "content": TEMPLATE.format(rules=listing, n=len(rules))},)
