"""Lexical explainer and simulator on hand-built records."""

import numpy as np
import pytest

from sae_workbench.examples.records import Record
from sae_workbench.explainers.lexical import (
    LexicalConfig,
    LexicalSimulator,
    lexical_explain,
    match_rule_text,
    parse_rule_text,
)


def rec(i: int, toks: list[str], acts: list[float]) -> Record:
    return Record(i, tuple(toks), np.array(acts, dtype=np.float32))


def test_parse_and_match_rule_text():
    assert parse_rule_text('"york" after "new" (strength 5, usually after "x")') == (["york"], ["new"])
    assert parse_rule_text('"dog" or "cat"') == (["dog", "cat"], [])
    assert parse_rule_text("mentions of Python code") == (["mentions", "python", "code"], [])
    toks = [" New", " York", " and", " york", " New", "York"]
    assert match_rule_text('"york" after "new"', toks).tolist() == [False, True, False, False, False, True]


def test_recovers_planted_tokens_and_context():
    recs = []
    for i in range(6):
        recs.append(rec(i, [" a", " dog", " sat", " in", " New", " York"], [0, 4, 0, 0, 0, 3]))
        recs.append(rec(10 + i, [" old", " York", " dog", " x", " y", " z"], [0, 0, 4, 0, 0, 0]))
    out = lexical_explain(recs, LexicalConfig())
    texts = {r.activates_on: r.strength for r in out.rules}
    assert texts == {'"dog"': 5, '"york" after "new"': 4}
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
    from sae_workbench.explainers.lexical import match_rule_record, match_rule_text

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
