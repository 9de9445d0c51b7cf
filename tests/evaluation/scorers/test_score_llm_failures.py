"""The score job degrades per explanation (issue 32 item 4), against the scripted server: an answer that stays
malformed fails that explanation's score (stored with status llm_malformed_output and its reason), the run goes on,
and the rerun scores exactly the failed ones again, replacing their rows."""

import re

from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring, score_backends
from sae_workbench.explainers.job import ExplainConfig, ExplainJob
from sae_workbench.llm.cache import StoreCache
from sae_workbench.llm.config import LLMConfig
from sae_workbench.status import Status
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store
from tests.fake_llm import FakeLLM, Reply


def _labels(body: dict) -> Reply:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    n = int(re.search(r"For each of the (\d+) texts", user).group(1))  # type: ignore[union-attr]
    return Reply("[" + ", ".join("1" if i % 2 == 0 else "0" for i in range(n)) + "]")


def test_malformed_scores_fail_alone_and_rerun_retries(tmp_path, tiny_model) -> None:
    store = build_planted_store(tmp_path, tiny_model.tokenizer)
    ExplainJob(store, PLANTED_SAE, ExplainConfig("lexical", negatives="RANDOM_NEGATIVE"), progress=False).run(
        [0, 3]
    )
    first: list[str] = []

    def flaky(body: dict) -> Reply:  # every call of the first explanation scored stays malformed
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        explanation = user.split("\n", 1)[0]
        if not first or explanation == first[0]:
            first[:] = [explanation]
            return Reply("[1, 0, oops")
        return _labels(body)

    config = ScoreConfig("detection", "RANDOM_NEGATIVE")
    with FakeLLM(responder=flaky) as server:
        llm = LLMConfig(model="fake", base_url=server.base_url, backoff_base_s=0.01, max_reasks=1)
        result = run_scoring(store, PLANTED_SAE, config, score_backends(llm, cache=StoreCache(store)),
                             progress=False)  # fmt: skip
        assert (result.scored, result.failed) == (1, 1)
        (bad,) = [s for s in store.scores(sae_id=PLANTED_SAE) if s.status is not Status.OK]
        assert (
            bad.status is Status.LLM_MALFORMED_OUTPUT
            and bad.metrics["error_type"] == "LLMMalformedOutputError"
        )
        assert (
            bad.provenance["llm_params"]["model"] == "fake"
            and "structured_output" in bad.provenance["llm_params"]
        )
        server.responder = _labels
        again = run_scoring(
            store, PLANTED_SAE, config, score_backends(llm, cache=StoreCache(store)), progress=False
        )
        assert (again.scored, again.failed, again.skipped) == (1, 0, 1)
    scores = store.scores(sae_id=PLANTED_SAE)
    assert len(scores) == 2 and all(s.status is Status.OK for s in scores)  # replaced, not duplicated
