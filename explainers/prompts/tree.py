"""Tree explainer's revision prompt (tree paper, Ma et al. 2025): score feedback + worst record → improvement."""

from __future__ import annotations

from collections.abc import Sequence

from sae_workbench.examples.rules import Rule, parse_rules, rules_to_json
from sae_workbench.explainers.simulate import TokenFeedback
from sae_workbench.llm.jsonparse import JSONParseError, extract_json

PROMPT_VERSION = "tree-revise-v1"

SYSTEM = (
    "You are improving an explanation of one feature of a sparse autoencoder trained on a language model's "
    'activations. An explanation is a JSON array of rules {"activates_on": text, "strength": integer 0..5}. '
    "A simulator predicts each token's activation (0..5) from each rule separately, scales it by strength/5, "
    "and takes the maximum over rules. The score is the correlation between predicted and actual activations "
    "over many texts (1.00 is perfect)."
)

TASK = (
    "Propose one improvement: add a rule, remove a recent rule, add context a rule requires, or change a "
    "strength. Keep at most {rule_cap} rules, one concept per rule.\n"
    "Answer in exactly this format:\n"
    "IMPROVEMENT: <one sentence>\n"
    "NEW EXPLANATION: <JSON array of rules>"
)


def format_feedback(score: float, feedback: Sequence[TokenFeedback]) -> str:
    """'Overall score: X.XX' plus the worst record token by token as (predicted, actual, verdict)."""
    lines = [f"{f.token!r}\t{f.predicted}\t{f.actual}\t{f.verdict}" for f in feedback]
    return (
        f"Overall score: {score:.2f}\n\n"
        "The text the explanation fits worst, one token per line as token<TAB>predicted<TAB>actual<TAB>verdict:\n"
        + "\n".join(lines)
    )


def revise_prompt(
    rules: Sequence[Rule], score: float, feedback: Sequence[TokenFeedback], rule_cap: int
) -> tuple[str, str]:
    """(system, user) asking for an improved explanation."""
    user = (
        f"Current explanation:\n{rules_to_json(rules)}\n\n"
        + format_feedback(score, feedback)
        + "\n\n"
        + TASK.format(rule_cap=rule_cap)
    )
    return SYSTEM, user


def parse_revision(text: str, rule_cap: int) -> tuple[str, tuple[Rule, ...]]:
    """(improvement sentence, new rules) from an 'IMPROVEMENT: … NEW EXPLANATION: [json]' answer."""
    head, sep, _ = text.partition("NEW EXPLANATION:")
    if not sep:
        raise JSONParseError("the answer has no 'NEW EXPLANATION:' line")
    _, isep, improvement = head.partition("IMPROVEMENT:")
    if not isep:
        raise JSONParseError("the answer has no 'IMPROVEMENT:' line")
    rules = parse_rules(extract_json(text, after="NEW EXPLANATION:"), rule_cap)
    return " ".join(improvement.split()), rules
