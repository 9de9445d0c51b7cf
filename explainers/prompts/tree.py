"""Tree explainer's revision conversation (tree paper, Ma et al. 2025).

Each child continues its branch's conversation, as the reference does (ref `featureinterp/explainer.py`, fidelity
audit §0 #2): the system prompt; a first user message with ALL train records (token<TAB>activation, plus the
zero-free repeat when values are sparse), the root explanation, its score and worst record and the task; then for
every later node on the branch, the assistant's answer that produced it (IMPROVEMENT / NEW EXPLANATION) and a user
message with that node's feedback and the task again. The last user message is always the current node's feedback.

    messages = revision_messages(train_records, global_max, [Turn("", root_rules, 0.41, fb0),
                                                             Turn("add god", child_rules, 0.55, fb1)], rule_cap=5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sae_workbench.examples.records import Record
from sae_workbench.examples.rules import Rule, parse_rules, rules_to_json
from sae_workbench.explainers.prompts.examples import format_examples
from sae_workbench.explainers.prompts.oneshot import rules_schema
from sae_workbench.explainers.simulate import TokenFeedback
from sae_workbench.llm.jsonparse import JSONParseError, extract_json, parse_json_strict

PROMPT_VERSION = "tree-revise-v2"

SYSTEM = (
    "You are improving an explanation of one feature of a sparse autoencoder trained on a language model's "
    'activations. An explanation is a JSON array of rules {"activates_on": text, "strength": integer 0..5}. '
    "A simulator predicts each token's activation (0..5) from each rule separately, scales it by strength/5, "
    "and takes the maximum over rules. The score is the correlation between predicted and actual activations "
    "over many texts (1.00 is perfect)."
)

RECORDS_INTRO = (
    "These are the texts the explanation is scored on. Each lists its tokens one per line as "
    "token<TAB>activation, with activations scaled to integers 0..5 (0 = not active, 5 = the feature's strongest "
    "activation).\n\n"
)

TASK = (
    "Propose one improvement: add a rule, remove a recent rule, add context a rule requires, or change a "
    "strength. Keep at most {rule_cap} rules, one concept per rule.\n"
    "Answer in exactly this format:\n"
    "IMPROVEMENT: <one sentence>\n"
    "NEW EXPLANATION: <JSON array of rules>"
)


class Turn(NamedTuple):
    """One node of a branch as the conversation shows it."""

    improvement: str
    """The change that produced it ('' for the root)."""
    rules: tuple[Rule, ...]
    """Its explanation."""
    score: float
    """Its train score."""
    feedback: Sequence[TokenFeedback]
    """Its worst train record, token by token."""


def format_feedback(score: float, feedback: Sequence[TokenFeedback]) -> str:
    """'Overall score: X.XX' plus the worst record token by token as (predicted, actual, verdict)."""
    lines = [f"{f.token!r}\t{f.predicted}\t{f.actual}\t{f.verdict}" for f in feedback]
    return (
        f"Overall score: {score:.2f}\n\n"
        "The text the explanation fits worst, one token per line as token<TAB>predicted<TAB>actual<TAB>verdict:\n"
        + "\n".join(lines)
    )


def answer_text(improvement: str, rules: Sequence[Rule]) -> str:
    """An answer in the format the task asks for (the assistant turn that produced a node)."""
    return f"IMPROVEMENT: {improvement}\nNEW EXPLANATION: {rules_to_json(rules)}"


def revision_messages(
    records: Sequence[Record], global_max: float, branch: Sequence[Turn], rule_cap: int
) -> tuple[dict[str, str], ...]:
    """The chat asking for an improvement of the branch's last node (`branch`: root first)."""
    if not branch:
        raise ValueError("a revision needs at least the root of its branch")
    task = TASK.format(rule_cap=rule_cap)
    root = branch[0]
    first = (
        RECORDS_INTRO
        + format_examples(records, global_max)
        + f"\n\nCurrent explanation:\n{rules_to_json(root.rules)}\n\n"
        + format_feedback(root.score, root.feedback)
        + "\n\n"
        + task
    )
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first}]
    for turn in branch[1:]:
        messages.append({"role": "assistant", "content": answer_text(turn.improvement, turn.rules)})
        messages.append(
            {"role": "user", "content": format_feedback(turn.score, turn.feedback) + "\n\n" + task}
        )
    return tuple(messages)


def revision_schema(rule_cap: int) -> dict[str, object]:
    """JSON schema of a revision when the endpoint constrains answers: {"improvement": sentence, "new_explanation":
    rules} (the two parts the task's text format names; `parse_revision` reads either form)."""
    return {
        "type": "object",
        "properties": {"improvement": {"type": "string"}, "new_explanation": rules_schema(rule_cap)},
        "required": ["improvement", "new_explanation"],
        "additionalProperties": False,
    }


def parse_revision(text: str, rule_cap: int) -> tuple[str, tuple[Rule, ...]]:
    """(improvement sentence, new rules) from an 'IMPROVEMENT: … NEW EXPLANATION: [json]' answer, or from the JSON
    object of `revision_schema` (what a schema-constrained endpoint answers)."""
    if text.lstrip().startswith("{"):
        value = parse_json_strict(text)
        if not isinstance(value, dict) or "new_explanation" not in value:
            raise JSONParseError('the answer must be {"improvement": ..., "new_explanation": [rules]}')
        improvement = value.get("improvement")
        return " ".join(str(improvement or "").split()), parse_rules(value["new_explanation"], rule_cap)
    head, sep, _ = text.partition("NEW EXPLANATION:")
    if not sep:
        raise JSONParseError("the answer has no 'NEW EXPLANATION:' line")
    _, isep, improvement = head.partition("IMPROVEMENT:")
    if not isep:
        raise JSONParseError("the answer has no 'IMPROVEMENT:' line")
    rules = parse_rules(extract_json(text, after="NEW EXPLANATION:"), rule_cap)
    return " ".join(improvement.split()), rules
