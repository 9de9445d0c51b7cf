"""Example and negative sampling, including similarity-based close negatives with the real MiniLM."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sae_workbench.embeddings import DEFAULT_EMBEDDING_MODEL, embed_texts
from sae_workbench.examples.sampling import (
    ExampleSource,
    MissingEmbeddingsError,
    NegativeConfig,
    NegativeSource,
    close_negatives,
    crop_texts,
    draw_examples,
    draw_negatives,
    ensure_window_embeddings,
    quantile_examples,
    split_sample,
)
from sae_workbench.store import Store
from sae_workbench.store.window_embeddings import embedding_key

CATS = [f"The cat number {i} purred on the warm windowsill and chased a mouse." for i in range(12)]
KITTENS = [f"A small kitten {i} played with yarn near the sleepy old cat." for i in range(8)]
MONEY = [f"The bank raised interest rates by {i} percent, bond markets fell." for i in range(12)]
CODE = [f"def function_{i}(x): return x * {i} + compute(value)" for i in range(8)]
TEXTS = CATS + KITTENS + MONEY + CODE  # window ids = list index
T = 4


def index_toy(path: Path, texts: list[str], strings: list[list[str]], acts: dict[str, np.ndarray]) -> Store:
    """A store with SAE "sae" indexed over windows of `strings` (all tokens unmasked) and sparse activations."""
    store = Store.open(path)
    store.register_sae("sae", "tiny", "blocks.0.hook_resid_post", 64, 8, {})
    n, width = len(texts), len(strings[0])
    store.start_index("sae", "toy", width, None, {})
    windows = {
        "window_ids": np.arange(n), "tokens_BT": np.ones((n, width), np.int32),
        "mask_BT": np.ones((n, width), bool), "texts": texts, "token_strings": strings, "sources": ["toy"] * n,
        "offsets": np.zeros(n, np.int64),
    }  # fmt: skip
    table = pa.table({
        "feature": acts["feature"].astype(np.int32), "window_id": acts["window_id"].astype(np.int64),
        "position": acts["position"].astype(np.int16), "value": acts["value"].astype(np.float32),
    })  # fmt: skip
    store.add_index_batch("sae", "toy", windows, table, n, n * width)
    store.finalize_index("sae")
    return store


def build_store(path: Path) -> Store:
    """20 windows; feature 0 fires on the 12 CATS windows (value grows with id), feature 1 on one MONEY window."""
    cats = np.arange(len(CATS))
    acts = {
        "feature": np.r_[np.zeros(len(cats)), [1]], "window_id": np.r_[cats, [25]],
        "position": np.r_[np.full(len(cats), 2), [1]], "value": np.r_[1.0 + cats, [3.0]],
    }  # fmt: skip
    return index_toy(path, TEXTS, [["a"] * T] * len(TEXTS), acts)


def test_close_negatives_match_brute_force_with_minilm(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s.duckdb")
    # Whole windows (crop=None): this store's texts are not its token strings.
    with pytest.raises(MissingEmbeddingsError, match="ensure_window_embeddings"):
        close_negatives(store, "sae", 0, config=NegativeConfig(crop=None))
    assert ensure_window_embeddings(store, "sae", crop=None) == len(TEXTS)
    assert ensure_window_embeddings(store, "sae", crop=None) == 0  # embedded once
    cfg = NegativeConfig(reference_size=5, crop=None)
    got = close_negatives(store, "sae", 0, k=6, config=cfg)
    # Brute force: reference = top-5 windows (ids 11..7); similarity = mean cosine to them; exclude all activating.
    emb = embed_texts(TEXTS)
    sim = (emb @ emb[[11, 10, 9, 8, 7]].T).mean(axis=1)
    candidates = [i for i in np.argsort(-sim, kind="stable") if i >= len(CATS)]
    assert got == [int(i) for i in candidates[:6]]
    # Close negatives are the kitten texts, not money or code.
    assert set(got) <= set(range(12, 20)) | {int(candidates[5])} and set(got[:5]) <= set(range(12, 20))
    # SIMILAR excludes only what it is told to (a split's sampled positives), not the whole reference set (spec
    # tree-explainer.md and ref generate_records.py:372; fidelity audit §2.2): activating windows stay candidates.
    similar = close_negatives(store, "sae", 0, k=3, config=cfg, require_negative=False, exclude=[11, 10])
    ranked = [int(i) for i in np.lexsort((np.arange(len(sim)), -sim)) if i not in (11, 10)]
    assert similar == ranked[:3] and not {10, 11} & set(similar)
    assert set(similar) & set(range(12))  # reference / activating windows are not excluded
    sample = draw_negatives(store, "sae", 0, NegativeSource.SIMILAR_NEGATIVE, k=6, seed=3, config=cfg)
    assert sample.window_ids == got and sample.id is not None
    assert store.samples("sae", 0, "SIMILAR_NEGATIVE")[0].window_ids == got
    assert store.samples("sae", 0)[0].config["reference_size"] == 5


# Windows of 20 tokens (+ BOS) whose halves are about different things; records are cropped to 10 tokens (a record
# without a peak shows its first 10; a positive peaking on its last token shows its last 10).
PAD = (" and", " then", " it", " was", " so", ".")
CAT_WORDS = [(" The", " cat", " purred", " softly"), (" A", " kitten", " chased", " yarn"),
             (" My", " cat", " napped", " inside"), (" Two", " kittens", " played", " happily"),
             (" The", " tabby", " cat", " meowed"), (" A", " sleepy", " kitten", " yawned")]  # fmt: skip
MONEY_WORDS = [(" The", " bank", " raised", " rates"), (" Bond", " markets", " fell", " sharply"),
               (" Stocks", " lost", " ten", " percent"), (" The", " loan", " interest", " grew"),
               (" Investors", " sold", " their", " shares"), (" The", " dollar", " gained", " ground")]  # fmt: skip
CODE_WORDS = [(" def", " f", "(x", "):"), (" return", " x", " *", " 2"), (" import", " numpy", " as", " np"),
              (" for", " i", " in", " range"), (" class", " Foo", "(object", "):"), (" print", "(", "value", ")")]  # fmt: skip
# 0-5: money then cat, the feature fires on the last cat word (shown: the cat half, around the peak);
# 6-11: cat then code (shown as a negative: the cat half); 12-17: code then cat; 18-23: money then money.
HALVES = [(h + PAD, t + PAD) for h, t in (
    [(MONEY_WORDS[i], CAT_WORDS[i]) for i in range(6)] + [(CAT_WORDS[i], CODE_WORDS[i]) for i in range(6)]
    + [(CODE_WORDS[i], CAT_WORDS[5 - i]) for i in range(6)] + [(MONEY_WORDS[i], MONEY_WORDS[5 - i]) for i in range(6)]
)]  # fmt: skip
W = 21


def build_crop_store(path: Path) -> Store:
    """24 windows of BOS + 20 tokens; feature 0 fires on the last token of windows 0-5."""
    strings = [["<bos>", *head, *tail] for head, tail in HALVES]
    acts = {"feature": np.zeros(6), "window_id": np.arange(6), "position": np.full(6, W - 1),
            "value": 1.0 + np.arange(6)}  # fmt: skip
    return index_toy(path, ["".join(s[1:]) for s in strings], strings, acts)


def test_close_negatives_compare_what_is_shown(tmp_path: Path) -> None:
    """With crop 10 a negative is embedded as its first 10 tokens (how it is shown) and the reference windows as their
    10 tokens around the peak (how positives are shown): brute force over those texts, and the cat-headed windows
    win. Whole-window embeddings are stored apart and both coexist."""
    store = build_crop_store(tmp_path / "c.duckdb")
    assert crop_texts(store, "toy", [6], 10) == [" The cat purred softly and then it was so."]
    assert crop_texts(store, "toy", [6], None) == ["".join(HALVES[6][0] + HALVES[6][1])]
    assert ensure_window_embeddings(store, "sae", crop=10) == 24
    assert ensure_window_embeddings(store, "sae", crop=None) == 24  # stored apart: both kept
    assert ensure_window_embeddings(store, "sae", crop=10) == 0
    assert store.embedding_count("toy", embedding_key(DEFAULT_EMBEDDING_MODEL, 10)) == 24
    assert store.embedding_count("toy", DEFAULT_EMBEDDING_MODEL) == 24
    got = close_negatives(store, "sae", 0, k=6, config=NegativeConfig(crop=10))
    shown_pos = embed_texts(["".join(HALVES[i][1]) for i in range(6)])  # the peak is in the cat half
    heads = embed_texts(["".join(head) for head, _ in HALVES])
    sim = heads @ shown_pos.mean(axis=0)
    ranked = [int(i) for i in np.lexsort((np.arange(24), -sim)) if i >= 6]
    assert got == ranked[:6]
    assert set(got) == set(range(6, 12))  # shown as cat text: the close negatives of a cat feature
    whole = close_negatives(store, "sae", 0, k=6, config=NegativeConfig(crop=None))
    texts = embed_texts(windows_text := ["".join(h + t) for h, t in HALVES])
    sim_whole = texts @ texts[:6].mean(axis=0)
    assert whole == [int(i) for i in np.lexsort((np.arange(24), -sim_whole)) if i >= 6][:6] and windows_text


def test_random_sources_are_seeded_and_respect_activation(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s.duckdb")
    a = draw_negatives(store, "sae", 1, NegativeSource.RANDOM_NEGATIVE, k=10, seed=7)
    b = draw_negatives(store, "sae", 1, NegativeSource.RANDOM_NEGATIVE, k=10, seed=7)
    c = draw_negatives(store, "sae", 1, NegativeSource.RANDOM_NEGATIVE, k=10, seed=8)
    assert a.window_ids == b.window_ids != c.window_ids
    assert 25 not in a.window_ids and len(set(a.window_ids)) == 10
    everything = draw_negatives(store, "sae", 1, NegativeSource.RANDOM, k=len(TEXTS), seed=0)
    assert sorted(everything.window_ids) == list(range(len(TEXTS)))
    stored = store.samples("sae", 1, "RANDOM_NEGATIVE")
    assert [s.seed for s in stored] == [7, 7, 8] and stored[0].window_ids == a.window_ids


def test_example_sources(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s.duckdb")
    top = draw_examples(store, "sae", 0, ExampleSource.TOP, k=3)
    assert top.window_ids == [11, 10, 9]
    quant = quantile_examples(store, "sae", 0, n_quantiles=3, per_quantile=2, seed=1)
    # 12 activating windows, 3 equal-count bins by max: {11..8}, {7..4}, {3..0}.
    bins = {q: [e.window_id for e in quant if e.quantile == q] for q in range(3)}
    assert all(set(ids) <= set(range(11 - 4 * q, 7 - 4 * q, -1)) and len(ids) == 2 for q, ids in bins.items())
    assert quant == quantile_examples(store, "sae", 0, n_quantiles=3, per_quantile=2, seed=1)
    rand = draw_examples(store, "sae", 0, ExampleSource.RANDOM_ACTIVATING, k=5, seed=2)
    assert set(rand.window_ids) <= set(range(12)) and len(rand.window_ids) == 5
    assert split_sample(list(range(30))) == [list(range(10)), list(range(10, 20)), list(range(20, 30))]
