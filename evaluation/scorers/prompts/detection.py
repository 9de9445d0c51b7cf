"""Prompts of the delphi-style classification scorers (Paulo et al. 2024, "Automatically Interpreting Millions of
Features in Large Language Models"): detection (does this text activate the feature?) and fuzzing (is every
highlighted token one the feature fires on? delphi: "an example is only correct if every marked token is
representative of the feature"). Several texts go into one call; the answer is a JSON array of
0/1, one per text, parsed strictly.
"""

from __future__ import annotations

from collections.abc import Sequence

DETECTION_PROMPT_VERSION = "detection-v1"
# v2: asks whether EVERY highlighted token is one the feature fires on (delphi's rule; some positives are now
# mis-highlighted on purpose).
FUZZING_PROMPT_VERSION = "fuzzing-v2"

# Fuzzing marks highlighted tokens like delphi does.
HIGHLIGHT_OPEN = "<<"
HIGHLIGHT_CLOSE = ">>"

DETECTION_SYSTEM = (
    "You are evaluating an explanation of a feature of a language model. The feature fires on some tokens of "
    "some texts. You decide, for each text, whether the feature fires anywhere in it, using only the explanation."
)

DETECTION_TEMPLATE = """Explanation of the feature: {explanation}

{texts}

For each of the {n} texts, answer 1 if the feature fires somewhere in it and 0 if it does not.
Reply with a JSON array of exactly {n} integers (0 or 1), in order, and nothing else."""

FUZZING_SYSTEM = (
    "You are evaluating an explanation of a feature of a language model. In each text some tokens are "
    f"highlighted between {HIGHLIGHT_OPEN} and {HIGHLIGHT_CLOSE}. Some texts are highlighted wrongly. You decide, "
    "for each text, whether every highlighted token is one on which the feature, as explained, fires."
)

FUZZING_TEMPLATE = """Explanation of the feature: {explanation}

{texts}

For each of the {n} texts, answer 1 if every highlighted token is one the feature fires on, and 0 if any highlighted
token is not. Reply with a JSON array of exactly {n} integers (0 or 1), in order, and nothing else."""


def binary_schema(n: int) -> dict[str, object]:
    """JSON schema of a detection or fuzzing answer: an array of exactly `n` integers, each 0 or 1."""
    return {"type": "array", "items": {"type": "integer", "enum": [0, 1]}, "minItems": n, "maxItems": n}


def _numbered(texts: Sequence[str]) -> str:
    """Texts as "Text 1:" blocks."""
    return "\n\n".join(f"Text {i + 1}:\n{t}" for i, t in enumerate(texts))


def detection_messages(explanation: str, texts: Sequence[str]) -> tuple[dict[str, str], ...]:
    """Chat messages classifying whole texts."""
    user = DETECTION_TEMPLATE.format(explanation=explanation, texts=_numbered(texts), n=len(texts))
    return ({"role": "system", "content": DETECTION_SYSTEM}, {"role": "user", "content": user})


def highlight(tokens: Sequence[str], marked: Sequence[bool]) -> str:
    """Join tokens, wrapping each run of consecutive marked tokens in one <<…>> span."""
    out: list[str] = []
    inside = False
    for tok, m in zip(tokens, marked, strict=True):
        if m and not inside:
            out.append(HIGHLIGHT_OPEN)
        elif not m and inside:
            out.append(HIGHLIGHT_CLOSE)
        inside = bool(m)
        out.append(tok)
    if inside:
        out.append(HIGHLIGHT_CLOSE)
    return "".join(out)


def fuzzing_messages(explanation: str, highlighted_texts: Sequence[str]) -> tuple[dict[str, str], ...]:
    """Chat messages judging highlighted texts (already rendered with `highlight`)."""
    user = FUZZING_TEMPLATE.format(
        explanation=explanation, texts=_numbered(highlighted_texts), n=len(highlighted_texts)
    )
    return ({"role": "system", "content": FUZZING_SYSTEM}, {"role": "user", "content": user})
