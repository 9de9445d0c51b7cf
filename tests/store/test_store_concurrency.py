"""Two real processes on one store: a writer and the (read-only) app, and two writers."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sae_workbench.store import Store, StoreBusyError

WRITER = """
import sys, time, numpy as np, pyarrow as pa
from sae_workbench.store import Store
store = Store.open(sys.argv[1])
tag, n = sys.argv[2], int(sys.argv[3])
for i in range(n):
    with store.transaction():
        store.add_eval("sae", "tick", {"tag": tag, "i": i})
        store.add_activations("sae", pa.table({"feature": np.full(1000, i, np.int32),
            "window_id": np.arange(1000, dtype=np.int64), "position": np.ones(1000, np.int16),
            "value": np.ones(1000, np.float32)}))
    time.sleep(0.05)
"""

READER = """
import json, sys, time
from pathlib import Path
from sae_workbench.store import Store
store = Store.open(sys.argv[1], read_only=True)
done, ready = Path(sys.argv[2]), Path(sys.argv[3])
seen = []
while not done.exists() or len(seen) == 0:
    with store.session():
        seen.append((len(store.evals("sae", "tick")), store.activation_count("sae", staged=True)))
    ready.touch()
print(json.dumps(seen))
"""


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_reader_keeps_working_while_a_writer_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store.open(path)
    done, ready = tmp_path / "done", tmp_path / "ready"
    n = 40
    reader = _spawn(READER, str(path), str(done), str(ready))
    # Start the writer only once the reader has read once: under CI load the reader's imports can
    # take longer than the whole write, and it would then only ever see the finished store.
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert reader.poll() is None, reader.communicate()[1]
        assert time.monotonic() < deadline, "the reader never read the store"
        time.sleep(0.05)
    writer = _spawn(WRITER, str(path), "w", str(n))
    _, werr = writer.communicate(timeout=120)
    assert writer.returncode == 0, werr
    done.touch()
    rout, rerr = reader.communicate(timeout=120)
    assert reader.returncode == 0, rerr
    seen = json.loads(rout)
    counts = [c for c, _ in seen]
    # The reader saw the store mid-write (not just before/after) and every snapshot was consistent:
    # each transaction adds one eval and 1000 activation rows together.
    assert any(0 < c < n for c in counts), counts[:20]
    assert counts == sorted(counts)
    assert all(rows == 1000 * c for c, rows in seen)
    assert len(Store.open(path, read_only=True).evals("sae", "tick")) == n


def test_concurrent_writers_queue_without_corruption(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store.open(path)
    n = 25
    writers = [_spawn(WRITER, str(path), tag, str(n)) for tag in ("a", "b")]
    for w in writers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
    store = Store.open(path, read_only=True)
    evals = store.evals("sae", "tick")
    assert len(evals) == 2 * n and len({e.id for e in evals}) == 2 * n
    assert sorted((e.eval["tag"], e.eval["i"]) for e in evals) == sorted(
        (t, i) for t in "ab" for i in range(n)
    )
    assert store.activation_count("sae", staged=True) == 2 * n * 1000


HOLDER = """
import sys, time
from sae_workbench.store import Store
store = Store.open(sys.argv[1])
with store.session():
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_writer_blocked_past_timeout_gets_busy_error(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store.open(path)
    holder = _spawn(HOLDER, str(path), "3")
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    with pytest.raises(StoreBusyError, match="locked by another process"):
        Store.open(path, busy_timeout_s=0.5)
    assert time.monotonic() - started < 2.5
    # With a longer timeout the same call queues and succeeds once the holder lets go.
    Store.open(path, busy_timeout_s=30).add_eval("sae", "after", {})
    holder.communicate(timeout=30)
