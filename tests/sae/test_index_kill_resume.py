"""Issue 34 item 2: `workbench index` killed at any step (a batch of windows and activations committed, the rows
finalized, the statistics written, the neighbours computed) and rerun leaves exactly what an uninterrupted run leaves:
every table compared row for row, EXCEPT ALL both ways (real processes; the fault points exit like a kill -9)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sae_workbench.faults import FAULT_ENV, FAULT_EXIT_STATUS
from sae_workbench.sae.io import save_sae
from tests.sae.test_indexing import HOOK, TEXT, make_sae
from tests.store.tables import table_counts, table_differences

POINTS = ["index-batch-committed", "index-finalized", "index-statistics", "index-neighbours"]


def index(store: Path, sae: Path, corpus: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    """`workbench index` in its own process (with a one-shot fault armed)."""
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = f"{fault}:{store}.fault"
    args = ["index", "--store", str(store), "--sae", str(sae), "--model", "tiny", "--hook", HOOK, "--corpus",
            str(corpus), "--tokens", "640", "--context-size", "32", "--batch-size", "4"]  # fmt: skip
    return subprocess.run([sys.executable, "-m", "sae_workbench", *args], capture_output=True, text=True,
                          env=env, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(SAE folder, corpus, a store indexed without interruption)."""
    folder = tmp_path_factory.mktemp("ref")
    corpus = folder / "corpus.txt"
    corpus.write_text(TEXT)
    sae = save_sae(make_sae(d_sae=300, k=8), folder / "sae")
    store = folder / "ref.duckdb"
    done = index(store, sae, corpus)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = table_counts(store)
    assert counts["activations"] > 0 and counts["feature_stats"] > 0 and counts["feature_neighbours"] == 300
    return sae, corpus, store


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_any_step_and_a_rerun_leave_what_an_uninterrupted_run_leaves(
    reference: tuple[Path, Path, Path], tmp_path: Path, point: str
) -> None:
    sae, corpus, ref = reference
    store = tmp_path / "store.duckdb"
    killed = index(store, sae, corpus, fault=point)
    # Before: the points after the batch did not exist (the run finished, exit 0), and a kill after finalize left
    # the statistics and neighbours empty for good (the rerun saw a finalized index and printed "0 new windows").
    assert killed.returncode == FAULT_EXIT_STATUS, killed.stderr[-3000:]
    rerun = index(store, sae, corpus)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert table_differences(ref, store) == {}
