"""`index --backend ray` (sae/ray_index.py) on a local 2-CPU Ray cluster: the same rows, statistics and top examples as
the local backend; an actor that dies mid-range and a SIGKILLed driver leave every range committed exactly once."""

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sae_workbench.corpus import resolve_corpus
from sae_workbench.faults import FAULT_ENV
from sae_workbench.raycluster import RayConfig
from sae_workbench.sae.index_loop import index_sae
from sae_workbench.sae.index_request import IndexConfig, IndexRequest
from sae_workbench.sae.ray_index import RayIndexConfig, index_sae_ray, plan_ranges, staging_paths
from sae_workbench.store import Store
from sae_workbench.store.ranges import IndexRange
from tests.sae.test_indexing import HOOK, TEXT, make_sae

REPO = Path(__file__).resolve().parents[2]
CTX, BATCH, WINDOWS = 32, 4, 32
CONFIG = IndexConfig(context_size=CTX, batch_size=BATCH, commit_tokens=256)
RAY = RayIndexConfig(workers=2, range_tokens=8 * CTX)  # 4 ranges of 8 windows (2 forward batches each)
ONE_WORKER = RayIndexConfig(
    workers=1, range_tokens=8 * CTX
)  # each actor start imports torch + sae_lens (~13 s CPU)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(TEXT)
    return path


@pytest.fixture(scope="module")
def local_store(tiny_model, corpus_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Store:
    """The reference: the same SAE indexed by the local backend."""
    store = Store.open(tmp_path_factory.mktemp("local") / "s.duckdb")
    index_sae(
        store,
        IndexRequest(tiny_model, make_sae(), HOOK, resolve_corpus(str(corpus_file)), WINDOWS * CTX, CONFIG),
    )
    return store


def assert_same_index(ray_store: Store, local_store: Store) -> None:
    """Identical activation rows (EXCEPT ALL both ways), windows, feature statistics and top-20 of every feature."""
    [sae] = local_store.list_saes()
    con = duckdb.connect()
    con.register("l", local_store.activation_coordinates(sae.sae_id))
    con.register("r", ray_store.activation_coordinates(sae.sae_id))
    assert (
        con.execute("SELECT count(*) FROM l").fetchone() == con.execute("SELECT count(*) FROM r").fetchone()
    )
    assert con.execute("SELECT count(*) FROM (SELECT * FROM l EXCEPT ALL SELECT * FROM r)").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM (SELECT * FROM r EXCEPT ALL SELECT * FROM l)").fetchone() == (0,)
    assert ray_store.activation_count(sae.sae_id, staged=True) == 0
    assert ray_store.feature_table(sae.sae_id).equals(local_store.feature_table(sae.sae_id))
    for feature in range(sae.d_sae):
        assert ray_store.top_examples(sae.sae_id, feature, 20) == local_store.top_examples(
            sae.sae_id, feature, 20
        )
    corpus = local_store.index_progress(sae.sae_id).corpus  # type: ignore[union-attr]
    ids = local_store.window_ids(corpus)
    assert (ray_store.window_ids(corpus) == ids).all()
    for mine, theirs in zip(
        ray_store.get_windows(corpus, ids), local_store.get_windows(corpus, ids), strict=True
    ):
        assert (mine.tokens == theirs.tokens).all() and (mine.mask == theirs.mask).all()
        assert (mine.text, mine.token_strings, mine.source, mine.offset) == (
            theirs.text, theirs.token_strings, theirs.source, theirs.offset,
        )  # fmt: skip
    ray_progress, local_progress = (
        ray_store.index_progress(sae.sae_id),
        local_store.index_progress(sae.sae_id),
    )
    assert ray_progress is not None and local_progress is not None and ray_progress.finalized
    assert (ray_progress.next_window, ray_progress.n_tokens) == (
        local_progress.next_window,
        local_progress.n_tokens,
    )


def assert_each_range_once(store: Store, sae_id: str) -> None:
    """The ledger holds the 4 ranges, each once, and their row counts add up to the stored rows."""
    ranges = store.index_ranges(sae_id)
    assert [(r.start, r.end) for r in ranges] == [(a, a + 8) for a in range(0, WINDOWS, 8)]
    assert sum(r.n_rows for r in ranges) == store.activation_count(sae_id)


def test_plan_ranges_skips_committed_and_local_prefix() -> None:
    assert plan_ranges(32, 8, 0, []) == [(0, 8), (8, 16), (16, 24), (24, 32)]
    committed = [IndexRange(8, 16, 0, 0), IndexRange(24, 32, 0, 0)]
    assert plan_ranges(30, 8, 4, committed) == [(4, 8), (16, 24)]
    assert plan_ranges(32, 8, 32, []) == []


def test_ray_index_equals_local_and_survives_an_actor_dying_mid_range(
    ray_cluster,
    tiny_model,
    corpus_file: Path,
    local_store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = tmp_path / "actor-died"
    monkeypatch.setenv(FAULT_ENV, f"index-range-24:{marker}")  # range 3 = windows [24, 32), once
    store = Store.open(tmp_path / "ray.duckdb")
    sae = make_sae()
    result = index_sae_ray(
        store,
        IndexRequest(tiny_model, sae, HOOK, resolve_corpus(str(corpus_file)), WINDOWS * CTX, CONFIG),
        RAY,
    )
    assert marker.exists(), "the fault never fired: the test did not kill an actor"
    assert result.new_windows == WINDOWS and result.new_rows == store.activation_count(result.sae_id)
    assert_each_range_once(store, result.sae_id)
    assert_same_index(store, local_store)
    assert not any((tmp_path / "staging").rglob("*.parquet"))
    # Rerunning a finished index adds nothing.
    again = index_sae_ray(
        store,
        IndexRequest(tiny_model, sae, HOOK, resolve_corpus(str(corpus_file)), WINDOWS * CTX, CONFIG),
        RAY,
    )
    assert again.new_windows == 0 and again.new_rows == 0
    assert_each_range_once(store, result.sae_id)


def test_an_actor_dying_between_its_two_staging_files_leaves_a_range_the_rerun_recomputes(
    ray_cluster,
    tiny_model,
    corpus_file: Path,
    local_store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fault fires inside `index_range` after the windows staging file is written and before the activations
    file: first with Ray's retries off (the run fails and leaves that half-staged range on disk, uncommitted), then a
    rerun with retries on, where the same fault kills the restarted actor once more mid-range and Ray retries it.
    A stale windows file planted with garbage text must be overwritten, never committed; every range lands once."""
    staging = tmp_path / "staging"
    store = Store.open(tmp_path / "ray.duckdb")
    first = tmp_path / "died-half-staged-1"
    monkeypatch.setenv(
        FAULT_ENV, f"index-range-staged-8:{first}"
    )  # range 2 = windows [8, 16), actor 1's first
    no_retry = dataclasses.replace(RAY, max_restarts=0, max_task_retries=0)
    with pytest.raises(ray_cluster.exceptions.RayActorError):
        index_sae_ray(
            store,
            IndexRequest(
                tiny_model, make_sae(), HOOK, resolve_corpus(str(corpus_file)), WINDOWS * CTX, CONFIG
            ),
            no_retry,
        )
    assert first.exists(), "the fault never fired: the test did not kill an actor"
    [record] = store.list_saes()
    windows_file, acts_file = (Path(p) for p in staging_paths(str(staging), record.sae_id, 8, 16))
    assert windows_file.exists() and not acts_file.exists()  # half-staged: windows written, activations not
    assert (8, 16) not in [(r.start, r.end) for r in store.index_ranges(record.sae_id)]
    stale = pq.read_table(windows_file)
    stale = stale.set_column(stale.column_names.index("text"), "text", pa.array(["garbage"] * stale.num_rows))
    pq.write_table(stale, windows_file)
    second = tmp_path / "died-half-staged-2"
    monkeypatch.setenv(FAULT_ENV, f"index-range-staged-8:{second}")
    result = index_sae_ray(
        store,
        IndexRequest(tiny_model, make_sae(), HOOK, resolve_corpus(str(corpus_file)), WINDOWS * CTX, CONFIG),
        RAY,
    )
    assert second.exists(), "the fault never fired on the rerun: Ray's retry was not exercised"
    committed_before = WINDOWS - result.new_windows
    assert 0 <= committed_before < WINDOWS
    assert_each_range_once(store, record.sae_id)
    assert_same_index(store, local_store)  # window texts included: no "garbage"
    assert not any(staging.rglob("*.parquet"))


def test_index_cli_joins_the_cluster_named_by_ray_address(
    ray_cluster, corpus_file: Path, local_store: Store, tmp_path: Path
) -> None:
    """`workbench index --backend ray` with RAY_ADDRESS exported and no --ray-address runs its driver in the session
    cluster (Ray's own job table lists the command's pid), not in a local cluster of its own."""
    from sae_workbench.sae.io import save_sae

    address = ray_cluster.get_runtime_context().gcs_address
    sae_dir = save_sae(make_sae(), tmp_path / "sae")
    store_path = tmp_path / "store.duckdb"
    args = [str(Path(sys.executable).parent / "workbench"), "index", "--store", str(store_path), "--sae",
            str(sae_dir), "--model", "tiny", "--hook", HOOK, "--corpus", str(corpus_file), "--tokens",
            str(WINDOWS * CTX), "--context-size", str(CTX), "--batch-size", str(BATCH), "--backend", "ray",
            "--workers", "1"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_ADDRESS": address}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert f"{WINDOWS} new windows" in out
    from ray._private.state import jobs

    assert proc.pid in [job["DriverPid"] for job in jobs()], "the command did not join the session cluster"
    store = Store.open(store_path)
    [record] = store.list_saes()
    assert store.index_ranges(record.sae_id)  # the Ray backend's ledger, not the local loop
    assert_same_index(store, local_store)


DRIVER = """
import logging, sys
sys.path.insert(0, sys.argv[1])
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
from tests.sae.test_ray_index import CONFIG, CTX, HOOK, ONE_WORKER, WINDOWS, make_sae
from sae_workbench.corpus import resolve_corpus
from sae_workbench.models import load_model
from sae_workbench.raycluster import RayConfig
from sae_workbench.sae.index_request import IndexRequest
from sae_workbench.sae.ray_index import index_sae_ray
from sae_workbench.store import Store
ray = RayConfig(address=sys.argv[4])
index_sae_ray(Store.open(sys.argv[2]), IndexRequest(load_model("tiny"), make_sae(), HOOK, resolve_corpus(sys.argv[3]),
              WINDOWS * CTX, CONFIG), ONE_WORKER, ray_config=ray)
print("DRIVER DONE", flush=True)
"""


def test_sigkilled_driver_then_rerun_commits_every_range_once(
    ray_cluster, tiny_model, corpus_file: Path, local_store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "ray.duckdb"
    address = ray_cluster.get_runtime_context().gcs_address
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(REPO), str(path), str(corpus_file), address],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert driver.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 240
    for line in driver.stdout:
        lines.append(line)
        if "committed range" in line:
            driver.send_signal(signal.SIGKILL)
            break
        assert time.monotonic() < deadline, "".join(lines[-20:])
    driver.wait(timeout=60)
    assert driver.returncode == -signal.SIGKILL, "".join(lines[-20:])
    sae = make_sae()
    store = Store.open(path)
    [record] = store.list_saes()
    committed = store.index_ranges(record.sae_id)
    assert 1 <= len(committed) < 4
    # Staging files a dead run left behind, here with garbage rows, must never be counted.
    garbage = pa.table({"feature": pa.array([0] * 5, pa.int32()), "window_id": pa.array([0] * 5, pa.int64()),
                        "position": pa.array([1] * 5, pa.int16()), "value": pa.array([1e6] * 5, pa.float32())})  # fmt: skip
    for start in range(0, WINDOWS, 8):
        _, acts_file = staging_paths(str(tmp_path / "staging"), record.sae_id, start, start + 8)
        Path(acts_file).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(garbage, acts_file)
    result = index_sae_ray(
        store,
        IndexRequest(tiny_model, sae, HOOK, resolve_corpus(str(corpus_file)), WINDOWS * CTX, CONFIG),
        ONE_WORKER,
        ray_config=RayConfig(address=address),
    )
    assert result.new_windows == WINDOWS - sum(r.end - r.start for r in committed)
    assert_each_range_once(store, record.sae_id)
    assert_same_index(store, local_store)
    assert not any((tmp_path / "staging").rglob("*.parquet"))


def test_index_cli_backend_ray(ray_cluster, corpus_file: Path, local_store: Store, tmp_path: Path) -> None:
    """`workbench index --backend ray --partition-root` (SAE loaded by the actor from its folder; one reduce task per
    feature bucket writes the Parquet layout) stores what the local backend does."""
    from typer.testing import CliRunner

    from sae_workbench import cli
    from sae_workbench.sae.io import save_sae

    sae_dir = save_sae(make_sae(), tmp_path / "sae")
    store_path = tmp_path / "store.duckdb"
    cli._register_stage_commands()  # pyright: ignore[reportPrivateUsage]
    args = ["index", "--store", str(store_path), "--sae", str(sae_dir), "--model", "tiny", "--hook", HOOK,
            "--corpus", str(corpus_file), "--tokens", str(WINDOWS * CTX), "--context-size", str(CTX),
            "--batch-size", str(BATCH), "--backend", "ray", "--workers", "1",
            "--partition-root", str(tmp_path / "parquet")]  # fmt: skip
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert f"{WINDOWS} new windows" in result.output
    store = Store.open(store_path)
    [record] = store.list_saes()
    assert store.index_ranges(record.sae_id)  # committed through the ledger, not the local loop
    # The reduce step wrote the partitioned layout: one sorted, ranked bucket file (128 features < 256), no row in
    # the store file, and every read answers as the local single-file store does.
    assert store.activations_root(record.sae_id) == str(tmp_path / "parquet")
    [bucket] = (tmp_path / "parquet" / "activations").rglob("*.parquet")
    assert bucket.parent.name == "fb=00000"
    assert pq.read_metadata(bucket).num_rows == store.activation_count(record.sae_id)
    assert_same_index(store, local_store)
    assert not any((tmp_path / "staging").rglob("*.parquet"))


WIDE = 600  # features: 3 buckets of 256
REDUCE_DRIVER = """
import logging, sys
sys.path.insert(0, sys.argv[1])
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
from tests.sae.test_ray_index import CONFIG, CTX, HOOK, ONE_WORKER, WIDE, WINDOWS, make_sae
import dataclasses
from sae_workbench.corpus import resolve_corpus
from sae_workbench.models import load_model
from sae_workbench.raycluster import RayConfig
from sae_workbench.sae.index_request import IndexRequest
from sae_workbench.sae.ray_index import index_sae_ray
from sae_workbench.store import Store
ray = RayConfig(address=sys.argv[4])
index_sae_ray(Store.open(sys.argv[2]), IndexRequest(load_model("tiny"), make_sae(d_sae=WIDE), HOOK,
              resolve_corpus(sys.argv[3]), WINDOWS * CTX, CONFIG),
              dataclasses.replace(ONE_WORKER, partition_root=sys.argv[5]), ray_config=ray)
print("DRIVER DONE", flush=True)
"""


def test_driver_dying_in_the_reduce_then_rerun_reduces_only_the_missing_buckets(
    ray_cluster, tiny_model, corpus_file: Path, tmp_path: Path
) -> None:
    """The driver exits right after recording the first bucket; the rerun leaves that bucket's file untouched,
    places the other two, and the partitioned index equals a local index of the same SAE."""
    from sae_workbench.faults import FAULT_EXIT_STATUS

    local = Store.open(tmp_path / "local.duckdb")
    index_sae(
        local,
        IndexRequest(
            tiny_model, make_sae(d_sae=WIDE), HOOK, resolve_corpus(str(corpus_file)), WINDOWS * CTX, CONFIG
        ),
    )
    path, root = tmp_path / "ray.duckdb", tmp_path / "parquet"
    address = ray_cluster.get_runtime_context().gcs_address
    marker = tmp_path / "driver-died"
    driver = subprocess.run(
        [sys.executable, "-c", REDUCE_DRIVER, str(REPO), str(path), str(corpus_file), address, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1", FAULT_ENV: f"index-reduce-commit:{marker}"},
    )
    assert driver.returncode == FAULT_EXIT_STATUS, driver.stdout[-3000:] + driver.stderr[-3000:]
    store = Store.open(path)
    [record] = store.list_saes()
    assert store.activations_root(record.sae_id) is None  # the layout was never committed
    ledger = store.query("SELECT part, fb FROM index_buckets WHERE sae_id = ?", [record.sae_id]).to_pylist()
    [row] = ledger  # exactly one bucket was recorded before the crash
    part, first = str(row["part"]), int(row["fb"])
    first_file = next(root.rglob(f"fb={first:05d}/*.parquet"))
    first_mtime = first_file.stat().st_mtime_ns
    time.sleep(0.05)
    result = index_sae_ray(
        store,
        IndexRequest(
            tiny_model, make_sae(d_sae=WIDE), HOOK, resolve_corpus(str(corpus_file)), WINDOWS * CTX, CONFIG
        ),
        dataclasses.replace(ONE_WORKER, partition_root=str(root)),
        ray_config=RayConfig(address=address),
    )
    assert result.new_windows == 0  # every range was committed before the crash
    assert store.index_buckets(record.sae_id, part).keys() == {0, 1, 2}
    assert first_file.stat().st_mtime_ns == first_mtime  # not reduced again
    buckets = sorted(p.parent.name for p in root.joinpath("activations").rglob("*.parquet"))
    assert buckets == ["fb=00000", "fb=00001", "fb=00002"]
    assert sum(store.index_buckets(record.sae_id, part).values()) == store.activation_count(record.sae_id)
    assert_same_index(store, local)
    assert not any((tmp_path / "staging").rglob("*.parquet"))
