"""Reading the store with your own SQL while a job holds it: `Store.query` and `workbench sql` (issue 19, item 8)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sae_workbench.store import QueryNotAllowedError, Store

WORKBENCH = Path(sys.executable).parent / "workbench"


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "s.duckdb")
    for i in range(5):
        s.add_eval("sae-a" if i < 3 else "sae-b", "tick", {"i": i})
    return s


def test_query_returns_an_arrow_table_of_the_rows(store: Store) -> None:
    table = Store.open(store.path, read_only=True).query(
        "SELECT sae_id, count(*) AS n FROM evals GROUP BY sae_id ORDER BY sae_id"
    )
    assert table.column_names == ["sae_id", "n"]
    assert table.to_pylist() == [{"sae_id": "sae-a", "n": 3}, {"sae_id": "sae-b", "n": 2}]
    assert store.query("WITH t AS (SELECT 1 AS x) SELECT x + 1 AS y FROM t").to_pylist() == [{"y": 2}]
    described = store.query("DESCRIBE evals").column("column_name").to_pylist()
    assert described == [name for name, _ in store.table_columns("evals")]
    assert "evals" in store.query("SHOW TABLES").column("name").to_pylist()
    # EXPLAIN ANALYZE runs its statement: allowed when that statement is a read
    plan = store.query("EXPLAIN ANALYZE SELECT count(*) FROM evals").to_pylist()
    assert [row["explain_key"] for row in plan] == ["analyzed_plan"]


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM evals",
        "INSERT INTO evals SELECT * FROM evals",
        "DROP TABLE evals",
        "SELECT 1; DELETE FROM evals",
        "CREATE TABLE x AS SELECT 1",
        "ATTACH '/tmp/other.duckdb' AS o",
        "COPY evals TO '/tmp/evals.csv'",
        "PRAGMA version",
        "SELECT NextVal ('eval_ids')",
        "EXPLAIN ANALYZE DELETE FROM evals",
        "explain analyse insert into evals select * from evals",
        "/* c */ EXPLAIN (FORMAT JSON) ANALYZE DROP TABLE evals",
        "EXPLAIN ANALYZE SELECT nextval('eval_ids')",
        "",
        "SELEC 1",
    ],
)
def test_anything_but_one_read_statement_is_refused_and_writes_nothing(store: Store, sql: str) -> None:
    with pytest.raises(QueryNotAllowedError):
        store.query(sql)
    assert len(store.evals()) == 5 and "x" not in store.table_names()
    assert store.add_eval("sae-c", "tick", {}) == 6  # no sequence was advanced


HOLDER = """
import sys, time
from sae_workbench.store import Store
from sae_workbench.store.lease import StoreLease
store = Store.open(sys.argv[1])
lease = StoreLease(store, seconds=0.2, max_seconds=600.0)   # as the explain job holds it
lease.acquire()
store.add_eval("sae-a", "tick", {"i": "held"})
print("held", flush=True)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    time.sleep(0.05)   # a feature awaiting the LLM; the job's keeper renews the lease between awaits
    lease.renew()
lease.release()
"""

RAW_READ = """
import sys, duckdb
try:
    duckdb.connect(sys.argv[1], read_only=True).execute("SELECT count(*) FROM evals").fetchall()
    print("read")
except duckdb.Error as exc:
    print("refused:", exc)
"""


def test_workbench_sql_reads_while_a_job_holds_the_store(store: Store) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store.path), "60"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        # What a notebook user does today fails on DuckDB's lock...
        raw = subprocess.run([sys.executable, "-c", RAW_READ, str(store.path)],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert raw.stdout.startswith("refused:") and "lock" in raw.stdout, raw.stdout + raw.stderr
        # ...while `workbench sql` gets in through the lease within seconds and sees the job's write.
        started = time.monotonic()
        done = subprocess.run(
            [str(WORKBENCH), "sql", "--store", str(store.path), "--format", "json",
             "SELECT sae_id, count(*) AS n FROM evals GROUP BY sae_id ORDER BY sae_id"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        took = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == [{"sae_id": "sae-a", "n": 4}, {"sae_id": "sae-b", "n": 2}]
        assert holder.poll() is None, "the job must still be running (holding the store) when sql returns"
        print(f"workbench sql returned in {took:.2f} s while the job held the store")
        assert took < 20, took
    finally:
        holder.kill()
        holder.communicate(timeout=30)


def test_workbench_sql_formats_and_refuses_writes(store: Store) -> None:
    table = subprocess.run([str(WORKBENCH), "sql", "--store", str(store.path),
                            "SELECT sae_id, count(*) AS n FROM evals GROUP BY sae_id ORDER BY sae_id"],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["sae_id", "n"] and lines[2].split() == ["sae-a", "3"]
    assert "(2 rows)" in table.stdout
    csv_out = subprocess.run([str(WORKBENCH), "sql", "--store", str(store.path), "--format", "csv",
                              "SELECT i FROM range(3) t(i)"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert csv_out.stdout.splitlines() == ["i", "0", "1", "2"]
    refused = subprocess.run([str(WORKBENCH), "sql", "--store", str(store.path), "DELETE FROM evals"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert refused.returncode == 2 and "QueryNotAllowedError" in refused.stderr
    assert len(store.evals()) == 5
