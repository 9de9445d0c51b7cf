"""Golden tests of every prompt's exact text (a change here must bump that prompt's PROMPT_VERSION), and contract
tests that check each prompt against its JSON schema, its parser and the records it shows."""

import json
import re

import jsonschema
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


# ---- Contracts: what each prompt asks for is what its JSON schema and its parser accept -----------------------------
# The goldens above pin the text; these check it against things it was not written from: the JSON schema sent with the
# request (validated by the independent `jsonschema` package), the parser that reads the answer back, and the records
# the prompt was built from (levels recomputed here as floor(5 · act / max), the tree paper's 0..5 scale).

UNFILLED = re.compile(r"\{[A-Za-z_][A-Za-z_0-9]*\}|\{\{|\}\}")
"""A str.format field left in a prompt, or an escaped brace that was never formatted."""


def _records(seed: int) -> list[Record]:
    """Three records of random words and random sparse activations."""
    rng = np.random.default_rng(seed)
    words = [" alpha", " beta", " gamma", "delta", " LORD", "\u00e9t\u00e9", "(", " 1987"]
    out = []
    for i, n in enumerate((5, 9, 7)):
        acts = np.where(rng.random(n) < 0.4, rng.uniform(0.1, 8.0, n), 0.0).astype("f4")
        out.append(Record(i, tuple(rng.choice(words, n)), acts))
    return out


def _levels_by_hand(records: list[Record], global_max: float) -> list[list[tuple[str, int]]]:
    """Each record's (token, floor(5 · activation / global max)) pairs."""
    return [
        [(t, int(np.floor(5 * float(a) / global_max))) for t, a in zip(r.tokens, r.acts, strict=True)]
        for r in records
    ]


def _shown_examples(text: str) -> list[list[tuple[str, int]]]:
    """The 'Example i:' blocks of a prompt read back as (token, level) lines (first listing only)."""
    body = text.split("\n\nThe same examples with the zero values removed:")[0]
    blocks = re.findall(r"Example (\d+):\n(.*?)(?=\n\n|$)", body, flags=re.S)
    assert [int(i) for i, _ in blocks] == list(range(1, len(blocks) + 1))
    return [
        [(line.rsplit("\t", 1)[0], int(line.rsplit("\t", 1)[1])) for line in b.split("\n")] for _, b in blocks
    ]


def _search(pattern: str, text: str) -> re.Match[str]:
    """The first match of `pattern` in `text`, which must have one."""
    found = re.search(pattern, text)
    assert found is not None, (pattern, text)
    return found


def _validator(schema: dict) -> jsonschema.Draft202012Validator:
    """A JSON Schema 2020-12 validator of `schema` (which must itself be a valid schema)."""
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("rule_cap", [1, 3, 5])
def test_structured_prompt_asks_for_what_the_schema_and_parser_accept(rule_cap: int) -> None:
    records = _records(rule_cap)
    global_max = max(float(r.acts.max()) for r in records)
    system, user = oneshot.structured_prompt(records, global_max, rule_cap)
    for text in (system, user):
        assert not UNFILLED.search(text), text
    # The records shown are the records given, on the 0..5 scale.
    shown = _shown_examples(user)
    want = _levels_by_hand(records, global_max)
    assert shown == want
    levels = [v for block in want for _, v in block]
    assert ("zero values removed" in user) == (np.count_nonzero(levels) / len(levels) < 0.2)
    # The answer format the prompt states, with its placeholders filled, is valid under the schema and parses.
    (template,) = [line for line in user.split("\n") if line.startswith('[{"activates_on"')]
    lo, hi = map(int, _search(r"<integer (\d+)\.\.(\d+)", template).groups())
    assert (lo, hi) == (0, 5)
    assert int(_search(r"at most (\d+) rules", user).group(1)) == rule_cap
    answer = json.loads(
        re.sub(r"<integer[^>]*>", str(hi), re.sub(r'"<[^>"]*>"', '"the word LORD"', template))
    )
    schema = _validator(oneshot.rules_schema(rule_cap))
    assert schema.is_valid(answer) and parse_rules(answer, rule_cap) == (Rule("the word LORD", hi),)
    # Every strength the prompt allows is accepted by both, and nothing outside it by either.
    for s in range(lo - 2, hi + 3):
        rule = [{"activates_on": "x", "strength": s}]
        assert schema.is_valid(rule) == (lo <= s <= hi)
        try:
            parse_rules(rule, rule_cap)
            parsed = True
        except JSONParseError:
            parsed = False
        assert parsed == (lo <= s <= hi), s
    # As many rules as the stated cap are valid; one more is refused by the schema (the parser keeps the first cap).
    full = [{"activates_on": f"w{i}", "strength": 1} for i in range(rule_cap + 1)]
    assert schema.is_valid(full[:rule_cap]) and not schema.is_valid(full)
    assert len(parse_rules(full, rule_cap)) == rule_cap
    for wrong in (
        [],
        {"activates_on": "x", "strength": 1},
        [{"activates_on": "", "strength": 1}],
        [{"activates_on": "x"}],
        [{"strength": 3}],
        [{"activates_on": "x", "strength": "3"}],
        [{"activates_on": "x", "strength": 2.5}],
        [{"activates_on": "x", "strength": True}],
        [{"activates_on": 7, "strength": 3}],
    ):
        assert not schema.is_valid(wrong), wrong
        with pytest.raises(JSONParseError):
            parse_rules(wrong, rule_cap)
    # The few-shot answers are answers the schema accepts.
    for m in oneshot.structured_messages(records, global_max, rule_cap, few_shot=True):
        if m["role"] == "assistant":
            assert schema.is_valid(json.loads(m["content"])), m["content"]
        assert not UNFILLED.search(m["content"])


def test_simulate_prompt_asks_for_what_the_schema_and_parser_accept() -> None:
    records = _records(7)
    system, user = simulate.simulate_prompt('"lord"', records)
    assert not UNFILLED.search(system) and not UNFILLED.search(user)
    # Each text is listed with its token count and its tokens as a JSON array, in order.
    listed = re.findall(r"^Text (\d+) \((\d+) tokens\): (.*)$", user, flags=re.M)
    assert [int(i) for i, _, _ in listed] == [1, 2, 3]
    assert [(int(n), tuple(json.loads(toks))) for _, n, toks in listed] == [
        (len(r), r.tokens) for r in records
    ]
    # The stated format and range: {"predictions": [[...], ...]}, one list per text, integers 0..5.
    assert '{"predictions": [[...], ...]}' in user
    lo, hi = map(int, _search(r"integer (\d+)\.\.(\d+) per token", user).groups())
    assert (lo, hi) == (0, 5)
    schema = _validator(simulate.predictions_schema(records))
    rng = np.random.default_rng(0)
    good = [[int(v) for v in rng.integers(lo, hi + 1, len(r))] for r in records]
    assert schema.is_valid({"predictions": good})
    assert simulate.parse_predictions(json.dumps({"predictions": good}), records) == good
    bad_rows = [
        [good[0][:-1], *good[1:]],  # one token short
        [[*good[0], 0], *good[1:]],  # one token too many
        good[:-1],  # a text missing
        [*good, [0]],  # a text too many
        [[hi + 1, *good[0][1:]], *good[1:]],
        [[lo - 1, *good[0][1:]], *good[1:]],
        [[2.5, *good[0][1:]], *good[1:]],
        [["3", *good[0][1:]], *good[1:]],
        [[True, *good[0][1:]], *good[1:]],
    ]
    for wrong in [*({"predictions": rows} for rows in bad_rows), good, {"prediction": good}]:
        assert not schema.is_valid(wrong), wrong
        with pytest.raises(ValueError):
            simulate.parse_predictions(json.dumps(wrong), records)


def test_tree_revision_asks_for_what_its_parser_and_schema_accept() -> None:
    records = _records(3)
    global_max = max(float(r.acts.max()) for r in records)
    root = tree.Turn("", (Rule('"lord"', 5),), 0.4, [TokenFeedback(" LORD", 5, 3, "too high")])
    messages = tree.revision_messages(records, global_max, [root], 3)
    for m in messages:
        assert not UNFILLED.search(m["content"]), m["content"]
    user = messages[-1]["content"]
    assert _shown_examples(user.split("Current explanation:")[0]) == _levels_by_hand(records, global_max)
    assert int(_search(r"Keep at most (\d+) rules", user).group(1)) == 3
    # The system prompt's rule format and range are the parser's.
    assert _search(r'\{"activates_on": text, "strength": integer (\d)\.\.(\d)\}', tree.SYSTEM).groups() == (
        "0",
        "5",
    )
    # The answer format the task states, filled in, parses back to what was filled in.
    fmt = user[user.index("Answer in exactly this format:\n") :].split("\n", 1)[1]
    rules = (Rule("the word God", 4), Rule('"heaven"', 2))
    filled = fmt.replace("<one sentence>", "add God").replace(
        "<JSON array of rules>", json.dumps([r.to_dict() for r in rules])
    )
    assert tree.parse_revision(filled, 3) == ("add God", rules)
    # The schema-constrained form: what the schema accepts parses to the same; what it refuses, the parser refuses.
    schema = _validator(tree.revision_schema(3))
    obj = {"improvement": "add God", "new_explanation": [r.to_dict() for r in rules]}
    assert schema.is_valid(obj) and tree.parse_revision(json.dumps(obj), 3) == ("add God", rules)
    assert not schema.is_valid({**obj, "new_explanation": [r.to_dict() for r in rules * 2]})  # 4 > cap 3
    for wrong in (
        {"improvement": "x"},
        {**obj, "new_explanation": [{"activates_on": "x", "strength": 9}]},
        {**obj, "new_explanation": []},
    ):
        assert not schema.is_valid(wrong), wrong
        with pytest.raises(JSONParseError):
            tree.parse_revision(json.dumps(wrong), 3)


def test_prism_prompt_lays_out_what_its_instructions_describe() -> None:
    texts = ["The [ LORD] said", "and [ God] spoke", "in the [ heavens]"]
    summaries = ["LORD (4.00)", "God (3.10)", "heavens (1.25)"]
    prompt = prism.label_prompt(texts, summaries)
    assert not UNFILLED.search(prompt)
    # "Each excerpt starts with '>' under a header such as '=== Text #12 ===', where the number identifies it."
    assert re.findall(r"=== Text #(\d+) ===\n> (.*)", prompt) == [
        (str(i + 1), t) for i, t in enumerate(texts)
    ]
    # "Before the excerpts comes a summary that lists each highlighted span's first token with its activation."
    summary = prompt.index("=== Summary of highlights ===")
    assert summary < prompt.index("=== Text #1 ===")
    assert re.findall(r"^Text #(\d+): (.*)$", prompt, flags=re.M) == [
        (str(i + 1), s) for i, s in enumerate(summaries)
    ]
    # "After the excerpts, following 'Description: ', write the description": the prompt ends on that cue, and an
    # answer that repeats it is read without it.
    assert prompt.endswith("\n\nDescription: ") and prompt.rindex("=== Text #3 ===") < prompt.rindex(
        "Description: "
    )
    assert prism.parse_description("Description: divine names") == "divine names"
