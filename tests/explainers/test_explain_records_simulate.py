"""Records, discretisation, pooled correlation and worst-record feedback on hand-computed tiny cases."""

import asyncio
import math

import numpy as np
import pytest

from sae_workbench.examples.records import (
    Record,
    crop_record,
    discretise,
    format_record,
    make_record,
    nonzero_fraction,
)
from sae_workbench.examples.rules import Rule
from sae_workbench.explainers.lexical_simulator import LexicalSimulator
from sae_workbench.explainers.simulate import (
    pooled_correlation,
    simulate_rules,
    token_feedback,
    worst_record_index,
)


def rec(i: int, toks: str, acts: list[float]) -> Record:
    return Record(i, tuple(toks.split()), np.array(acts, dtype=np.float32))


def test_discretise_floor_and_clip():
    # floor(5 * x / 4): 0→0, 0.79→0, 0.8→1, 2→2, 3.99→4, 4→5, 9→clipped 5, -1→clipped 0
    got = discretise(np.array([0, 0.79, 0.8, 2, 3.99, 4, 9, -1], dtype=np.float32), 4.0)
    assert got.tolist() == [0, 0, 1, 2, 4, 5, 5, 0]
    assert discretise(np.ones(3, dtype=np.float32), 0.0).tolist() == [0, 0, 0]


def test_make_record_drops_bos_and_masked_positions():
    r = make_record(
        7, ["<bos>", "a", "b", "<pad>"], [1, 2, 3], [1.0, 2.0, 9.0], mask=[False, True, True, False]
    )
    assert r.tokens == ("a", "b") and r.acts.tolist() == [1.0, 2.0] and r.window_id == 7


def test_crop_keeps_peak_and_left_context():
    r = Record(0, tuple(str(i) for i in range(100)), np.zeros(100, dtype=np.float32))
    r.acts[60] = 3.0
    c = crop_record(r, 32, lead=8)
    assert len(c) == 32 and c.tokens[-1] == "68" and c.max_act == 3.0


def test_format_record_and_nonzero_fraction():
    r = rec(0, "a b c d", [0, 1, 2, 4])
    assert format_record(r, 4.0) == "a\t0\nb\t1\nc\t2\nd\t5"
    assert nonzero_fraction([r], 4.0) == 0.75


def test_pooled_correlation_hand_case():
    # pooled over records: pred [1,0,0,1] vs true [1,0,0,2] → r = cov/(sd sd) computed by hand = 0.9045...
    p = [np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    t = [np.array([1.0, 0.0]), np.array([0.0, 2.0])]
    pc = np.array([0.5, -0.5, -0.5, 0.5])
    tc = np.array([0.25, -0.75, -0.75, 1.25])
    expected = (pc @ tc) / math.sqrt((pc @ pc) * (tc @ tc))
    assert pooled_correlation(p, t) == pytest.approx(expected)
    assert pooled_correlation(p, t) == pytest.approx(0.9045340337)


def test_pooled_is_not_mean_of_per_record():
    # per-record correlations are both 1.0, but pooling exposes the scale mismatch across records
    p = [np.array([0.0, 1.0]), np.array([0.0, 1.0])]
    t = [np.array([0.0, 1.0]), np.array([0.0, 10.0])]
    assert pooled_correlation(p, t) < 0.99


def test_pooled_nan_and_constant_prediction():
    assert math.isnan(pooled_correlation([np.ones(3)], [np.full(3, 2.0)]))
    assert pooled_correlation([np.zeros(3)], [np.array([0.0, 1.0, 0.0])]) == 0.0


def test_worst_record_is_the_one_whose_removal_helps_most():
    p = [np.array([5.0, 0.0]), np.array([5.0, 0.0]), np.array([0.0, 0.0])]
    t = [np.array([4.0, 0.0]), np.array([4.0, 0.0]), np.array([0.0, 4.0])]
    recs = [Record(i, ("x", "y"), t[i].astype(np.float32)) for i in range(3)]
    assert worst_record_index(p, recs) == 2
    fb = token_feedback(p[2], recs[2], 4.0)
    assert [(f.predicted, f.actual, f.verdict) for f in fb] == [(0, 0, "ok"), (0, 5, "too low")]


def test_structured_simulation_max_over_rules_scaled_by_strength():
    recs = [rec(0, "the cat sat on the dog", [0, 1, 0, 0, 0, 1])]
    rules = [Rule('"cat"', 2), Rule('"dog" or "cat"', 4)]
    pred = asyncio.run(simulate_rules(LexicalSimulator(), rules, recs))
    assert pred[0].tolist() == [0, 4, 0, 0, 0, 4]


def _naive_worst(pred, records):
    true = [r.acts for r in records]
    base = pooled_correlation(pred, true)
    best_i, best_gain = 0, -math.inf
    for i in range(len(records)):
        loo = pooled_correlation(list(pred[:i]) + list(pred[i + 1 :]), true[:i] + true[i + 1 :])
        if not math.isnan(loo) and loo - (0.0 if math.isnan(base) else base) > best_gain:
            best_i, best_gain = i, loo - (0.0 if math.isnan(base) else base)
    return best_i


@pytest.mark.parametrize("seed", range(40))
def test_worst_record_matches_leave_one_out_over_the_list(seed):
    rng = np.random.default_rng(seed)
    recs, pred = [], []
    n_rec = int(rng.integers(1, 12))
    only = int(rng.integers(0, n_rec))  # seeds % 4 == 2 / 3: predictions / truth non-zero in this record only
    for i in range(n_rec):
        n = int(rng.integers(1, 9))
        acts = np.where(rng.random(n) < 0.3, rng.random(n) * 4, 0).astype(np.float32)
        if seed % 4 == 3 and i != only:
            acts[:] = 0
        recs.append(Record(i, tuple("t" * n), acts))
        p = rng.integers(0, 6, n).astype(np.float64) * (seed % 4 != 1)  # seeds % 4 == 1: constant predictions
        pred.append(p if seed % 4 != 2 or i == only else np.zeros(n))
    assert worst_record_index(pred, recs) == _naive_worst(pred, recs)


class CountingLexical(LexicalSimulator):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def simulate(self, explanation, records):
        self.calls.append(explanation)
        await asyncio.sleep(0)
        return await super().simulate(explanation, records)


def test_memo_simulator_simulates_each_rule_and_records_once():
    from sae_workbench.explainers.simulate import MemoSimulator

    recs = [rec(0, "the cat sat on the dog", [0, 1, 0, 0, 0, 1])]
    other = [rec(1, "a cat", [0, 1])]
    inner = CountingLexical()
    memo = MemoSimulator(inner)

    async def go():
        a, b = await asyncio.gather(
            simulate_rules(memo, [Rule('"cat"', 2), Rule('"dog"', 4)], recs),
            simulate_rules(memo, [Rule('"cat"', 5)], recs),  # same rule text, concurrently: one call
        )
        c = await simulate_rules(memo, [Rule('"cat"', 2)], other)  # other records: a new call
        return a, b, c

    a, b, c = asyncio.run(go())
    assert sorted(inner.calls) == ['"cat"', '"cat"', '"dog"'] and memo.name == "lexical"
    assert a[0].tolist() == [0, 2, 0, 0, 0, 4] and b[0].tolist() == [0, 5, 0, 0, 0, 0]
    assert c[0].tolist() == [0, 2]


def test_tree_scores_each_split_as_if_simulated_alone_with_one_call_per_rule():
    from sae_workbench.explainers.simulate import score_records
    from sae_workbench.explainers.tree import LexicalEditor, TreeConfig, tree_search
    from tests.explainers.test_tree_paper import dealt

    rng = np.random.default_rng(0)
    words = "the cat sat on a mat by dog".split()

    def sentence(i: int, hot: bool) -> Record:
        toks = tuple(rng.choice(words, 8))
        acts = np.array([3.0 if hot and t in ("cat", "dog") else 0.0 for t in toks], np.float32)
        return Record(i, toks, acts)

    pos = [sentence(i, True) for i in range(12)]
    neg = [sentence(100 + i, False) for i in range(12)]
    splits = dealt(pos, neg)
    cfg = TreeConfig(roots=3, branching=2, width=2, depth=2, stop_score=1.1)
    inner = CountingLexical()
    result = asyncio.run(tree_search(LexicalEditor(cfg, seed=1), inner, splits, cfg, 3.0))
    rules = {r.activates_on for n in result.nodes for r in n.rules}
    # One simulation per distinct rule text over the train and valid records together.
    assert sorted(inner.calls) == sorted(rules)
    lexical = LexicalSimulator()
    for node in result.nodes:
        for split, score in ((splits.train, node.train_score), (splits.valid, node.valid_score)):
            alone = asyncio.run(simulate_rules(lexical, node.rules, split.records))
            expected = score_records(alone, split.records)
            assert (math.isnan(score) and math.isnan(expected)) or score == pytest.approx(expected, abs=1e-12)
        # The feedback is the worst train record's, as computed from the train split alone.
        alone = asyncio.run(simulate_rules(lexical, node.rules, splits.train.records))
        worst = worst_record_index(alone, splits.train.records)
        assert node.worst_window == splits.train.records[worst].window_id
        assert node.feedback == token_feedback(alone[worst], splits.train.records[worst], 3.0)


def test_flat_rule_simulation_equals_the_per_record_one():
    from sae_workbench.explainers.simulate import MemoSimulator, simulate_rules_flat

    recs = [rec(0, "the cat sat on the dog", [0, 1, 0, 0, 0, 1]), rec(1, "a dog", [0, 1])]
    rules = [Rule('"cat"', 2), Rule('"dog"', 4), Rule('"on"', 1)]
    per_record = asyncio.run(simulate_rules(LexicalSimulator(), rules, recs))
    for sim in (LexicalSimulator(), MemoSimulator(LexicalSimulator())):
        flat = asyncio.run(simulate_rules_flat(sim, rules, recs))
        np.testing.assert_array_equal(flat, np.concatenate(per_record))
    assert asyncio.run(simulate_rules_flat(LexicalSimulator(), [], recs)).tolist() == [0.0] * 8
