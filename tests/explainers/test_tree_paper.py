"""The tree's paper preset and the reference behaviours it switches on (fidelity audit §0 #2, §2.2): the stop rule
checked only after a level's pruning, train/valid scored on the 0..5 values, train without negatives, roots at
temperature 1.0 after five few-shot examples, and revisions that continue the branch's conversation."""

import asyncio
import dataclasses
import json
import re

import numpy as np
import pytest

from sae_workbench.examples.records import Record, discretise
from sae_workbench.examples.testsets import SplitConfig, deal
from sae_workbench.explainers.job import ExplainJob, config_key
from sae_workbench.explainers.lexical_simulator import LexicalSimulator
from sae_workbench.explainers.simulate import pooled_correlation, simulate_rules
from sae_workbench.explainers.tree import (
    LexicalEditor,
    Split,
    TreeConfig,
    TreeExplainer,
    TreePresetError,
    TreeSplits,
    tree_preset,
    tree_search,
)
from sae_workbench.llm.config import LLMConfig
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.fake_llm import FakeLLM, Reply


def sentences(seed: int = 0) -> tuple[list[Record], list[Record]]:
    """12 positives (cat 3.0, dog 1.0) and 12 negatives of 8 random words."""
    rng = np.random.default_rng(seed)
    words = "the cat sat on a mat by dog".split()
    values = {"cat": 3.0, "dog": 1.0}

    def one(i: int, hot: bool) -> Record:
        toks = tuple(rng.choice(words, 8))
        return Record(i, toks, np.array([values.get(t, 0.0) if hot else 0.0 for t in toks], np.float32))

    return [one(i, True) for i in range(12)], [one(100 + i, False) for i in range(12)]


def dealt(positives: list[Record], negatives: list[Record]) -> TreeSplits:
    """The records' train/valid/test as the shared split deals their window ids (`examples.testsets.deal`)."""
    by_id = {r.window_id: r for r in (*positives, *negatives)}
    thirds = zip(deal([r.window_id for r in positives]), deal([r.window_id for r in negatives]), strict=True)
    return TreeSplits(*(Split(tuple(by_id[i] for i in p), tuple(by_id[i] for i in n)) for p, n in thirds))


def test_paper_stop_rule_runs_one_revision_round_after_roots_that_qualify():
    # Every score qualifies (stop at -1): the spec's rule stops on the roots, the reference's only after the first
    # level has been pruned (ref explainer.py:450), i.e. after one round of revisions.
    pos, neg = sentences()
    splits = dealt(pos, neg)
    for cfg, depths in (
        (dataclasses.replace(TreeConfig(), stop_score=-1.0), {0}),
        (dataclasses.replace(TreeConfig.paper(), stop_score=-1.0), {0, 1}),
    ):
        result = asyncio.run(tree_search(LexicalEditor(cfg, seed=1), LexicalSimulator(), splits, cfg, 3.0))
        assert {n.depth for n in result.nodes} == depths and result.stopped_early


def test_paper_scores_train_and_valid_on_discretised_values():
    # ref applies format_records (floor(5x/max), 0..5) before scoring train and valid (experiment.py:234-244).
    pos, neg = sentences(1)
    splits = dealt(pos, neg)
    paper = dataclasses.replace(TreeConfig.paper(), stop_score=1.1)
    raw = dataclasses.replace(paper, score_discretised=False)
    differs = 0
    for cfg in (paper, raw):
        result = asyncio.run(tree_search(LexicalEditor(cfg, seed=2), LexicalSimulator(), splits, cfg, 3.0))
        for node in result.nodes:
            for split, score in ((splits.train, node.train_score), (splits.valid, node.valid_score)):
                pred = asyncio.run(simulate_rules(LexicalSimulator(), node.rules, split.records))
                truth = [discretise(r.acts, 3.0) if cfg.score_discretised else r.acts for r in split.records]
                assert score == pytest.approx(pooled_correlation(pred, truth), abs=1e-12)
                other = [r.acts if cfg.score_discretised else discretise(r.acts, 3.0) for r in split.records]
                differs += abs(pooled_correlation(pred, other) - score) > 1e-6
    assert differs > 0  # dog is 1.0 of 3.0 raw but 1 of 5 discretised: the two truths rank nodes differently


def test_presets_by_name():
    assert tree_preset("default", 3) == TreeConfig(rule_cap=3)
    paper = tree_preset("paper", 4)
    assert (paper.depth, paper.width, paper.roots, paper.branching, paper.rule_cap) == (2, 2, 3, 2, 4)
    assert (paper.roots_temperature, paper.temperature, paper.preset) == (1.0, 1.2, "paper")
    assert TreeConfig().roots_temperature == 1.2
    with pytest.raises(TreePresetError, match="paper"):
        tree_preset("nope")


@pytest.fixture()
def planted(tmp_path, tiny_model):
    return build_planted_store(tmp_path, tiny_model.tokenizer)


def responder(body: dict) -> Reply:
    """Roots name LORD; each revision adds one more planted word (so branches differ by depth); simulation marks the
    tokens equal to a rule's first quoted word."""
    user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    if "NEW EXPLANATION" in user:
        depth = sum(m["role"] == "assistant" for m in body["messages"])
        words = ["lord", "god", "israel"][: min(3, depth + 2)]
        rules = [{"activates_on": json.dumps(w), "strength": 5} for w in words]
        return Reply(f"IMPROVEMENT: add {words[-1]}.\nNEW EXPLANATION: {json.dumps(rules)}")
    if '"predictions"' in user:
        word = re.findall(r'"([a-z]+)', user.split("\n", 1)[0].replace('\\"', '"'))
        rows = [
            [5 if word and t.strip().lower() == word[0] else 0 for t in json.loads(m.group(1))]
            for m in re.finditer(r"Text \d+ \(\d+ tokens\): (\[.*\])", user)
        ]
        return Reply(json.dumps({"predictions": rows}))
    return Reply('[{"activates_on": "\\"lord\\"", "strength": 5}]')


def test_paper_preset_llm_conversation_provenance_and_split(planted):
    split = SplitConfig(negatives="RANDOM_NEGATIVE")  # type: ignore[arg-type]
    paper = TreeExplainer(split, 32, dataclasses.replace(TreeConfig.paper(), stop_score=1.1))
    default = TreeExplainer(split, 32, dataclasses.replace(TreeConfig(), stop_score=1.1, depth=2))
    with FakeLLM(responder=responder) as server:
        cfg = LLMConfig(
            model="fake", base_url=server.base_url, backoff_base_s=0.01, samples_per_request=False
        )
        ExplainJob(planted, PLANTED_SAE, paper, cfg, progress=False).run([0])
        paper_requests = [r.body for r in server.requests]
        ExplainJob(planted, PLANTED_SAE, default, cfg, progress=False).run([0])
        default_requests = [r.body for r in server.requests][len(paper_requests) :]

    def kind(body: dict) -> str:
        last = body["messages"][-1]["content"]
        return "revise" if "NEW EXPLANATION" in last else "root" if "JSON array of at most" in last else "sim"

    roots = [b for b in paper_requests if kind(b) == "root"]
    assert len(roots) == 3 and all(b["temperature"] == 1.0 for b in roots)
    assert all(
        [m["role"] for m in b["messages"]] == ["system"] + ["user", "assistant"] * 5 + ["user"] for b in roots
    )
    assert [len(b["messages"]) for b in default_requests if kind(b) == "root"] == [2, 2, 2]
    # Revisions continue the branch: depth-1 children see root only, depth-2 children also the answer that made
    # their parent and its feedback (the answer is the scripted one for that depth).
    revisions = [b for b in paper_requests if kind(b) == "revise"]
    shapes = sorted({tuple(m["role"] for m in b["messages"]) for b in revisions})
    assert shapes == [("system", "user"), ("system", "user", "assistant", "user")]
    deep = [b for b in revisions if len(b["messages"]) == 4]
    assert all(
        b["messages"][2]["content"].startswith("IMPROVEMENT: add god.\nNEW EXPLANATION:") for b in deep
    )
    assert all(b["temperature"] == 1.2 for b in revisions)
    first_user = revisions[0]["messages"][1]["content"]
    # paper: train holds its 10 positives only; default: 10 positives + 10 negatives, all shown to the reviser
    assert "Example 10:" in first_user and "Example 11:" not in first_user
    default_rev = next(b for b in default_requests if kind(b) == "revise")["messages"][1]["content"]
    assert "Example 20:" in default_rev and "Example 21:" not in default_rev
    by_preset = {e.sampling["preset"]: e for e in planted.explanations(PLANTED_SAE, explainer="tree")}
    assert set(by_preset) == {"paper", "default"}
    p, d = by_preset["paper"], by_preset["default"]
    assert p.sampling["examples"] == "SPLIT_TRAIN_POSITIVES+VALID" and p.prompt_version.startswith(
        "oneshot-v1+fewshot-v1+"
    )
    assert p.negative_ids == p.extra["splits"]["valid"]["negatives"]  # train negatives were never shown
    assert d.negative_ids == d.extra["splits"]["train"]["negatives"] + d.extra["splits"]["valid"]["negatives"]
    assert p.config_key != d.config_key == config_key(PLANTED_SAE, 0, default, cfg)
