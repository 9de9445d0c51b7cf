"""PRISM cluster-labelling prompt (Kopf et al. 2025, arXiv 2506.15538): one description per cluster of texts."""

from __future__ import annotations

from collections.abc import Sequence

# v2: a short phrase without a full stop, as the reference asks (v1 asked for one full sentence).
PROMPT_VERSION = "prism-label-v2"

# Paraphrases the reference's PROMPT_INSTRUCTION (lkopf/prism src/utils/config.py): the text format, the causal note,
# the [span] focus, the highlight summary, and its rules for the answer — a description, NOT an entire sentence and
# without a final full stop (its released descriptions are noun phrases), no listed or quoted words, no mention of
# the delimiters, no "Concepts of/related to" phrasing, no leading "Description:".
INSTRUCTIONS = (
    "You are a careful AI researcher studying one feature inside a language model. It activates on some of the "
    'tokens of the text excerpts below. Each excerpt starts with ">" under a header such as "=== Text #12 ===", '
    "where the number identifies the excerpt.\n"
    "The feature activates token by token, and its activation on a token can only depend on that token and the "
    "tokens before it, never on the tokens after it.\n"
    "Find the concept that makes the feature activate across these excerpts and describe the pattern it follows. "
    "Pay most attention to the spans wrapped in [delimiters] and to the context around them: they mark where the "
    "feature is strongest.\n"
    "Before the excerpts comes a summary that lists each highlighted span's first token with its activation. After "
    'the excerpts, following "Description: ", write the description that fits all of this best.\n'
    "Rules for the description:\n"
    "- Do not merely list the highlighted words; name the broader concept behind them.\n"
    "- Do not quote words from the excerpts.\n"
    "- Write a short phrase, not a complete sentence.\n"
    "- Do not end the description with a full stop.\n"
    "- Do not mention the [delimiters].\n"
    '- Do not use wording such as "highlighted spans", "Concepts of" or "Concepts related to"; state only what the '
    "concept means.\n"
    '- Do not begin with "Description:"; give only the description itself.'
)


LABEL_MAX_TOKENS = 64
"""Completion budget of one label: a short phrase (a small model otherwise rambles to the job's whole budget)."""


def label_prompt(highlighted_texts: Sequence[str], summaries: Sequence[str]) -> str:
    """The single user message for one cluster: instructions, the highlight summary, the texts, 'Description: '."""
    summary = "\n".join(f"Text #{i + 1}: {s}" for i, s in enumerate(summaries))
    texts = "\n\n".join(f"=== Text #{i + 1} ===\n> {t}" for i, t in enumerate(highlighted_texts))
    return f"{INSTRUCTIONS}\n\n=== Summary of highlights ===\n{summary}\n\n{texts}\n\nDescription: "


def parse_description(text: str) -> str:
    """The description on one line; a leading 'Description:' is dropped (ValueError when empty).

    A final full stop is kept: the reference asks the LLM not to write one but stores its answer as given
    (lkopf/prism feature_description.py only removes line breaks), so neither do we trim it.
    """
    answer = " ".join(text.split())
    if answer.lower().startswith("description:"):
        answer = answer[len("description:") :].strip()
    if not answer:
        raise ValueError("the answer is empty; reply with a short description of the concept")
    return answer
