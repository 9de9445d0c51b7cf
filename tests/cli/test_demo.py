"""`workbench demo`: the table of real stage times, and the attribution stages that fill the feature page.

The fast test times real child processes (the demo's own `_run`); the slow one runs the whole demo on the tiny model
with tiny budgets and checks that the printed table and stage_times.json list exactly the stages that ran, and that
DePass, position-aware LRP, effects and (with the extra) interactions reached the store.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from sae_workbench.cli import demo as demo_cli
from sae_workbench.store import Store


def test_stage_times_are_real_child_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each `_run` records its process's wall and CPU seconds, a failed stage too; the table and JSON list both."""
    logs = tmp_path / "logs"
    logs.mkdir()
    demo_cli._stage_times.clear()  # pyright: ignore[reportPrivateUsage]  # the demo's own record, reset per run
    demo_cli._run("help", ["--help"], logs)  # pyright: ignore[reportPrivateUsage]
    with pytest.raises(demo_cli.DemoStepError):
        demo_cli._run("sql-bad", ["sql", "--store", str(tmp_path / "none.duckdb"), "DROP TABLE x"], logs)  # pyright: ignore[reportPrivateUsage]
    saved = json.loads((tmp_path / demo_cli.STAGE_TIMES_FILE).read_text())
    assert [s["stage"] for s in saved["stages"]] == ["help", "sql-bad"]
    assert [s["ok"] for s in saved["stages"]] == [True, False]
    for stage in saved["stages"]:
        # A Python child that imports the package spends CPU time; it cannot use more than its cores allow.
        assert stage["cpu_s"] > 0.05
        assert stage["cpu_s"] <= stage["wall_s"] * (os.cpu_count() or 1) + 0.05
    assert saved["total_wall_s"] == pytest.approx(sum(s["wall_s"] for s in saved["stages"]), abs=0.02)
    table = demo_cli.format_stage_times(demo_cli._stage_times)  # pyright: ignore[reportPrivateUsage]
    lines = table.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["help", "sql-bad", "total"]
    assert "(failed)" in lines[2] and "(failed)" not in lines[1]
    assert "wall, " in capsys.readouterr().out  # the per-stage line after a stage that succeeded


TINY = demo_cli.DemoConfig(
    model="tiny",
    hook="blocks.1.hook_resid_post",
    cache_tokens=12_000,
    train_tokens=10_000,
    index_tokens=6_000,
    n_features=8,
    expansion=4,
    k=8,
    absorption_words=2_000,
    min_letters=1,
    attribute_features=2,
    attribute_examples=1,
    steering_alphas="5",
    interaction_budget=300,
)


@pytest.mark.slow
def test_demo_prints_every_stage_and_fills_attribution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiny demo: one table row per stage log written, the same stages in stage_times.json, and the feature
    page's attribution sections have rows (DePass tokens + components, pa_lrp, effects, interactions)."""
    monkeypatch.setenv("WORKBENCH_LLM_MODEL", "")  # the lexical path only: no endpoint in the test
    monkeypatch.setenv("OPENAI_API_KEY", "")
    run_dir = tmp_path / "demo"
    store = demo_cli.run_demo(TINY, run_dir)
    out = capsys.readouterr().out
    ran = sorted(p.stem for p in (run_dir / "logs").glob("*.log"))
    for stage in (
        "cache",
        "train",
        "index",
        "explain-lexical",
        "attribute-depass",
        "attribute-pa_lrp",
        "report",
    ):
        assert stage in ran
    saved = json.loads((run_dir / demo_cli.STAGE_TIMES_FILE).read_text())
    assert sorted(s["stage"] for s in saved["stages"]) == ran
    table = out[out.index("Stage times") :].splitlines()
    rows = {line.split()[0] for line in table[2:] if line.startswith("  ") and not line.startswith("  (")}
    assert rows == {*ran, "total"}

    db = Store.open(store, read_only=True)
    attributions = db.query("SELECT method, level, count(*) AS n FROM attributions GROUP BY 1, 2").to_pylist()
    kinds = {(r["method"], r["level"]) for r in attributions}
    assert any(m == "depass" and level == "tokens" for m, level in kinds), kinds
    assert any(m == "depass" and level == "components" for m, level in kinds), kinds
    lrp = db.query("SELECT mode, count(*) AS n FROM lrp_attributions GROUP BY 1").to_pylist()
    assert {r["mode"] for r in lrp} == {"pa_lrp"}, lrp
    assert db.query("SELECT count(*) AS n FROM feature_effects").to_pylist()[0]["n"] > 0
    if all(importlib.util.find_spec(m) is not None for m in ("shapiq", "lightgbm")):
        assert "interactions" in ran
        assert db.query("SELECT count(*) AS n FROM interactions").to_pylist()[0]["n"] > 0
