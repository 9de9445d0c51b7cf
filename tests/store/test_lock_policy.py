"""Issue 34 item 4: the lock policy readers can live with, measured with real processes.

- `workbench sql` (Store.query, read-only) answers within SQL_BOUND_S while `workbench explain` runs under the default
  negatives (SIMILAR_NEGATIVE: seconds of MiniLM per feature on the job's store thread, which used to hold the file
  for all of it: 45.8 s measured, and `workbench sql` failed at its 60 s timeout in the issue's run);
- a raw `duckdb.connect(path, read_only=True)` holding the file past the reader timeout delays a job's write but
  cannot make it fail (writers wait without limit and log that they wait).
"""

import json
import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sae_workbench.store import Store
from sae_workbench.store.connection import READER_BUSY_TIMEOUT_S

SQL_BOUND_S = 5.0
"""What the README promises for `workbench sql` during a job (measured max on 2 busy cores: 0.6 s, see below)."""


def test_writers_wait_without_limit_readers_for_a_minute(tmp_path: Path) -> None:
    Store.open(tmp_path / "s.duckdb")
    # Before: both 60 s, so a reader holding the file for a minute failed a job's commit with StoreBusyError.
    assert math.isinf(Store.open(tmp_path / "s.duckdb").busy_timeout_s)
    assert Store.open(tmp_path / "s.duckdb", read_only=True).busy_timeout_s == READER_BUSY_TIMEOUT_S == 60.0


@pytest.mark.slow
def test_a_raw_reader_delays_a_write_but_cannot_fail_it(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store.open(path).register_sae("sae", "tiny", "blocks.0.hook_resid_post", 4, 8, {})
    hold_s = READER_BUSY_TIMEOUT_S + 5
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import duckdb, time; c = duckdb.connect({str(path)!r}, read_only=True); "
         f"print('held', flush=True); time.sleep({hold_s}); c.close()"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    t0 = time.monotonic()
    writer = subprocess.run(
        [sys.executable, "-c", "import sys; from sae_workbench.store import Store; "
         "Store.open(sys.argv[1]).add_eval('sae', 'after-the-reader', {})", str(path)],
        capture_output=True, text=True, timeout=hold_s + 60,
    )  # fmt: skip
    waited = time.monotonic() - t0
    holder.wait(timeout=30)
    # Before: StoreBusyError after 60 s, exit 1.
    assert writer.returncode == 0, writer.stderr
    assert waited >= hold_s - 5 and "waiting and retrying" in writer.stderr
    assert [e.eval_type_id for e in Store.open(path, read_only=True).evals("sae")] == ["after-the-reader"]


PROBE = textwrap.dedent(
    """
    import json, sys, time
    from sae_workbench.store import Store
    path, seconds, job = sys.argv[1], float(sys.argv[2]), sys.argv[3]

    def job_runs():
        try:  # a finished job the test has not reaped yet is a zombie ('Z'): it no longer holds the store
            return open(f"/proc/{job}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    lat, end = [], time.monotonic() + seconds
    while time.monotonic() < end and job_runs():
        t0 = time.monotonic()
        Store.open(path, read_only=True).query("SELECT count(*) FROM explanations")
        lat.append(time.monotonic() - t0)
        time.sleep(0.25)
    print(json.dumps(lat))
    """
)


@pytest.mark.slow
def test_sql_answers_within_the_bound_during_explain_with_the_default_negatives(tmp_path: Path) -> None:
    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.models import load_model
    from sae_workbench.sae.index_loop import index_sae
    from sae_workbench.sae.index_request import IndexConfig, IndexRequest
    from tests.sae.test_indexing import HOOK, make_sae

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"Line {i}: the quick brown fox {i} jumps over {i % 7} lazy dogs {i % 13}." for i in range(3000)))  # fmt: skip
    path = tmp_path / "store.duckdb"
    request = IndexRequest(
        model=load_model("tiny"), sae=make_sae(d_sae=256, k=16), hook=HOOK, corpus=resolve_corpus(str(corpus)),
        n_tokens=32_000, config=IndexConfig(context_size=64), model_name="tiny",
    )  # fmt: skip
    sae_id = index_sae(Store.open(path), request).sae_id
    log_path = tmp_path / "explain.log"
    log = log_path.open("w")
    job = subprocess.Popen(
        [sys.executable, "-m", "sae_workbench", "explain", "--store", str(path), "--sae", sae_id, "--features", "0-120"],
        stdout=log, stderr=subprocess.STDOUT, text=True,  # a file: a full pipe would stall the job
    )  # fmt: skip
    try:
        reader = Store.open(path, read_only=True)
        deadline = time.monotonic() + 300
        while not reader.explanations(sae_id) and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.5)  # past the one-off corpus embedding: features (and their crop embeddings) now run
        assert job.poll() is None, log_path.read_text()[-2000:]
        probe = subprocess.run(
            [sys.executable, "-c", PROBE, str(path), "40", str(job.pid)],
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert probe.returncode == 0, probe.stderr[-2000:]
        latencies = json.loads(probe.stdout)  # measured while the job ran (the probe stops when it ends)
    finally:
        job.kill()
        job.wait(timeout=30)
        log.close()
    # Before the fix: 45.8 s measured on this machine (the store thread held the file through each feature's
    # crop embeddings), over the README's "well under a second".
    assert len(latencies) >= 10, f"the job ended after {len(latencies)} probes: too short to measure"
    assert max(latencies) < SQL_BOUND_S, latencies
