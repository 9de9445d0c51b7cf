"""`--llm-qps` is the Ray workers' shared rate limit: `workbench explain` and `workbench score` refuse it without
`--backend ray` through the one shared check (`cli/backends.py`), before they open the store."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.cli.backends import check_llm_backend
from sae_workbench.errors import WorkbenchError

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    if not any(c.name == "explain" for c in cli.app.registered_commands):
        cli._register_stage_commands()  # pyright: ignore[reportPrivateUsage]
    return cli.app


def test_check_llm_backend() -> None:
    assert check_llm_backend("ray", 5.0) == "ray"
    assert check_llm_backend("local", None) == "local"
    with pytest.raises(typer.BadParameter, match="--backend ray"):
        check_llm_backend("local", 5.0)
    with pytest.raises(WorkbenchError, match="unknown backend"):
        check_llm_backend("slurm", None)


@pytest.mark.parametrize("command", [["explain"], ["score", "--scorer", "detection"]])
def test_explain_and_score_refuse_llm_qps_without_ray(
    app: typer.Typer, command: list[str], tmp_path: Path
) -> None:
    store = tmp_path / "store.duckdb"
    args = [*command, "--store", str(store), "--sae", "x", "--llm-qps", "5"]
    result = runner.invoke(app, args, terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "--backend ray" in result.output
    assert not store.exists()  # refused before the store was opened (or created)
