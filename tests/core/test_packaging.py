"""The installed distribution: one import package of ours, a console script of our own name, and nothing of ours
shadowed by a user's folders."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CARD_FOLDERS = ("workbench", "sae", "explainers", "evaluation", "app")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from the working tree (no dependencies fetched)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (found,) = out.glob("sae_workbench-*.whl")
    return found


def test_wheel_holds_one_top_level_package(wheel: Path) -> None:
    """Top-level names in the wheel: sae_workbench and the dist-info, nothing else."""
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"sae_workbench"}, tops


def test_wheel_holds_every_module_of_the_card_folders(wheel: Path) -> None:
    """Every .py file under the card's folders is in the wheel, at its mapped place (no package forgotten)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = []
    for folder in CARD_FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO / folder)
            if folder == "workbench" and rel.parts[0] in CARD_FOLDERS:
                continue
            target = "sae_workbench/" + ("" if folder == "workbench" else folder + "/") + rel.as_posix()
            if target not in names:
                missing.append(target)
    assert not missing, missing


def test_console_scripts_are_ours(wheel: Path) -> None:
    """The entry points: `sae-workbench` (no other PyPI package uses it) and the `workbench` alias, both our CLI."""
    z = zipfile.ZipFile(wheel)
    (entry,) = [n for n in z.namelist() if n.endswith("entry_points.txt")]
    text = z.read(entry).decode()
    assert "sae-workbench = sae_workbench.cli:main" in text
    assert "workbench = sae_workbench.cli:main" in text


def test_cli_and_api_from_a_folder_with_look_alike_modules(tmp_path: Path) -> None:
    """A working folder holding its own app/, evaluation/ and sae.py shadows none of ours (notebooks, python -m)."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("raise ImportError('the user app was imported')\n")
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "__init__.py").write_text(
        "raise ImportError('the user evaluation was imported')\n"
    )
    (tmp_path / "sae.py").write_text("raise ImportError('the user sae.py was imported')\n")
    code = (
        "from sae_workbench.store import Store\n"
        "from sae_workbench.sae.io import load_sae\n"
        "from sae_workbench.evaluation.scorers.job import run_scoring\n"
        "import sae_workbench.app.queries\n"
        "print('api ok')\n"
    )
    api = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert api.returncode == 0 and "api ok" in api.stdout, api.stderr
    cli = subprocess.run(
        [sys.executable, "-m", "sae_workbench", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    for command in ("index", "explain", "score", "absorption", "app"):
        assert command in cli.stdout


def test_streamlit_entry_folder_holds_only_the_entry_script() -> None:
    """Streamlit puts the entry script's folder on sys.path; that folder must expose no module of ours."""
    from sae_workbench.cli.serve import MAIN_SCRIPT

    assert MAIN_SCRIPT.exists()
    assert sorted(p.name for p in MAIN_SCRIPT.parent.glob("*.py")) == [MAIN_SCRIPT.name]
