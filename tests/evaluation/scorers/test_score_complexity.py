"""`workbench score --scorer complexity` and `workbench report` end to end against the scripted OpenAI-compatible
server (tests/fake_llm.py): per-rule ratings with mean/max and provenance, a malformed answer re-asked then recorded
as a failure while the batch goes on, resumability, and one typed error when no LLM is configured."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.evaluation.scorers.job import ScoreConfig, run_scoring
from sae_workbench.llm.config import LLMNotConfiguredError
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, Store
from tests.fake_llm import FakeLLM

SAE_ID = "complexity-sae"
runner = CliRunner()


def expl(
    feature: int, rules: Any, text: str = "", status: Status = Status.OK, **extra: Any
) -> ExplanationRecord:
    """A 'tree' explanation of `feature` with these rules."""
    return ExplanationRecord(
        sae_id=SAE_ID, feature=feature, explainer="tree", explainer_version="test", prompt_version="",
        llm_model="", llm_params={}, sampling={}, example_ids=[], negative_ids=[], text=text,
        config_key=f"c{feature}", rules=rules, extra=extra, status=status,
    )  # fmt: skip


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store with four explanations: two rules, a rule the fake LLM never rates, free text only, a dead feature."""
    path = tmp_path / "store.duckdb"
    st = Store.open(path)
    st.register_sae(SAE_ID, "tiny", "blocks.0.hook_resid_post", 64, 8, {})
    st.add_explanation(expl(0, [{"activates_on": '"def"', "strength": 5},
                                {"activates_on": "a function name after \"def\"", "strength": 3}]))  # fmt: skip
    st.add_explanation(expl(1, [{"activates_on": "unratable rule", "strength": 4}]))
    st.add_explanation(expl(2, None, text="Python code"))
    st.add_explanation(expl(3, None, status=Status.DEAD, reason="no activations in the indexed corpus"))
    return path


def rater(body: dict[str, Any]) -> str:
    """Ratings 1, 4, 1, 4, … for the listed rules; prose (not JSON) whenever the unratable rule is in the chat."""
    chat = "\n".join(m["content"] for m in body["messages"])
    if "unratable rule" in chat:
        return "I would say it is fairly complex."
    n = len(re.findall(r"^\d+\. ", body["messages"][0]["content"], flags=re.M))
    return json.dumps([1 if i % 2 == 0 else 4 for i in range(n)])


def app():
    """The CLI with its stage commands registered."""
    if not any(c.name == "score" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    return cli.app


def test_complexity_scorer_end_to_end(store_path: Path) -> None:
    with FakeLLM(responder=rater) as server:
        args = ["score", "--store", str(store_path), "--sae", SAE_ID, "--scorer", "complexity",
                "--llm-model", "fake", "--llm-base-url", server.base_url, "--no-progress"]  # fmt: skip
        first = runner.invoke(app(), args)
        assert first.exit_code == 0, first.output
        assert "complexity/-: scored 1, skipped 0 (already scored), recorded 2 failure(s)" in first.output
        assert "1 dead feature(s)" in first.output
        # One call for feature 0; feature 1 asked once and re-asked twice (LLMConfig.max_reasks = 2).
        assert server.calls == 1 + 3
        again = runner.invoke(app(), args)
        # The rerun skips what is stored for good (the scored, the dead and the unratable explanations) and asks
        # again for the one whose answer never parsed: a malformed answer is a retryable failure, never cached
        # (issue 32), so it costs the same three calls again and is recorded as failed again.
        assert "scored 0, skipped 3 (already scored), recorded 1 failure(s)" in again.output, again.output
        assert server.calls == 4 + 3

    st = Store.open(store_path, read_only=True)
    by_feature = {
        e.feature: st.scores(explanation_id=e.id, scorer="complexity") for e in st.explanations(sae_id=SAE_ID)
    }
    assert all(len(v) == 1 for v in by_feature.values())
    ok = by_feature[0][0]
    assert ok.status is Status.OK and ok.metrics == {
        "rules": ['"def"', 'a function name after "def"'],
        "ratings": [1, 4],
        "mean": 2.5,
        "max": 4,
        "n_rules": 2,
    }
    assert ok.negative_source == "" and ok.scorer_version == "complexity-llm-v1"
    prov = ok.provenance
    assert prov["backend"] == "llm:fake" and prov["prompt_version"] == "complexity-v1"
    assert prov["llm_params"]["model"] == "fake" and prov["llm_usage"]["calls"] == 1
    bad = by_feature[1][0].metrics
    assert by_feature[1][0].status is Status.LLM_MALFORMED_OUTPUT and bad["n_rules"] == 1 and bad["error"]
    assert by_feature[1][0].provenance["llm_usage"]["calls"] == 3
    assert by_feature[2][0].status is Status.NO_RULES and by_feature[2][0].metrics == {}
    assert by_feature[3][0].status is Status.DEAD

    report = runner.invoke(app(), ["report", "--store", str(store_path), "--sae", SAE_ID])
    assert report.exit_code == 0, report.output
    assert "| tree | llm:fake | 2.50 | 4.00 | 2.0 | 1 | 2 | 1 |" in report.output
    csv_out = runner.invoke(app(), ["report", "--store", str(store_path), "--sae", SAE_ID, "--format", "csv"])
    assert "tree,complexity,llm:fake,mean_rating,2.5,,,1,2,,1" in csv_out.output


def test_complexity_without_an_llm_is_one_typed_error(store_path: Path) -> None:
    result = runner.invoke(
        app(), ["score", "--store", str(store_path), "--sae", SAE_ID, "--scorer", "complexity"]
    )
    assert isinstance(result.exception, LLMNotConfiguredError)
    assert "--llm-model" in str(result.exception) and "no offline" in str(result.exception)
    st = Store.open(store_path)
    with pytest.raises(LLMNotConfiguredError):
        run_scoring(st, SAE_ID, ScoreConfig("complexity"), progress=False)
    assert st.scores(sae_id=SAE_ID, scorer="complexity") == []
