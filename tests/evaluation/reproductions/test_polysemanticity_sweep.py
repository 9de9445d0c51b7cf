"""The tree paper's rule-cap sweep (`rule_cap_sweep`, `workbench polysemanticity-sweep`) on planted features
(tests/explainers/test_explain_support.py): feature 3 fires on LORD only, so one rule reaches its best test score
(polysemanticity 1); feature 4 fires on six tokens, so one rule cannot (polysemanticity > 1)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.evaluation.reproductions.rule_cap_sweep import rule_cap_sweep
from sae_workbench.evaluation.scorers.job import ScoreConfigError
from sae_workbench.explainers.base import ExplainConfig
from sae_workbench.llm.config import LLMConfig
from sae_workbench.status import Status
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.fake_llm import FakeLLM, Reply


def _smallest_cap_reaching_90_percent(score_by_cap: dict[int, float]) -> int:
    """Tree paper (Ma et al. NeurIPS 2025): the smallest rule cap r whose best test score over caps <= r reaches 0.9
    of the best over all caps, written out with numpy for this test."""
    caps = np.array(sorted(score_by_cap))
    running_best = np.maximum.accumulate(np.array([score_by_cap[c] for c in caps]))
    return int(caps[np.flatnonzero(running_best >= 0.9 * running_best[-1])[0]])


def test_sweep_measures_planted_polysemanticity_and_the_cli_reports_it(tmp_path, tiny_model):
    store = build_planted_store(tmp_path, tiny_model.tokenizer)
    config = ExplainConfig("tree", negatives="RANDOM_NEGATIVE")
    result = rule_cap_sweep(store, PLANTED_SAE, [3, 4, 2], (1, 2, 3, 4, 5), explain=config, progress=False)
    assert result.caps == (1, 2, 3, 4, 5)
    # Every (feature, cap) explained and scored once: five tree explanations per live feature, each with its cap.
    for f in (3, 4):
        rows = {int(e.id or 0): e for e in store.explanations(PLANTED_SAE, feature=f, explainer="tree")}
        assert sorted(rows) == sorted(result.explanation_ids[f].values())
        assert all(len(rows[i].rules or []) <= cap for cap, i in result.explanation_ids[f].items())
    assert all(math.isnan(v) for v in result.scores[2].values())  # dead feature: never scored
    assert result.polysemanticity[2] is None
    # Feature 3 fires on every "lord" token (LORD and Lord). Since the test third holds out whole documents (issue
    # 33), 8 of its 10 test positives come from beyond the top chunk, where "Lord" appears and the one-rule
    # explanation learned on the top windows ("LORD") misses it: the score is ~0.67 (it was > 0.9 while the test
    # windows shared documents with the training ones). More rules do not help, so one rule still reaches 0.9 of
    # the best score over caps: polysemanticity 1.
    assert result.polysemanticity[3] == 1 and result.scores[3][1] > 0.5
    assert result.scores[3][1] >= 0.9 * max(result.scores[3].values())
    assert result.polysemanticity[4] is not None and result.polysemanticity[4] > 1
    assert max(result.scores[4].values()) > result.scores[4][1] / 0.9  # the measure, recomputed by hand
    # Independently of the sweep: every score it reports is the one simulation row stored for that explanation, and
    # the measure recomputed from those stored rows by the tree paper's definition (numpy, not the library).
    for f in (3, 4):
        stored = {}
        for cap, eid in result.explanation_ids[f].items():
            (row,) = [
                s for s in store.scores(explanation_id=eid, scorer="simulation") if s.status is Status.OK
            ]
            stored[cap] = float(row.metrics["pearson"])
        assert stored == result.scores[f]
        assert result.polysemanticity[f] == _smallest_cap_reaching_90_percent(stored)
    assert result.summary.n == 2 and result.summary.mean == pytest.approx((1 + result.polysemanticity[4]) / 2)
    assert result.provenance["preset"] == "default" and result.provenance["negatives"] == "RANDOM_NEGATIVE"
    with pytest.raises(ScoreConfigError, match="positive"):
        rule_cap_sweep(store, PLANTED_SAE, [3], (0, 1), explain=config, progress=False)
    # The CLI resumes the same explanations and scores (nothing new stored) and prints the same measure.
    n_before = len(store.explanations(PLANTED_SAE)), len(store.scores(sae_id=PLANTED_SAE))
    path = store.path
    if not any(c.name == "polysemanticity-sweep" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    out = CliRunner().invoke(
        cli.app,
        ["polysemanticity-sweep", "--store", str(path), "--sae", PLANTED_SAE, "--features", "2-4",
         "--negatives", "RANDOM_NEGATIVE", "--no-progress"],
        env={"WORKBENCH_LLM_MODEL": "", "OPENAI_API_KEY": ""},
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    lines = {line.split("\t")[0]: line.split("\t") for line in out.output.splitlines() if "\t" in line}
    assert (
        lines["3"][-1] == "1" and lines["4"][-1] == str(result.polysemanticity[4]) and lines["2"][-1] == "-"
    )
    assert f"mean polysemanticity {result.summary.mean:.2f}" in out.output and "over 2 features" in out.output
    from sae_workbench.store import Store

    again = Store.open(path)
    assert (len(again.explanations(PLANTED_SAE)), len(again.scores(sae_id=PLANTED_SAE))) == n_before


WIDE = ["unto", "shall", "thou", "thy", "him", "thee"]


def one_word_per_rule(body: dict) -> Reply:
    """A one-shot model that names the six planted words of feature 4, as many as the rule cap allows."""
    user = body["messages"][-1]["content"]
    cap = re.search(r"at most (\d+) rules", user)
    if cap is None:
        return Reply("Archaic English function words.")
    rules = [{"activates_on": json.dumps(w), "strength": 5} for w in WIDE[: int(cap.group(1))]]
    return Reply(json.dumps(rules))


def test_oneshot_sweep_with_an_llm(tmp_path, tiny_model):
    # The spec's variant: one-shot structured explanations at each cap (scored offline by the lexical simulator).
    store = build_planted_store(tmp_path, tiny_model.tokenizer)
    with FakeLLM(responder=one_word_per_rule) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, backoff_base_s=0.01)
        result = rule_cap_sweep(
            store, PLANTED_SAE, [4], (1, 3, 6), explain=ExplainConfig("oneshot", negatives="RANDOM_NEGATIVE"),
            method="oneshot", llm=llm, progress=False,
        )  # fmt: skip
    stored = {int(e.id or 0): e for e in store.explanations(PLANTED_SAE, feature=4, explainer="oneshot")}
    assert [len(stored[result.explanation_ids[4][c]].rules or []) for c in (1, 3, 6)] == [1, 3, 6]
    scores = result.scores[4]
    assert scores[1] < scores[3] < scores[6] and result.polysemanticity[4] in (3, 6)
    assert result.provenance["method"] == "oneshot"
    with pytest.raises(ScoreConfigError, match="oneshot"):
        rule_cap_sweep(store, PLANTED_SAE, [4], (1,), method="oneshot", preset="paper", progress=False)
