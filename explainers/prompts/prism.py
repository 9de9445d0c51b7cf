"""PRISM cluster-labelling prompt (Kopf et al. 2025, arXiv 2506.15538): one description per cluster of texts."""

from __future__ import annotations

from collections.abc import Sequence

PROMPT_VERSION = "prism-label-v1"

INSTRUCTIONS = (
    "You are investigating a feature of a language model. Below are texts where the feature activates; the "
    "tokens where it activates most are wrapped in [brackets]. A token's activation depends only on the "
    "earlier tokens of its text.\n"
    "Describe the common concept the feature responds to, focusing on the [bracketed] spans, in one full "
    "sentence. Do not list or quote the highlighted words, do not mention the brackets, and do not start with "
    '"Concepts related to" or "Description:".'
)


def label_prompt(highlighted_texts: Sequence[str], summaries: Sequence[str]) -> str:
    """The single user message for one cluster: instructions, the highlight summary, the texts, 'Description: '."""
    summary = "\n".join(f"Text #{i + 1}: {s}" for i, s in enumerate(summaries))
    texts = "\n\n".join(f"=== Text #{i + 1} ===\n> {t}" for i, t in enumerate(highlighted_texts))
    return f"{INSTRUCTIONS}\n\n=== Summary of highlights ===\n{summary}\n\n{texts}\n\nDescription: "


def parse_description(text: str) -> str:
    """One non-empty sentence; a leading 'Description:' is dropped (ValueError when empty)."""
    answer = " ".join(text.split())
    if answer.lower().startswith("description:"):
        answer = answer[len("description:") :].strip()
    if not answer:
        raise ValueError("the answer is empty; reply with one full sentence")
    return answer
