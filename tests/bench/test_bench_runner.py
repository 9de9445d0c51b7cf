"""bench/run_all.py: runs benchmark scripts as subprocesses and rewrites RESULTS.md with every row filled, explicit
FAILED rows, peak memory per process, target verdicts, and hand-written notes preserved."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench import run_all as ra
from bench.results_md import BLANK, MISSING, Emitted, Table, merge_device_columns, number, parse_markdown
from bench.targets import Verdict, _compare

GOOD = """
import sys
blob = bytearray(80 * 2**20)  # 80 MiB resident, to check peak memory is this process's own
for i in range(0, len(blob), 4096):
    blob[i] = 1
print("model tiny, 2 threads")
print("| mode | tok/s | vs bare |")
print("|---|---|---|")
print("| bare forward | 1,000 | 100.0% |")
print("| cache float16 | 950 | 95.0% |")
"""
BAD = """
print("| mode | tok/s |")
print("|---|---|")
raise ValueError("boom: corpus missing")
"""
JSON = """
import sys
from bench.results_md import Table, write_tables_json
assert sys.argv[1] == "--json"
write_tables_json(sys.argv[2], [Table(["contestant", "tokens/s"], [["sae-lens", "100"], ["ours", "250"]])], ["ctx"])
print("not a markdown table")
"""
NO_TABLE = "print('done, but forgot the table')\n"


def _bench(tmp: Path, name: str, code: str, **kw) -> ra.Bench:
    """A Bench whose command runs a fake script written into `tmp`."""
    script = tmp / f"{name}.py"
    script.write_text(textwrap.dedent(code))
    return ra.Bench(name, f"Fake {name}", (str(script),), meaning=f"fake benchmark {name}", **kw)


def _tables(md: str) -> list[list[list[str]]]:
    """Every Markdown table body in `md` as rows of cells."""
    return [t.rows for t in parse_markdown(md, max_notes=0).tables]


def test_parse_markdown_tables_notes_and_padding() -> None:
    """Tables are split from context lines; a short row is padded with an explicit MISSING cell."""
    text = "Moving model to device:  cpu\nheader line\n| a | b | c |\n|---|:-:|---|\n| x | 1 | 2 |\n| y | 3 |\n| z | | 4 |\ntrailer\n"
    e = parse_markdown(text)
    assert e.notes == ["header line", "trailer"]
    assert e.tables[0].columns == ["a", "b", "c"]
    assert e.tables[0].rows == [["x", "1", "2"], ["y", "3", MISSING], ["z", BLANK, "4"]]
    assert number("1,234 tok/s") == 1234.0 and number("93.2%") == 93.2 and number("n/a") is None


def test_merge_device_columns_marks_rows_missing_on_one_device() -> None:
    """GPU figures become extra columns; a row only one device ran says so instead of leaving a gap."""
    cpu = Table(["mode", "tok/s"], [["bare", "10"], ["cache", "9"]])
    gpu = Table(["mode", "tok/s"], [["bare", "900"], ["extra", "5"]])
    m = merge_device_columns(cpu, gpu)
    assert m.columns == ["mode", "tok/s", "tok/s [GPU]"]
    assert m.rows == [
        ["bare", "10", "900"],
        ["cache", "9", "not run on GPU"],
        ["extra", "not run on CPU", "5"],
    ]


def test_compare_verdicts() -> None:
    """Targets are checked on the number in the cell; a missing cell is reported as missing, not as met."""
    assert _compare("x", "95.0%", "≥", 90, "%").met is True
    assert _compare("x", "89.9%", "≥", 90, "%").met is False
    assert _compare("x", "49 ms", "<", 50).met is True
    missing = _compare("x", None, "<", 50)
    assert missing.met is None and missing.label == "missing"


def test_explain_check_subtracts_embedding_and_http_client_from_the_overhead() -> None:
    """Tree/PRISM are also judged without PRISM's MiniLM compute and the bare openai client's measured HTTP work."""
    from bench.targets import check_explain_table

    cols = ["explainer", "conc", "overhead ms/feature (wall − server)", "embedding model ms/feature",
            "of which bare openai client ≈ ms/feature"]  # fmt: skip
    rows = [["tree", "1", "90.0", "0.0", "45.0"], ["prism", "1", "300.0", "240.0", "5.0"]]
    verdicts = {v.what: v for v in check_explain_table(Emitted([Table(cols, rows)], []))}
    assert verdicts["tree overhead per feature, conc 1"].met is False
    tree = verdicts["tree overhead without embedding model and openai client, conc 1"]
    prism = verdicts["prism overhead without embedding model and openai client, conc 1"]
    assert (tree.value, tree.met) == ("45.0", True)
    assert (prism.value, prism.met) == ("55.0", False)


def test_run_all_writes_filled_results_with_failed_rows(tmp_path: Path) -> None:
    """Good, failing, JSON-emitting and table-less fakes: every table row filled, explicit FAILED rows with the
    error, per-process peak memory, verdicts, and a hand-written RESULTS.md moved into NOTES.md (once)."""
    results, notes = tmp_path / "RESULTS.md", tmp_path / "NOTES.md"
    notes.write_text("## Old note\n\nkeep me\n")
    results.write_text("## Old note\n\nkeep me\n\n## Hand-written section\n\nmeasured by hand: 42 tok/s\n")

    def check(e: Emitted) -> list[Verdict]:
        cell = e.tables[0].rows[1][2] if e.tables and len(e.tables[0].rows) > 1 else None
        return [_compare("cache vs bare", cell, "≥", 90, "%")]

    benches = [
        _bench(tmp_path, "good", GOOD, check=check),
        _bench(tmp_path, "bad", BAD, check=check),
        _bench(tmp_path, "jsonout", JSON, json_output=True),
        _bench(tmp_path, "notable", NO_TABLE),
    ]
    runs = ra.run_all(
        benches, True, False, results, notes, tmp_path / "logs", "python -m bench.run_all --test"
    )
    status = {r.bench.name: r for r in runs}
    assert [status[n].status for n in ("good", "bad", "jsonout", "notable")] == [
        "ok",
        "FAILED",
        "ok",
        "FAILED",
    ]
    assert status["good"].peak_rss_mib > 80 and status["notable"].peak_rss_mib < 80
    assert "ValueError: boom: corpus missing" in status["bad"].error
    assert status["jsonout"].emitted.tables[0].rows == [["sae-lens", "100"], ["ours", "250"]]

    md = results.read_text()
    assert md.startswith(ra.GENERATED_MARK) and "python -m bench.run_all --test" in md
    for rows in _tables(md):
        for row in rows:
            assert all(cell and cell != MISSING for cell in row), row
    summary = {r[0]: r for r in _tables(md)[0]}
    assert set(summary) == {"good", "bad", "jsonout", "notable"}
    assert summary["good"][2] == "ok" and summary["good"][-1] == "met ✔"
    assert summary["bad"][2] == "FAILED" and "boom" in summary["bad"][5]
    assert "printed no result table" in summary["notable"][5]
    assert "| bad on cpu | FAILED: exit 1: ValueError: boom: corpus missing |" in md
    assert "| cache float16 | 950 | 95.0% |" in md and "model tiny, 2 threads" in md
    assert "load average (1/5/15 min)" in md and "peak RSS" in md
    # The hand-written file moved into NOTES.md, which ends RESULTS.md.
    assert "measured by hand: 42 tok/s" in notes.read_text() and "keep me" in notes.read_text()
    assert md.index(ra.END_MARK) < md.index("keep me") and md.index(ra.END_MARK) < md.index("42 tok/s")

    # Someone appends to the generated file by hand; the next run keeps it (in NOTES.md), without duplicating.
    results.write_text(md + "\n## Appended later\n\nnew reading 7 ms\n")
    ra.run_all(
        benches[:1], True, False, results, notes, tmp_path / "logs2", "python -m bench.run_all --again"
    )
    kept = notes.read_text()
    assert (
        kept.count("new reading 7 ms") == 1
        and kept.count("measured by hand") == 1
        and kept.count("keep me") == 1
    )
    assert results.read_text().count("new reading 7 ms") == 1


def test_timeout_kills_the_benchmark_and_reports_it(tmp_path: Path) -> None:
    """A benchmark over its time limit is killed (with its process group) and reported as TIMEOUT."""
    bench = _bench(tmp_path, "slow", "import time\ntime.sleep(60)\n")
    started = time.perf_counter()
    r = ra.run_one(bench, True, "cpu", tmp_path, timeout_s=1.0)
    assert time.perf_counter() - started < 15
    assert r.status == "TIMEOUT" and "timeout" in r.error and r.returncode is not None and r.returncode < 0


def test_cli_runs_a_real_benchmark_subset(tmp_path: Path) -> None:
    """`python -m bench.run_all --quick --only llm_client` runs the real LLM client benchmark and fills its rows."""
    results = tmp_path / "RESULTS.md"
    notes = tmp_path / "NOTES.md"
    notes.write_text("earlier\n")
    argv = [sys.executable, "-m", "bench.run_all", "--quick", "--no-gpu", "--only", "llm_client",
            "--results", str(results), "--notes", str(notes), "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    proc = subprocess.run(argv, cwd=ra.REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = results.read_text()
    tables = _tables(md)
    assert tables[0][0][:3] == ["llm_client", "cpu", "ok"]
    rows = [r for t in tables[1:] for r in t]
    assert any("bare openai (baseline)" in r for r in rows)
    assert all(cell and cell != MISSING for r in rows for cell in r)
    assert "LLMClient own cost per call" in md


@pytest.mark.parametrize("name", [b.name for b in ra.BENCHES])
def test_every_registered_benchmark_script_exists(name: str) -> None:
    """Each registered benchmark names a module that exists in bench/."""
    bench = next(b for b in ra.BENCHES if b.name == name)
    module = bench.command[1]
    assert (ra.REPO / (module.replace(".", "/") + ".py")).exists(), module
