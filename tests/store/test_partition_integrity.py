"""Issue 34 item 1: a graduated store's Parquet files are checked against the ledger before any read.

A deleted, truncated or stray bucket file used to be a silently wrong answer (count(*) dropped, features read as
dead, `graduate` reran "already in place"); now every read, `workbench sql`, a rerun of `graduate` and `workbench
verify` name the damaged file and the fix."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sae_workbench.store import Store
from sae_workbench.store.errors import PartitionFileError
from sae_workbench.store.partitioned import activations_dir, join, listed_files, staging_dir, windows_dir
from tests.store.test_partitioned import _build

Damage = str


def graduated(tmp_path: Path) -> tuple[Store, Path, Path]:
    """A small graduated store (3 activation buckets, 1 window chunk), its root, and its bucket-1 file."""
    s = _build(tmp_path / "s.duckdb")
    s.record_index_step("sae", "neighbours", {})  # _build computes statistics only; verify wants both steps
    root = tmp_path / "root"
    s.graduate(str(root))
    (bucket,) = [Path(activations_dir(str(root), "sae", 1)) / f for f in listed_files(activations_dir(str(root), "sae", 1))]  # fmt: skip
    return s, root, bucket


def damage(path: Path, how: Damage) -> None:
    """Delete the file, cut it in half, or leave a stray copy of it beside it."""
    if how == "deleted":
        path.unlink()
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        shutil.copy(path, path.with_name("part-stray.parquet"))


def run(*args: str) -> tuple[int, str]:
    """The real CLI in its own process: (exit status, stdout + stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "sae_workbench", *args], capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("how", ["deleted", "truncated", "stray"])
def test_every_read_of_a_damaged_bucket_names_the_file_and_the_fix(tmp_path: Path, how: Damage) -> None:
    s, _, bucket = graduated(tmp_path)
    n = s.activation_count("sae")
    damage(bucket, how)
    named = bucket.name if how != "stray" else "part-stray.parquet"
    # Before: a deleted bucket dropped count(*) by its rows, a stray one doubled them, no error.
    with pytest.raises(PartitionFileError, match=named) as err:
        s.activation_count("sae")
    assert "graduate --store" in str(err.value) and "--repair" in str(err.value)
    with pytest.raises(PartitionFileError):
        s.query("SELECT count(*) FROM activations")
    with pytest.raises(PartitionFileError):
        s.window_maxima("sae", 300)  # bucket 1: before, a feature read as dead
    with pytest.raises(PartitionFileError):
        s.window_maxima("sae", 3)  # another bucket: the SAE is damaged, no read of it answers
    with pytest.raises(PartitionFileError, match=named):  # before: "already under root", nothing checked
        s.graduate(str(tmp_path / "root"))
    code, out = run("sql", "--store", str(s.path), "SELECT count(*) FROM activations")
    # Before: exit 0 with a smaller count (deleted) or QueryNotAllowedError wrapping DuckDB's error (truncated).
    assert code == 2 and "PartitionFileError" in out and named in out and "Traceback" not in out, out
    assert n > 0


def test_damaged_windows_chunk_is_refused(tmp_path: Path) -> None:
    s, root, _ = graduated(tmp_path)
    (chunk,) = [
        Path(windows_dir(str(root), "c", 0)) / f for f in listed_files(windows_dir(str(root), "c", 0))
    ]
    damage(chunk, "truncated")
    with pytest.raises(PartitionFileError, match=chunk.name):
        s.get_windows("c", [0, 1])


def test_verify_passes_a_whole_store_and_lists_every_fault(tmp_path: Path) -> None:
    s, root, bucket = graduated(tmp_path)
    code, out = run("verify", "--store", str(s.path))
    assert code == 0 and "no fault found" in out, out
    # Same size, other bytes: the cheap check cannot see it, verify reads every byte.
    data = bytearray(bucket.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bucket.write_bytes(bytes(data))
    orphan = Path(join(staging_dir(str(root), "graduate-activations-x-0"), "00001", "part-x.parquet"))
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"left by a killed run")
    code, out = run("verify", "--store", str(s.path))
    assert code == 1, out
    assert f"{bucket} has other contents" in out and f"orphaned staging file {orphan}" in out, out


def test_verify_reports_an_unfinished_statistics_step(tmp_path: Path) -> None:
    s = _build(tmp_path / "s.duckdb")  # statistics recorded, neighbours never computed
    code, out = run("verify", "--store", str(s.path))
    assert code == 1 and "the neighbours step never finished" in out, out


def test_explain_stores_nothing_computed_from_a_damaged_store(tmp_path: Path) -> None:
    from sae_workbench.explainers.job import ExplainConfig, ExplainJob, ExplainJobError

    s, _, bucket = graduated(tmp_path)
    live = [f for f in range(256, 512) if s.window_maxima("sae", f).values.size]
    assert live  # bucket 1 holds live features
    bucket.unlink()
    job = ExplainJob(s, "sae", ExplainConfig("lexical", negatives="RANDOM"), None)
    # Before: the live features of the deleted bucket were stored as dead under their resume keys, so a rerun
    # skipped them even after the file was restored.
    with pytest.raises(ExplainJobError, match="PartitionFileError"):
        job.run(live[:3])
    assert s.explanations("sae") == []
