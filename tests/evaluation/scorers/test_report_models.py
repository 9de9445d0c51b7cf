"""The report names the LLM behind each explainer, its size and its structured-output form, and says plainly that a
small model is a smoke test (issue 32 item 6)."""

from pathlib import Path

from sae_workbench.evaluation.scorers.report import model_params, model_rows, render_markdown
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, Store


def _expl(
    feature: int, explainer: str, model: str, form: str | None, status: Status = Status.OK
) -> ExplanationRecord:
    params = {"model": model, "structured_output": form} if model else {}
    return ExplanationRecord("sae", feature, explainer, "1", "", model, params, {}, [1], [], "t",
                             f"{explainer}:{feature}", status=status)  # fmt: skip


def test_model_params_from_names() -> None:
    assert model_params("SmolLM2-135M-Instruct.Q4_1") == 135e6
    assert model_params("qwen2.5:1.5b") == 1.5e9
    assert model_params("Qwen/Qwen2.5-7B-Instruct") == 7e9
    assert model_params("gpt-4o-mini") is None


def test_report_names_models_and_flags_a_tiny_one(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    store.add_explanations([
        _expl(0, "lexical", "", None), _expl(0, "oneshot", "SmolLM2-135M-Instruct.Q4_1", "json_object"),
        _expl(1, "oneshot", "SmolLM2-135M-Instruct.Q4_1", "json_object"), _expl(0, "tree", "gpt-4o-mini", "json_schema"),
        _expl(2, "oneshot", "SmolLM2-135M-Instruct.Q4_1", "json_object"),
    ])  # fmt: skip
    rows = model_rows(store, "sae", [0, 1])
    assert [(r.explainer, r.model, r.structured_output, r.explanations) for r in rows] == [
        ("oneshot", "SmolLM2-135M-Instruct.Q4_1", "json_object", 2), ("tree", "gpt-4o-mini", "json_schema", 1)]  # fmt: skip
    text = render_markdown([], [], "t", models=rows)
    assert "| oneshot | SmolLM2-135M-Instruct.Q4_1 | 135M parameters | json_object | 2 |" in text
    assert "| tree | gpt-4o-mini | not stated | json_schema | 1 |" in text
    assert "SmolLM2-135M-Instruct.Q4_1: a model this small is a smoke test" in text
    assert "gpt-4o-mini: a model this small" not in text
    assert "smoke test" not in render_markdown([], [], "t", models=rows[1:])
