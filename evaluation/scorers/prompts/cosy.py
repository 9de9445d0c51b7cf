"""Prompts of the CoSy text generator (Kopf et al. 2024, CoSy; used as PRISM's description score, Kopf et al.
NeurIPS 2025): write 10 texts, one per line, that include the described concept.

Two settings: the default asks for short texts (one or two sentences, quick on a laptop); the paper setting asks, as
the reference does, for texts of a given length in words (lkopf/prism src/utils/config.py PROMPT_SAMPLE_INSTRUCTION:
10 "sentences" of MAX_TEXT_LENGTH = 512 words, one per line, each a standalone text sample).
"""

from __future__ import annotations

COSY_PROMPT_VERSION = "cosy-generator-v1"
"""The short-text prompt."""
COSY_PAPER_PROMPT_VERSION = "cosy-generator-words-v1"
"""The fixed-length prompt of the paper setting (its word count is part of the scorer's key params)."""

# PRISM spec and reference (N_SAMPLES = 10): the evaluation LLM writes 10 texts per description.
N_TEXTS = 10

TEMPLATE = """Write {n} different short texts (one or two sentences each) that clearly include the following concept:
{description}

Write exactly {n} lines, one text per line, with no numbering, no quotes and no blank lines."""

PAPER_TEMPLATE = """Write {n} texts of {words} words each. Put each text on a single line, one text per line, and add \
nothing else: no formatting, no introduction, no explanation. Every text must stand on its own as one sample that \
could be stored as a row of a text file. The texts should include:
{description}"""


def cosy_messages(description: str, n: int = N_TEXTS, words: int | None = None) -> tuple[dict[str, str], ...]:
    """Chat messages asking for `n` texts that include the concept: short ones, or `words` words each (paper)."""
    if words is None:
        content = TEMPLATE.format(n=n, description=description)
    else:
        content = PAPER_TEMPLATE.format(n=n, words=words, description=description)
    return ({"role": "user", "content": content},)
