"""Issue 34 item 1: `workbench graduate --repair` rebuilds deleted or damaged Parquet files of a graduated store from
their source (activations re-encoded with the SAE, windows cut again from the corpus) and drops stray files; the
repaired store answers exactly as before the damage and `workbench verify` passes it."""

import shutil
import subprocess
import sys
from pathlib import Path

from sae_workbench.sae.io import save_sae
from sae_workbench.store import Store
from sae_workbench.store.partitioned import activations_dir, listed_files, windows_dir
from tests.sae.test_indexing import HOOK, TEXT, make_sae


def workbench(*args: str) -> tuple[int, str]:
    """The real CLI in its own process: (exit status, stdout + stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "sae_workbench", *args], capture_output=True, text=True, timeout=300
    )
    return done.returncode, done.stdout + done.stderr


def rows(store_path: Path) -> tuple[list, list]:
    """Every activation row and every window, sorted (what the repaired store must answer again)."""
    s = Store.open(store_path, read_only=True)
    acts = s.query(
        "SELECT sae_id, feature, window_id, position, value FROM activations ORDER BY ALL"
    ).to_pylist()
    wins = s.query(
        'SELECT window_id, tokens, text, token_strings, source, "offset", mask FROM windows ORDER BY 1'
    )
    return acts, wins.to_pylist()


def test_graduate_repair_rebuilds_deleted_truncated_and_stray_files(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    sae_dir = save_sae(make_sae(d_sae=600, k=8), tmp_path / "sae")
    store = tmp_path / "store.duckdb"
    code, out = workbench("index", "--store", str(store), "--sae", str(sae_dir), "--model", "tiny", "--hook", HOOK,
                          "--corpus", str(corpus), "--tokens", "640", "--context-size", "32", "--batch-size", "4")  # fmt: skip
    assert code == 0, out
    root = tmp_path / "root"
    code, out = workbench("graduate", "--store", str(store), "--root", str(root))
    assert code == 0, out
    before = rows(store)
    (sae_id,) = Store.open(store, read_only=True).partitioned_saes()
    (corpus_name,) = Store.open(store, read_only=True).partitioned_corpora()
    buckets = {fb: Path(activations_dir(str(root), sae_id, fb)) for fb in (0, 1, 2)}
    files = {fb: folder / next(iter(listed_files(str(folder)))) for fb, folder in buckets.items()}
    files[0].unlink()
    files[1].write_bytes(files[1].read_bytes()[:100])
    shutil.copy(files[2], files[2].with_name("part-stray.parquet"))
    chunk_dir = windows_dir(str(root), corpus_name, 0)
    (Path(chunk_dir) / next(iter(listed_files(chunk_dir)))).unlink()
    code, out = workbench("verify", "--store", str(store))
    assert code == 1 and out.count("FAULT") == 4, out
    code, out = workbench("graduate", "--store", str(store), "--root", str(root), "--repair")
    assert code == 0, out
    assert out.count("rebuilt") >= 3 and "removed stray file" in out, out
    code, out = workbench("verify", "--store", str(store))
    assert code == 0, out
    assert rows(store) == before
