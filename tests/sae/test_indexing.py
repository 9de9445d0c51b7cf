"""Indexing an SAE over a corpus into the store: rows, idempotence, resume, bad input, statistics."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sae_lens import TopKSAE, TopKSAEConfig

from sae_workbench.corpus import iter_windows, resolve_corpus
from sae_workbench.sae.feature_stats import cooccurrence_neighbours, decoder_neighbours
from sae_workbench.sae.index_loop import SAEHookMismatchError, index_sae
from sae_workbench.sae.index_request import IndexConfig, IndexRequest
from sae_workbench.sae.io import SAEShapeMismatchError, compute_sae_id
from sae_workbench.store import Store

HOOK = "blocks.0.hook_resid_post"
TEXT = "\n".join(
    f"Line {i}: the quick brown fox number {i} jumps over {i % 7} lazy dogs near the river bank."
    for i in range(400)
)


def make_sae(d_in: int = 64, d_sae: int = 128, k: int = 8, seed: int = 0, hook: str = HOOK) -> TopKSAE:
    torch.manual_seed(seed)
    sae = TopKSAE(TopKSAEConfig(d_in=d_in, d_sae=d_sae, k=k))
    sae.cfg.metadata.hook_name = hook
    with torch.no_grad():
        sae.b_enc.normal_(0, 0.1)
    return sae


@pytest.fixture()
def corpus_file(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    return path


def test_index_writes_rows_matching_a_direct_encode(tiny_model, corpus_file: Path, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    sae = make_sae()
    corpus = resolve_corpus(str(corpus_file))
    cfg = IndexConfig(context_size=32, batch_size=4, commit_tokens=256)
    result = index_sae(store, IndexRequest(tiny_model, sae, HOOK, corpus, 32 * 20, cfg))
    assert result.new_windows == 20 and result.new_tokens == 640
    sae_id = compute_sae_id(sae, tiny_model.cfg.model_name, HOOK)
    assert result.sae_id == sae_id
    # Every counted token of a TopK SAE has at most k rows (exactly k non-zeros unless ties at 0).
    progress = store.index_progress(sae_id)
    assert progress is not None and progress.finalized and progress.next_window == 20
    assert progress.n_tokens == 20 * 31  # BOS excluded by the default mask policy
    assert store.activation_count(sae_id) == result.new_rows <= 20 * 31 * 8
    assert store.activation_count(sae_id, staged=True) == 0
    # Dense values of one window equal a direct forward + encode.
    batch = next(iter_windows(corpus, tiny_model.tokenizer, 32, n_tokens=64, batch_size=2))
    with torch.no_grad():
        _, cache = tiny_model.run_with_cache(
            torch.from_numpy(batch.tokens_BT.astype(np.int64)), names_filter=[HOOK]
        )
        feats = sae.encode(cache[HOOK]).numpy()  # (B, T, F)
    feature = int(np.argmax(feats[0, 1:].max(axis=0)))
    dense = store.window_activations(sae_id, feature, [0, 1])
    expected = feats[:, :, feature].copy()
    expected[:, 0] = 0.0  # BOS is masked
    np.testing.assert_allclose(dense, expected, rtol=1e-5, atol=1e-6)
    windows = store.get_windows(corpus.name, [0])
    assert windows[0].tokens.tolist() == batch.tokens_BT[0].tolist()
    assert len(windows[0].token_strings) == 32 and windows[0].text == batch.texts[0]


def test_index_twice_adds_nothing_and_topk_option(tiny_model, corpus_file: Path, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    sae = make_sae()
    corpus = resolve_corpus(str(corpus_file))
    cfg = IndexConfig(context_size=32, batch_size=4, top_k=2)
    first = index_sae(store, IndexRequest(tiny_model, sae, HOOK, corpus, 32 * 10, cfg))
    rows = store.activation_count(first.sae_id)
    assert rows <= 10 * 31 * 2 and rows > 10 * 31  # top-2 per counted token
    again = index_sae(store, IndexRequest(tiny_model, sae, HOOK, corpus, 32 * 10, cfg))
    assert again.new_windows == 0 and again.new_rows == 0
    assert store.activation_count(first.sae_id) == rows
    # A second SAE lives side by side over the same windows.
    other = index_sae(store, IndexRequest(tiny_model, make_sae(seed=1), HOOK, corpus, 32 * 10, cfg))
    assert other.sae_id != first.sae_id and len(store.list_saes()) == 2
    assert store.activation_count(first.sae_id) == rows
    assert len(store.window_ids(corpus.name)) == 10


def test_mismatched_sae_raises_typed_errors(tiny_model, corpus_file: Path, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    corpus = resolve_corpus(str(corpus_file))
    with pytest.raises(SAEShapeMismatchError):
        index_sae(
            store,
            IndexRequest(tiny_model, make_sae(d_in=32), HOOK, corpus, 320, IndexConfig(context_size=32)),
        )
    with pytest.raises(SAEHookMismatchError, match=r"--hook blocks\.1\.hook_resid_post"):
        index_sae(
            store, IndexRequest(tiny_model, make_sae(hook="blocks.1.hook_resid_post"), HOOK, corpus, 320)
        )
    assert store.list_saes() == []


KILLED_RUN = """
import os, sys, torch
sys.path.insert(0, sys.argv[4])
from tests.sae.test_indexing import make_sae
from sae_workbench.corpus import resolve_corpus
from sae_workbench.sae.index_loop import index_sae
from sae_workbench.sae.index_request import IndexConfig, IndexRequest
from sae_workbench.models import load_model
from sae_workbench.store import Store
import sae_workbench.store.store as st
original = st.Store.add_index_batch
calls = {"n": 0}
def add_then_die(self, *args, **kwargs):
    original(self, *args, **kwargs)
    calls["n"] += 1
    if calls["n"] == int(sys.argv[3]):
        os._exit(9)  # killed mid-run, right after a commit
st.Store.add_index_batch = add_then_die
torch.set_num_threads(1)
index_sae(Store.open(sys.argv[1]), IndexRequest(load_model("tiny"), make_sae(), "blocks.0.hook_resid_post",
          resolve_corpus(sys.argv[2]), 32 * 24, IndexConfig(context_size=32, batch_size=4, commit_tokens=256)))
"""


def test_killed_run_resumes_without_loss_or_duplicates(tiny_model, corpus_file: Path, tmp_path: Path) -> None:
    killed = tmp_path / "killed.duckdb"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            KILLED_RUN,
            str(killed),
            str(corpus_file),
            "2",
            str(Path(__file__).parents[2]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 9, proc.stderr
    store = Store.open(killed)
    sae = make_sae()
    sae_id = compute_sae_id(sae, tiny_model.cfg.model_name, HOOK)
    progress = store.index_progress(sae_id)
    assert progress is not None and progress.next_window == 16 and not progress.finalized
    cfg = IndexConfig(context_size=32, batch_size=4, commit_tokens=256)
    resumed = index_sae(
        store, IndexRequest(tiny_model, sae, HOOK, resolve_corpus(str(corpus_file)), 32 * 24, cfg)
    )
    assert resumed.new_windows == 8
    clean = Store.open(tmp_path / "clean.duckdb")
    index_sae(clean, IndexRequest(tiny_model, sae, HOOK, resolve_corpus(str(corpus_file)), 32 * 24, cfg))
    a = store.activation_coordinates(sae_id).sort_by([("feature", "ascending"), ("window_id", "ascending"),
                                                      ("position", "ascending")])  # fmt: skip
    b = clean.activation_coordinates(sae_id).sort_by([("feature", "ascending"), ("window_id", "ascending"),
                                                      ("position", "ascending")])  # fmt: skip
    assert a.num_rows == b.num_rows and a.equals(b)
    assert store.index_progress(sae_id).n_tokens == clean.index_progress(sae_id).n_tokens  # type: ignore[union-attr]


def test_feature_stats_hand_checked(tiny_model, corpus_file: Path, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    sae = make_sae()
    result = index_sae(
        store,
        IndexRequest(
            tiny_model, sae, HOOK, resolve_corpus(str(corpus_file)), 32 * 12, IndexConfig(context_size=32)
        ),
    )
    coords = store.activation_coordinates(result.sae_id)
    feats = coords.column("feature").to_numpy()
    vals = coords.column("value").to_numpy()
    feature = int(np.bincount(feats).argmax())
    mine = vals[feats == feature]
    stats = store.feature_stats(result.sae_id, feature)
    assert stats.n_active == len(mine)
    assert stats.density == pytest.approx(len(mine) / (12 * 31))
    assert stats.max_value == pytest.approx(mine.max()) and stats.mean_value == pytest.approx(
        mine.mean(), rel=1e-5
    )
    assert stats.quantiles[2] == pytest.approx(np.quantile(mine, 0.5), rel=1e-5)
    assert sum(stats.hist_counts) == len(mine) and stats.hist_edges[-1] == pytest.approx(mine.max())
    assert len(stats.logit_top_tokens) == 10 and stats.logit_top_values == sorted(
        stats.logit_top_values, reverse=True
    )
    W = sae.W_dec.detach().numpy()
    logits = W[feature] @ tiny_model.W_U.detach().numpy()
    assert stats.logit_top_values[0] == pytest.approx(logits.max(), rel=1e-4)
    assert feature not in stats.decoder_neighbours and len(stats.cooc_neighbours) > 0
    top = store.top_examples(result.sae_id, feature, k=3)
    assert top[0].max_value == pytest.approx(mine.max())


def test_neighbour_helpers_hand_computed() -> None:
    W = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0]], dtype=np.float32)
    ids, cos = decoder_neighbours(W, k=2)
    assert ids[0].tolist() == [1, 2] and cos[0][0] == pytest.approx(0.9 / np.hypot(0.9, 0.1))
    # tokens: t0 {0,1}, t1 {0,1}, t2 {0,2}; feature 3 never active.
    features = np.array([0, 1, 0, 1, 0, 2])
    keys = np.array([10, 10, 11, 11, 12, 12])
    nb, jac = cooccurrence_neighbours(features, keys, d_sae=4, k=5)
    assert nb[0] == [1, 2] and jac[0] == pytest.approx([2 / 3, 1 / 3])
    assert nb[1] == [0] and jac[1] == pytest.approx([2 / 3])
    assert nb[3] == [] and jac[3] == []
