"""Prompt of the CoSy text generator (Kopf et al. 2024, CoSy; used as PRISM's description score, Kopf et al.
NeurIPS 2025): write 10 texts, one per line, that include the described concept."""

from __future__ import annotations

COSY_PROMPT_VERSION = "cosy-generator-v1"

# PRISM spec: the evaluation LLM writes 10 texts per description.
N_TEXTS = 10

TEMPLATE = """Write {n} different short texts (one or two sentences each) that clearly include the following concept:
{description}

Write exactly {n} lines, one text per line, with no numbering, no quotes and no blank lines."""


def cosy_messages(description: str, n: int = N_TEXTS) -> tuple[dict[str, str], ...]:
    """Chat messages asking for `n` texts that include the concept."""
    return ({"role": "user", "content": TEMPLATE.format(n=n, description=description)},)
