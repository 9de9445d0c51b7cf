"""Issue 34 item 3: an SAE's id names its weights. A recorded id is reused only while the weights file is the one it
was recorded for (same BLAKE2b digest, not just the same size); NaN/inf weights are refused at load; non-finite
activations are refused before anything is stored."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.sae.io import (
    TRAIN_RESULT_FILENAME,
    WEIGHTS_FILENAME,
    SAENonFiniteError,
    compute_sae_id,
    id_record,
    load_sae,
    sae_id_of,
    save_sae,
)
from sae_workbench.store import Store
from sae_workbench.store.errors import NonFiniteActivationsError
from tests.sae.test_indexing import HOOK, TEXT, make_sae
from tests.store.tables import table_differences

MODEL = "tiny"


def saved_with_record(folder: Path) -> tuple[Path, str]:
    """A saved SAE with the training record `workbench train` writes next to it; its id."""
    sae = make_sae()
    save_sae(sae, folder)
    sae_id = compute_sae_id(load_sae(folder), MODEL, HOOK)
    (folder / TRAIN_RESULT_FILENAME).write_text(json.dumps(id_record(sae, folder, MODEL, HOOK, sae_id)))
    return folder, sae_id


def edit_weights(folder: Path, edit: Callable[[torch.Tensor], object]) -> None:
    """Change W_enc in place through `edit`, keeping every shape and the file's metadata (so its size)."""
    path = folder / WEIGHTS_FILENAME
    with safe_open(str(path), framework="pt") as fh:  # type: ignore[no-untyped-call]
        metadata = fh.metadata()
    state = load_file(str(path))
    edit(state["W_enc"])
    size = path.stat().st_size
    save_file(state, str(path), metadata=metadata)
    assert path.stat().st_size == size  # the premise: the old size check cannot tell the files apart


def test_a_same_size_edited_copy_gets_its_own_id(tmp_path: Path) -> None:
    clean, clean_id = saved_with_record(tmp_path / "clean")
    assert (
        sae_id_of(load_sae(clean), MODEL, HOOK, clean) == clean_id
    )  # the record is read back while it matches
    copy = Path(shutil.copytree(clean, tmp_path / "copy"))
    edit_weights(copy, lambda w: w[0].mul_(2.0))
    edited = load_sae(copy)
    # Before the fix the copy's stale train_result.json (same size) made it reuse the clean SAE's id.
    assert sae_id_of(edited, MODEL, HOOK, copy) == compute_sae_id(edited, MODEL, HOOK) != clean_id


def test_a_record_without_a_digest_is_not_trusted(tmp_path: Path) -> None:
    clean, clean_id = saved_with_record(tmp_path / "clean")
    record = json.loads((clean / TRAIN_RESULT_FILENAME).read_text())
    del record["weights_blake2b"]
    (clean / TRAIN_RESULT_FILENAME).write_text(json.dumps({**record, "sae_id": "0123456789abcdef"}))
    assert sae_id_of(load_sae(clean), MODEL, HOOK, clean) == clean_id  # rehashed, not the planted id


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_at_load(tmp_path: Path, bad: float) -> None:
    folder, _ = saved_with_record(tmp_path / "sae")
    edit_weights(folder, lambda w: w[3, :32].fill_(bad))
    with pytest.raises(SAENonFiniteError, match=r"W_enc \(32 values\)"):
        load_sae(folder)  # before the fix: loaded, and every activation row it wrote was NaN


def test_the_store_refuses_non_finite_activations_before_writing(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    store.register_sae("a" * 16, MODEL, HOOK, 64, 128, {}, None)
    store.start_index("a" * 16, "c", 4, None, {})
    windows = {
        "window_ids": np.array([0]), "tokens_BT": np.zeros((1, 4), np.int64), "mask_BT": np.ones((1, 4), bool),
        "texts": ["t"], "token_strings": [["a", "b", "c", "d"]], "sources": ["s"], "offsets": np.array([0]),
    }  # fmt: skip
    acts = pa.table(
        {
            "feature": [1, 2],
            "window_id": [0, 0],
            "position": [1, 2],
            "value": pa.array([0.5, float("nan")], pa.float32()),
        }
    )
    with pytest.raises(NonFiniteActivationsError, match="1 of 2"):
        store.add_index_batch("a" * 16, "c", windows, acts, 1, 4)  # before the fix: stored, progress advanced
    progress = store.index_progress("a" * 16)
    assert progress is not None and progress.next_window == 0
    assert store.activation_count("a" * 16, staged=True) == 0
    assert store.query("SELECT count(*) AS n FROM windows").column("n")[0].as_py() == 0


def test_index_of_a_nan_copy_into_the_clean_store_changes_nothing(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    clean, _ = saved_with_record(tmp_path / "clean")
    copy = Path(shutil.copytree(clean, tmp_path / "copy"))
    edit_weights(copy, lambda w: w[:, :32].fill_(float("nan")))
    store = tmp_path / "store.duckdb"
    cli._register_stage_commands()

    def index(sae: Path) -> tuple[int, str]:
        args = ["index", "--store", str(store), "--sae", str(sae), "--model", MODEL, "--hook", HOOK,
                "--corpus", str(corpus), "--tokens", "256", "--context-size", "32", "--batch-size", "4"]  # fmt: skip
        result = CliRunner().invoke(cli.app, args)
        return result.exit_code, result.output + repr(result.exception)

    code, out = index(clean)
    assert code == 0, out
    before = tmp_path / "before.duckdb"
    shutil.copy(store, before)
    code, out = index(copy)
    # Before the fix: exit 0, NaN rows appended under the clean SAE's id and its statistics turned NaN.
    assert code != 0 and "SAENonFiniteError" in out, out
    assert table_differences(before, store) == {}
