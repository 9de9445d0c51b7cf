"""Lexical explainer and simulator on hand-built records."""

import json

import numpy as np
import pytest

from sae_workbench.examples.records import Record
from sae_workbench.examples.rule_language import match_rule_text, parse_rule_text, quote_token
from sae_workbench.explainers.lexical import LexicalConfig, lexical_explain
from sae_workbench.explainers.lexical_simulator import LexicalSimulator


def rec(i: int, toks: list[str], acts: list[float]) -> Record:
    return Record(i, tuple(toks), np.array(acts, dtype=np.float32))


def test_parse_and_match_rule_text():
    assert parse_rule_text('"york" after "new" (strength 5, usually after "x")') == (["york"], ["new"])
    assert parse_rule_text('"dog" or "cat"') == (["dog", "cat"], [])
    assert parse_rule_text("mentions of Python code") == (["mentions", "python", "code"], [])
    toks = [" New", " York", " and", " york", " New", "York", " new", " york"]
    # Quoted tokens match exactly (case kept, surrounding spaces stripped); unquoted words ignore case.
    assert match_rule_text('"York" after "New"', toks).tolist() == [0, 1, 0, 0, 0, 1, 0, 0]
    assert match_rule_text('"york" after "new"', toks).tolist() == [0, 0, 0, 0, 0, 0, 0, 1]
    assert match_rule_text("York city", toks).tolist() == [0, 1, 0, 1, 0, 1, 0, 1]


def test_recovers_planted_tokens_and_context():
    recs = []
    for i in range(6):
        recs.append(rec(i, [" a", " dog", " sat", " in", " New", " York"], [0, 4, 0, 0, 0, 3]))
        recs.append(rec(10 + i, [" old", " York", " dog", " x", " y", " z"], [0, 0, 4, 0, 0, 0]))
    out = lexical_explain(recs, LexicalConfig())
    texts = {r.activates_on: r.strength for r in out.rules}
    assert texts == {'"dog"': 5, '"York" after "New"': 4}
    assert out.coverage == 1.0
    assert out.text.startswith("Lexical explainer (activation statistics, not an LLM)")
    pred = LexicalSimulator().simulate_sync(out.text, recs[:2])
    assert pred[0].tolist() == [0, 5, 0, 0, 0, 5] and pred[1].tolist() == [0, 0, 5, 0, 0, 0]


def test_dead_feature_gives_no_rules():
    out = lexical_explain([rec(0, ["a", "b"], [0, 0])])
    assert out.rules == () and "no token" in out.text


def test_rule_cap_limits_rules():
    toks = [f" t{i}" for i in range(8)]
    recs = [rec(j, toks, [float(i + 1) for i in range(8)]) for j in range(3)]
    assert len(lexical_explain(recs, LexicalConfig(rule_cap=3)).rules) == 3


@pytest.mark.parametrize("seed", range(8))
def test_record_matching_by_key_codes_equals_matching_by_strings(seed):
    import numpy as np

    from sae_workbench.examples.records import Record
    from sae_workbench.examples.rule_language import match_rule_record, match_rule_text

    rng = np.random.default_rng(seed)
    # Rules are matched before any record has some of their words (codes must still agree later).
    words = [" York", "york", " New", "new ", " the", "\n", " ", f" unseen{seed}", " Cat", "cat"]
    rules = ['"york"', '"york" after "new"', '"cat" or "dog"', f'"unseen{seed}" after "the"', "Cats and York",
             '"" after "new"', '"the"']  # fmt: skip
    before = {r: match_rule_record(r, Record(0, (" x",), np.zeros(1, np.float32))) for r in rules}
    assert not any(b.any() for b in before.values())
    records = []
    for i in range(20):
        tokens = tuple(str(w) for w in rng.choice(words, int(rng.integers(1, 12))))
        rec = Record(i, tokens, np.zeros(len(tokens), np.float32))
        records.append(rec)
        for rule in rules:
            got = match_rule_record(rule, rec).tolist()
            assert got == match_rule_text(rule, tokens).tolist(), (rule, tokens)
    # The simulator matches all records at once: no context may leak across a record boundary.
    explanation = "; ".join(rules[1:4])
    predicted = LexicalSimulator().simulate_sync(explanation, records)
    for rec, pred in zip(records, predicted, strict=True):
        expected = np.zeros(len(rec), dtype=bool)
        for clause in rules[1:4]:
            expected |= match_rule_text(clause, rec.tokens)
        assert pred.tolist() == (expected * 5.0).tolist()


def test_code_tokens_keep_case_and_whitespace_contexts_are_visible():
    """Issue 19 item 6: `None`/`True` are not lower-cased, and a whitespace-only context is shown escaped, never as
    an empty "" (both planted: the feature fires on " None" and " True" right after a newline + indentation)."""
    recs = []
    for i in range(6):
        recs.append(rec(i, [" x", " =", "\n", "    ", " None", " if", " y"], [0, 0, 0, 0, 4, 0, 0]))
        recs.append(rec(10 + i, ["\n", " True", " and", " none", " true", " z"], [0, 3, 0, 0, 0, 0]))
    out = lexical_explain(recs, LexicalConfig())
    texts = [r.activates_on for r in out.rules]
    assert texts == ['"None"', '"True"']
    assert "none" not in out.text and "true" not in out.text
    assert 'usually after "\\u0020\\u0020\\u0020\\u0020"' in out.text and 'usually after "\\n"' in out.text
    assert 'after ""' not in out.text
    # The rendered rules match the planted tokens and not their lower-case forms.
    pred = LexicalSimulator().simulate_sync(out.text, recs[:2])
    assert pred[0].tolist() == [0, 0, 0, 0, 5, 0, 0] and pred[1].tolist() == [0, 5, 0, 0, 0, 0]


def test_quoted_whitespace_reads_back_and_matches_exactly():
    for token in ["\n", "\n\n", "\t", "\u00a0", "  ", "None"]:
        quoted = quote_token(token)
        assert json.loads(quoted) == token
        assert not any(c.isspace() for c in quoted), quoted  # every whitespace character is written escaped
        assert match_rule_text(quoted, ["x", token, "\r\n", " "]).tolist() == [
            False,
            True,
            False,
            token == " ",
        ]
