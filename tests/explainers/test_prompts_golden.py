"""Golden tests of every prompt's exact text (a change here must bump that prompt's PROMPT_VERSION)."""

import json

import numpy as np
import pytest

from sae_workbench.examples.records import Record
from sae_workbench.examples.rules import Rule, parse_rules
from sae_workbench.explainers.prompts import oneshot, prism, simulate, tree
from sae_workbench.explainers.simulate import TokenFeedback
from sae_workbench.llm.jsonparse import JSONParseError

R1 = Record(1, (" The", " LORD", " said"), np.array([0, 4.0, 1.0], "f4"))
R2 = Record(2, (" a", " b", " c", " d", " e", " f"), np.array([0, 0, 0, 0, 0, 2.0], "f4"))
TASK = (
    "Explain what the feature activates on as a JSON array of at most 5 rules, one concept per rule:\n"
    '[{"activates_on": "<what it fires on, with any context it needs>", "strength": <integer 0..5, its typical '
    "activation>}]\nReply with the JSON array only."
)


def test_versions():
    assert (oneshot.PROMPT_VERSION, tree.PROMPT_VERSION, simulate.PROMPT_VERSION, prism.PROMPT_VERSION) == (
        "oneshot-v1", "tree-revise-v2", "simulate-v1", "prism-label-v2",
    )  # fmt: skip


def test_oneshot_structured_golden():
    system, user = oneshot.structured_prompt([R1], 4.0, 5)
    assert system.startswith("You are studying one feature of a sparse autoencoder")
    assert "token<TAB>activation" in system
    assert user == "Example 1:\n The\t0\n LORD\t5\n said\t1\n\n" + TASK


def test_oneshot_repeats_without_zeros_when_sparse():
    # 1 of 6 values non-zero (< 20%) → repeated with zeros removed (tree paper)
    _, user = oneshot.structured_prompt([R2], 4.0, 5)
    assert user == (
        "Example 1:\n a\t0\n b\t0\n c\t0\n d\t0\n e\t0\n f\t2\n\n"
        "The same examples with the zero values removed:\n\nExample 1:\n f\t2\n\n" + TASK
    )


def test_freetext_golden_and_parse():
    _, user = oneshot.freetext_prompt([R1], 4.0)
    assert user.endswith("\n\nExplain in one sentence what the feature activates on. Reply with the explanation "
                         "only, without a preamble.")  # fmt: skip
    assert oneshot.parse_freetext("  Fires on\n LORD. ") == "Fires on LORD."
    with pytest.raises(ValueError):
        oneshot.parse_freetext("[1, 2]")


def test_tree_revision_conversation_golden_and_parse():
    # The branch root -> child: the reviser sees every train record, the root and its feedback, the answer that made
    # the child, and the child's feedback last (ref featureinterp/explainer.py; fidelity audit #2).
    fb0 = [TokenFeedback(" The", 0, 0, "ok"), TokenFeedback(" LORD", 5, 3, "too high")]
    fb1 = [TokenFeedback(" a", 0, 0, "ok"), TokenFeedback(" f", 0, 2, "too low")]
    branch = [
        tree.Turn("", (Rule('"lord"', 5),), 0.4242, fb0),
        tree.Turn("add f", (Rule('"lord"', 5), Rule('"f"', 2)), 0.5, fb1),
    ]
    task = (
        "Propose one improvement: add a rule, remove a recent rule, add context a rule requires, or change a "
        "strength. Keep at most 5 rules, one concept per rule.\n"
        "Answer in exactly this format:\nIMPROVEMENT: <one sentence>\nNEW EXPLANATION: <JSON array of rules>"
    )
    head = "The text the explanation fits worst, one token per line as token<TAB>predicted<TAB>actual<TAB>verdict:\n"
    messages = tree.revision_messages([R1, R2], 4.0, branch, 5)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == tree.SYSTEM
    assert messages[1]["content"] == (
        "These are the texts the explanation is scored on. Each lists its tokens one per line as "
        "token<TAB>activation, with activations scaled to integers 0..5 (0 = not active, 5 = the feature's strongest "
        "activation).\n\n"
        "Example 1:\n The\t0\n LORD\t5\n said\t1\n\n"
        "Example 2:\n a\t0\n b\t0\n c\t0\n d\t0\n e\t0\n f\t2\n\n"
        'Current explanation:\n[{"activates_on": "\\"lord\\"", "strength": 5}]\n\n'
        "Overall score: 0.42\n\n" + head + "' The'\t0\t0\tok\n' LORD'\t5\t3\ttoo high\n\n" + task
    )
    assert messages[2]["content"] == (
        'IMPROVEMENT: add f\nNEW EXPLANATION: [{"activates_on": "\\"lord\\"", "strength": 5}, '
        '{"activates_on": "\\"f\\"", "strength": 2}]'
    )
    assert (
        messages[3]["content"]
        == "Overall score: 0.50\n\n" + head + "' a'\t0\t0\tok\n' f'\t0\t2\ttoo low\n\n" + task
    )
    # The assistant turn is in the format the parser reads back.
    assert tree.parse_revision(messages[2]["content"], 5) == ("add f", branch[1].rules)
    # Sparse train values (< 20% non-zero) are repeated without zeros, as in the roots' prompt.
    sparse = tree.revision_messages([R2], 4.0, branch[:1], 5)
    assert (
        "The same examples with the zero values removed:\n\nExample 1:\n f\t2\n\nCurrent"
        in sparse[1]["content"]
    )
    with pytest.raises(ValueError):
        tree.revision_messages([R1], 4.0, [], 5)
    imp, rules = tree.parse_revision(
        'IMPROVEMENT: add god\nNEW EXPLANATION: [{"activates_on": "god", "strength": 3}]', 5
    )
    assert imp == "add god" and rules == (Rule("god", 3),)
    with pytest.raises(JSONParseError):
        tree.parse_revision('NEW EXPLANATION: [{"activates_on": "god", "strength": 9}]', 5)


def test_oneshot_few_shot_messages():
    # Five worked examples of our own before the real request (tree paper's roots: 5 few-shot examples).
    messages = oneshot.structured_messages([R1], 4.0, 1, few_shot=True)
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 5 + ["user"]
    assert messages[-1]["content"] == "Example 1:\n The\t0\n LORD\t5\n said\t1\n\n" + TASK.replace(
        "5 rules", "1 rules"
    )
    assert messages[1]["content"].startswith("Example 1:\n She\t0\n did\t0\n not\t4\n")
    assert messages[1]["content"].endswith(TASK.replace("5 rules", "1 rules"))
    # Answers are valid rule arrays, cut to the cap (the third example has two rules).
    for m in messages[2:-1:2]:
        assert len(parse_rules(json.loads(m["content"]), 5)) == 1
    assert len(json.loads(oneshot.structured_messages([R1], 4.0, 5, few_shot=True)[6]["content"])) == 2
    assert oneshot.structured_messages([R1], 4.0, 5) == (
        {"role": "system", "content": oneshot.SYSTEM}, {"role": "user", "content": oneshot.structured_prompt([R1], 4.0, 5)[1]},
    )  # fmt: skip


def test_simulate_golden_and_strict_parse():
    _, user = simulate.simulate_prompt('"lord"', [R1])
    assert user == (
        'Explanation: "lord"\n\nText 1 (3 tokens): [" The", " LORD", " said"]\n\n'
        'Reply with JSON only: {"predictions": [[...], ...]} with one list per text, in order, holding one '
        "integer 0..5 per token."
    )
    assert simulate.parse_predictions('{"predictions": [[0, 5, 1]]}', [R1]) == [[0, 5, 1]]
    for bad in (
        '{"predictions": [[0, 5]]}',
        '{"predictions": [[0, 6, 1]]}',
        "[[0,5,1]]",
        '{"predictions": [[0, 5, 1]',
    ):
        with pytest.raises(ValueError):
            simulate.parse_predictions(bad, [R1])


def test_prism_label_golden():
    assert prism.label_prompt(["The [ LORD] said"], ["LORD (4.00)"]) == (
        "You are a careful AI researcher studying one feature inside a language model. It activates on some of the "
        'tokens of the text excerpts below. Each excerpt starts with ">" under a header such as "=== Text #12 ===", '
        "where the number identifies the excerpt.\n"
        "The feature activates token by token, and its activation on a token can only depend on that token and the "
        "tokens before it, never on the tokens after it.\n"
        "Find the concept that makes the feature activate across these excerpts and describe the pattern it follows. "
        "Pay most attention to the spans wrapped in [delimiters] and to the context around them: they mark where the "
        "feature is strongest.\n"
        "Before the excerpts comes a summary that lists each highlighted span's first token with its activation. "
        'After the excerpts, following "Description: ", write the description that fits all of this best.\n'
        "Rules for the description:\n"
        "- Do not merely list the highlighted words; name the broader concept behind them.\n"
        "- Do not quote words from the excerpts.\n"
        "- Write a short phrase, not a complete sentence.\n"
        "- Do not end the description with a full stop.\n"
        "- Do not mention the [delimiters].\n"
        '- Do not use wording such as "highlighted spans", "Concepts of" or "Concepts related to"; state only what '
        "the concept means.\n"
        '- Do not begin with "Description:"; give only the description itself.\n\n'
        "=== Summary of highlights ===\nText #1: LORD (4.00)\n\n=== Text #1 ===\n> The [ LORD] said\n\nDescription: "
    )
    # The reference (lkopf/prism src/utils/config.py) forbids an entire sentence and a final full stop.
    assert "not a complete sentence" in prism.INSTRUCTIONS and "full stop" in prism.INSTRUCTIONS
    assert "one full sentence" not in prism.INSTRUCTIONS
    assert prism.parse_description("Description:  Divine names\nin scripture") == "Divine names in scripture"
    # Stored as given, like the reference (it only strips line breaks): a full stop the LLM adds stays.
    assert prism.parse_description("A deity.") == "A deity."
    with pytest.raises(ValueError):
        prism.parse_description("Description:   ")
