"""The LLM explainers end to end against the scripted OpenAI-compatible server (tests/fake_llm.py): one-shot, tree
with LLM proposer + simulator, PRISM labelling, malformed JSON / 429 / 500 / hang, wrong key, endpoint dying."""

import json
import re
from collections.abc import Callable

import pytest

from sae_workbench.explainers.job import ExplainConfig, ExplainJob, ExplainJobError
from sae_workbench.explainers.prism import PrismConfig, PrismExplainer
from sae_workbench.llm.config import LLMConfig, LLMNotConfiguredError
from sae_workbench.status import Status
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.fake_llm import FakeLLM, Hang, HTTPFault, Reply


@pytest.fixture()
def planted(tmp_path, tiny_model):
    return build_planted_store(tmp_path, tiny_model.tokenizer)


def smart(body: dict) -> Reply:
    """Answers each prompt kind like a model that knows feature 0/3 fires on LORD (a re-ask like its prompt)."""
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    user = users[-1]
    if user.startswith("Your previous answer could not be parsed") and len(users) > 1:
        user = users[-2]  # which of the concurrent calls gets a scripted fault depends on timing
    if "NEW EXPLANATION" in user:
        return Reply('IMPROVEMENT: add God.\nNEW EXPLANATION: [{"activates_on": "\\"lord\\"", "strength": 5}, '
                     '{"activates_on": "\\"god\\"", "strength": 3}]')  # fmt: skip
    if '"predictions"' in user:
        explanation = user.split("\n", 1)[0]
        word = re.findall(r'"([a-z]+)', explanation.replace('\\"', '"'))
        rows = []
        for m in re.finditer(r"Text \d+ \(\d+ tokens\): (\[.*\])", user):
            toks = json.loads(m.group(1))
            rows.append([5 if word and t.strip().lower() == word[0] else 0 for t in toks])
        return Reply(json.dumps({"predictions": rows}))
    if "JSON array of at most" in user:
        return Reply('[{"activates_on": "\\"lord\\"", "strength": 5}]')
    if "Description:" in user:
        return Reply("Description: Mentions of a deity in scripture.")
    return Reply("The word LORD in the King James Bible.")


def malformed_for_first_feature() -> Callable[[dict], Reply]:
    """A responder like `smart` but for the first structured prompt it sees (one feature's): that prompt always gets
    malformed JSON, re-asks included."""
    bad: list[str] = []

    def flaky(body: dict) -> Reply:
        first_user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if "JSON array of at most" in first_user and (not bad or first_user == bad[0]):
            bad[:] = [first_user]
            return Reply("[{not json")
        return smart(body)

    return flaky


def llm(server: FakeLLM, **kw) -> LLMConfig:
    return LLMConfig(model="fake", base_url=server.base_url, backoff_base_s=0.01, backoff_max_s=0.05, **kw)


def test_oneshot_end_to_end_with_retries_and_reask(planted):
    with FakeLLM(responder=smart) as server:
        # first calls: a 429, a 500, then malformed JSON for whichever prompt comes first (re-asked)
        server.push(HTTPFault(429, retry_after="0.01"), HTTPFault(500), Reply("[{not json"))
        summary = ExplainJob(planted, PLANTED_SAE, ExplainConfig("oneshot"), llm(server), progress=False).run(
            [0, 2]
        )
        assert (summary.explained, summary.dead) == (1, 1)
        # ≥ 2: a loaded machine can add a connection-level retry on top of the scripted 429 and 500
        assert summary.usage.retries >= 2 and summary.usage.reasks == 1
    (e,) = [x for x in planted.explanations(PLANTED_SAE, explainer="oneshot") if x.feature == 0]
    assert e.rules == [{"activates_on": '"lord"', "strength": 5}]
    assert e.text == "The word LORD in the King James Bible."
    assert e.llm_model == "fake" and e.prompt_version == "oneshot-v1" and e.tokens_in > 0 and e.tokens_out > 0
    assert "api_key" not in json.dumps(e.llm_params).replace("api_key_env", "")
    # a rerun against a dead endpoint costs nothing: everything is stored
    again = ExplainJob(planted, PLANTED_SAE, ExplainConfig("oneshot"), llm(server), progress=False).run(
        [0, 2]
    )
    assert again.skipped == 2


def test_tree_and_prism_with_llm(planted):
    with FakeLLM(responder=smart) as server:
        cfg = ExplainConfig("tree", negatives="RANDOM_NEGATIVE")
        ExplainJob(planted, PLANTED_SAE, cfg, llm(server), progress=False).run([0])
        calls_tree = server.calls
        pcfg = PrismExplainer(PrismConfig(percentile=90.0, n_texts=20, k=2))
        ExplainJob(planted, PLANTED_SAE, pcfg, llm(server), progress=False).run([3])
        assert server.calls - calls_tree == 2  # ONE call per cluster
    (t,) = planted.explanations(PLANTED_SAE, explainer="tree")
    assert t.extra["proposer"] == "llm" and t.extra["simulator"] == "llm:fake"
    assert t.extra["valid_score"] > 0.5 and len(t.extra["tree"]) >= 3
    (p,) = planted.explanations(PLANTED_SAE, explainer="prism")
    assert [c["description"] for c in p.extra["clusters"]] == ["Mentions of a deity in scripture."] * 2


def test_hang_times_out_then_retries(planted):
    with FakeLLM(responder=smart) as server:
        server.push(Hang(3.0))
        cfg = llm(server, timeout_s=0.5)
        s = ExplainJob(planted, PLANTED_SAE, ExplainConfig("oneshot"), cfg, progress=False).run([3])
        assert s.explained == 1 and s.usage.retries >= 1


def test_wrong_key_one_error_nothing_written(planted, monkeypatch):
    monkeypatch.setenv("BAD_KEY", "wrong")
    with FakeLLM(responder=smart, expected_key="right") as server:
        cfg = llm(server, api_key_env="BAD_KEY")
        with pytest.raises(ExplainJobError, match="LLMAuthError") as err:
            ExplainJob(planted, PLANTED_SAE, ExplainConfig("oneshot"), cfg, progress=False).run(range(5))
        assert "wrong" not in str(err.value)
    assert [e for e in planted.explanations(PLANTED_SAE) if e.status is not Status.DEAD] == []


def test_failing_endpoint_fails_features_not_the_job_and_rerun_retries(planted):
    # 503 after the retries is one feature's failure (LLMUnavailableError): stored with status and reason, the job
    # goes on; the rerun retries exactly the failed features and replaces their rows (issue 32 item 4).
    with FakeLLM(responder=smart) as server:
        cfg = llm(server, max_retries=1)
        ExplainJob(planted, PLANTED_SAE, ExplainConfig("oneshot"), cfg, concurrency=1, progress=False).run(
            [0]
        )
        server.default = HTTPFault(503)
        server.responder = None
        s = ExplainJob(
            planted, PLANTED_SAE, ExplainConfig("oneshot"), cfg, concurrency=1, progress=False
        ).run([0, 3, 4])
        assert (s.skipped, s.explained, s.failed) == (1, 0, 2)
        rows = {e.feature: e for e in planted.explanations(PLANTED_SAE)}
        assert rows[3].status is Status.LLM_UNAVAILABLE and "503" in rows[3].extra["failure"]["reason"]
        server.default, server.responder = None, smart
        s = ExplainJob(planted, PLANTED_SAE, ExplainConfig("oneshot"), cfg, progress=False).run([0, 3, 4])
        assert (s.skipped, s.explained, s.failed) == (1, 2, 0)
    rows_after = planted.explanations(PLANTED_SAE)
    assert sorted(e.feature for e in rows_after) == [0, 3, 4]  # failed rows replaced, nothing duplicated
    assert all(e.status is Status.OK for e in rows_after)


def test_malformed_answer_fails_one_feature_and_rerun_asks_again(planted):
    flaky = malformed_for_first_feature()

    with FakeLLM(responder=flaky) as server:
        cfg = llm(server)
        s = ExplainJob(
            planted, PLANTED_SAE, ExplainConfig("oneshot"), cfg, concurrency=1, progress=False
        ).run([0, 3, 4])
        assert (s.explained, s.failed) == (2, 1)
        (failed,) = [e for e in planted.explanations(PLANTED_SAE) if e.status is not Status.OK]
        assert failed.status is Status.LLM_MALFORMED_OUTPUT and failed.text == ""
        assert failed.extra["failure"]["error"] == "LLMMalformedOutputError"
        assert failed.llm_params["model"] == "fake" and "structured_output" in failed.llm_params
        calls = server.calls
        server.responder = smart
        s = ExplainJob(planted, PLANTED_SAE, ExplainConfig("oneshot"), cfg, progress=False).run([0, 3, 4])
        assert (s.skipped, s.explained, s.failed) == (2, 1, 0)
        assert (
            1 <= server.calls - calls <= 2
        )  # only the failed feature is asked again (its sentence may be cached)
        # every structured prompt carried its JSON schema (rules: 1..rule_cap objects)
        structured = [
            r.body for r in server.requests if "JSON array of at most" in r.body["messages"][1]["content"]
        ]
        assert structured and all('"maxItems": 5' in json.dumps(b.get("response_format")) for b in structured)
    rows = planted.explanations(PLANTED_SAE)
    assert sorted(e.feature for e in rows) == [0, 3, 4] and all(e.status is Status.OK for e in rows)


def test_oneshot_without_endpoint_is_a_clear_error(planted):
    with pytest.raises(LLMNotConfiguredError, match="needs an LLM"):
        ExplainJob(planted, PLANTED_SAE, ExplainConfig("oneshot"), None)


def test_tree_whose_roots_never_parse_fails_that_feature_not_the_job(planted):
    """Found by bench/llm_bench's free-form run on SmolLM2: every root answer malformed made the tree raise
    ValueError ("the proposer returned no root explanation") and the job stopped with 0 of 2 features stored."""
    flaky = malformed_for_first_feature()  # every root prompt of that feature

    from dataclasses import replace as dc_replace

    from sae_workbench.explainers.tree import TreeConfig, TreeExplainer

    tree = TreeExplainer(ExplainConfig("tree").split(), search=dc_replace(TreeConfig(), roots=2, branching=1,
                                                                         width=1, depth=1))  # fmt: skip
    with FakeLLM(responder=flaky) as server:
        s = ExplainJob(planted, PLANTED_SAE, tree, llm(server), concurrency=1, progress=False).run([0, 3])
    assert (s.explained, s.failed) == (1, 1)
    (failed,) = [e for e in planted.explanations(PLANTED_SAE) if e.status is not Status.OK]
    assert failed.status is Status.LLM_MALFORMED_OUTPUT
