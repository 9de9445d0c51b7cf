"""Activation cache on the tiny model: shards, manifest, masks, dtypes, resume/extend, mismatch and corruption."""

from __future__ import annotations

import errno
import json
import random
from pathlib import Path

import pytest
import torch

from sae_workbench.activation_cache import writer
from sae_workbench.activation_cache.caching import CacheRunStats, cache_activations, outlier_mask
from sae_workbench.activation_cache.disk import check_disk_space
from sae_workbench.activation_cache.errors import (
    CacheBusyError,
    CacheNotFoundError,
    CacheWriteError,
    NonFiniteActivationError,
)
from sae_workbench.activation_cache.lock import folder_lock
from sae_workbench.activation_cache.reader import ActivationCache
from sae_workbench.corpus import MaskPolicy, iter_windows, resolve_corpus
from sae_workbench.errors import CacheCorruptError, CacheMismatchError, WorkbenchError
from sae_workbench.models import load_model

HOOKS = ["blocks.0.hook_resid_post", "blocks.1.hook_mlp_out"]
CTX = 16
BATCH = 4
SHARD = 128  # → 8 windows (2 batches) per shard


def write_corpus(path: Path, n_docs: int = 30, seed: int = 0) -> Path:
    """A small English-like text corpus with documents separated by two blank lines."""
    rng = random.Random(seed)
    words = (
        "the a cat dog sat ran on under mat tree while and quickly slowly barked sang at night Paris".split()
    )
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 120))) + "." for _ in range(n_docs)]
    path.write_text("\n\n\n".join(docs))
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    return resolve_corpus(str(write_corpus(tmp_path_factory.mktemp("corpus") / "text.txt")))


def run(model, corpus, out: Path, n_tokens: int = 40 * CTX, **kw) -> CacheRunStats:
    hooks = kw.pop("hooks", HOOKS)
    args = dict(context_size=CTX, batch_size=BATCH, dtype="float32", shard_tokens=SHARD, progress=False)
    args.update(kw)
    return cache_activations(model, hooks, corpus, out, n_tokens, **args)  # type: ignore[arg-type]


def shard_hashes(folder: Path) -> list[str]:
    return [s["sha256"] for s in json.loads((folder / "manifest.json").read_text())["shards"]]


def test_shards_manifest_and_values(tiny_model, corpus, tmp_path):
    stats = run(tiny_model, corpus, tmp_path / "c", n_tokens=20 * CTX + 5)
    cache = ActivationCache(tmp_path / "c")
    m = cache.manifest
    # 20 whole windows, 8 per shard → 8 + 8 + 4.
    assert [s.n_windows for s in m.shards] == [8, 8, 4]
    assert [s.first_window for s in m.shards] == [0, 8, 16]
    assert cache.n_tokens == stats.new_tokens == 20 * CTX
    assert m.hooks == tuple(HOOKS) and m.hook_dims == dict.fromkeys(HOOKS, 64) and m.d_model == 64
    assert (m.model, m.context_size, m.bos_id, m.dtype) == ("tiny", CTX, 0, "float32")
    assert m.corpus == corpus.name and m.corpus_fingerprint == corpus.fingerprint
    assert m.mask_policy == MaskPolicy().to_dict() and m.created_at and m.workbench_version
    raw = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert raw["n_tokens"] == 20 * CTX and all(len(s["sha256"]) == 64 for s in raw["shards"])
    cache.verify()

    windows = next(iter_windows(corpus, tiny_model.tokenizer, CTX, n_tokens=20 * CTX, batch_size=20))
    tokens = torch.cat([cache.load_shard(i).tokens_WT for i in range(3)])
    mask = torch.cat([cache.load_shard(i).mask_WT for i in range(3)])
    ids = torch.cat([cache.load_shard(i).window_ids_W for i in range(3)])
    assert torch.equal(tokens, torch.from_numpy(windows.tokens_BT))
    assert torch.equal(mask, torch.from_numpy(windows.mask_BT))
    assert ids.tolist() == list(range(20)) and (tokens[:, 0] == 0).all() and not mask[:, 0].any()
    assert sum(s.n_masked for s in m.shards) == int(mask.sum())

    _, ref = tiny_model.run_with_cache(tokens.long())
    for i, s in enumerate(m.shards):
        shard = cache.load_shard(i)
        for h in HOOKS:
            rows = slice(s.first_window, s.first_window + s.n_windows)
            assert shard.acts[h].dtype == torch.float32
            torch.testing.assert_close(shard.acts[h], ref[h][rows], rtol=0, atol=1e-5)


def test_float16_storage(tiny_model, corpus, tmp_path):
    run(tiny_model, corpus, tmp_path / "a", n_tokens=8 * CTX)
    run(tiny_model, corpus, tmp_path / "h", n_tokens=8 * CTX, dtype="float16")
    full, half = ActivationCache(tmp_path / "a").load_shard(0), ActivationCache(tmp_path / "h").load_shard(0)
    assert half.acts[HOOKS[0]].dtype == torch.float16
    torch.testing.assert_close(half.acts[HOOKS[0]].float(), full.acts[HOOKS[0]], rtol=1e-3, atol=1e-3)
    assert (tmp_path / "h" / "shard-00000.safetensors").stat().st_size < (
        tmp_path / "a" / "shard-00000.safetensors"
    ).stat().st_size
    with pytest.raises(Exception, match="bfloat16"):
        run(tiny_model, corpus, tmp_path / "b", dtype="bfloat16")


def test_rerun_is_noop_and_larger_n_extends_identically(tiny_model, corpus, tmp_path):
    run(tiny_model, corpus, tmp_path / "full", n_tokens=40 * CTX)
    first = run(tiny_model, corpus, tmp_path / "ext", n_tokens=16 * CTX)
    assert first.new_tokens == 16 * CTX
    again = run(tiny_model, corpus, tmp_path / "ext", n_tokens=16 * CTX)
    assert again.new_tokens == 0 and len(shard_hashes(tmp_path / "ext")) == 2
    extended = run(tiny_model, corpus, tmp_path / "ext", n_tokens=40 * CTX)
    assert extended.new_tokens == 24 * CTX
    assert shard_hashes(tmp_path / "ext") == shard_hashes(tmp_path / "full")


def test_killed_mid_shard_leftovers_are_discarded_and_resume_is_identical(tiny_model, corpus, tmp_path):
    full = run(tiny_model, corpus, tmp_path / "c", n_tokens=40 * CTX)
    reference = shard_hashes(tmp_path / "c")
    # State after a kill between a shard's rename and the manifest update, with a second shard half-written:
    folder = tmp_path / "c"
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["shards"] = manifest["shards"][:2]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / ".shard-00003.safetensors.tmp-999").write_bytes(b"partial")
    (folder / "shard-00004.safetensors").write_bytes(b"junk")
    assert ActivationCache(folder).n_tokens == 2 * 8 * CTX  # unlisted shards never count
    resumed = run(tiny_model, corpus, folder, n_tokens=40 * CTX)
    assert resumed.new_tokens == full.new_tokens - 2 * 8 * CTX
    assert shard_hashes(folder) == reference
    assert not [p for p in folder.iterdir() if ".tmp" in p.name]
    ActivationCache(folder).verify()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(hooks=["blocks.0.hook_resid_post"]), "hooks"),
        (dict(context_size=32), "context_size"),
        (dict(dtype="float16"), "dtype"),
        (dict(mask_policy=MaskPolicy(exclude_bos=False)), "mask_policy"),
        (dict(model="tiny:1"), "model"),
        (dict(corpus="other"), "corpus_fingerprint"),
    ],
)
def test_mismatched_settings_raise(tiny_model, corpus, tmp_path, change, field):
    run(tiny_model, corpus, tmp_path / "c", n_tokens=8 * CTX)
    before = shard_hashes(tmp_path / "c")
    model, other_corpus = tiny_model, corpus
    if "model" in change:
        model = load_model(change.pop("model"))
    if "corpus" in change:
        change.pop("corpus")
        other_corpus = resolve_corpus(str(write_corpus(tmp_path / "other.txt", seed=1)))
    with pytest.raises(CacheMismatchError, match=field) as err:
        run(model, other_corpus, tmp_path / "c", n_tokens=16 * CTX, **change)
    assert "--out" in str(err.value)
    assert shard_hashes(tmp_path / "c") == before


def test_checksum_corruption_and_truncation_are_detected(tiny_model, corpus, tmp_path):
    run(tiny_model, corpus, tmp_path / "c", n_tokens=24 * CTX)
    cache = ActivationCache(tmp_path / "c")
    shard1 = tmp_path / "c" / "shard-00001.safetensors"
    data = bytearray(shard1.read_bytes())
    data[-10] ^= 0xFF
    shard1.write_bytes(bytes(data))
    with pytest.raises(CacheCorruptError, match=r"shard 1 .*sha256"):
        cache.verify()
    cache.load_shard(0)  # other shards stay readable
    shard2 = tmp_path / "c" / "shard-00002.safetensors"
    shard2.write_bytes(shard2.read_bytes()[:100])
    with pytest.raises(CacheCorruptError, match=r"shard 2 .*truncated"):
        cache.load_shard(2)
    with pytest.raises(CacheCorruptError, match="shard 1"):
        list(cache.iter_batches(HOOKS[0], 64))


def test_disk_full_mid_shard_is_clean_and_resumable(tiny_model, corpus, tmp_path, monkeypatch):
    folder = tmp_path / "c"
    real_write = writer._write_file
    calls = {"n": 0}

    def write_then_fill_disk(path: Path, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            path.write_bytes(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, data)

    monkeypatch.setattr(writer, "_write_file", write_then_fill_disk)
    with pytest.raises(CacheWriteError, match=r"shard 2 .*No space left.*free disk space.*2 shard"):
        run(tiny_model, corpus, folder, n_tokens=40 * CTX)
    assert sorted(p.name for p in folder.iterdir() if "shard" in p.name) == [
        "shard-00000.safetensors",
        "shard-00001.safetensors",
    ]
    ActivationCache(folder).verify()
    monkeypatch.setattr(writer, "_write_file", real_write)
    run(tiny_model, corpus, folder, n_tokens=40 * CTX)
    run(tiny_model, corpus, tmp_path / "ref", n_tokens=40 * CTX)
    assert shard_hashes(folder) == shard_hashes(tmp_path / "ref")


def test_not_enough_disk_space_fails_before_writing(tmp_path):
    with pytest.raises(CacheWriteError, match="GiB free"):
        check_disk_space(tmp_path, 10**15, 1000)


def test_busy_folder_raises(tiny_model, corpus, tmp_path):
    (tmp_path / "c").mkdir()
    with folder_lock(tmp_path / "c"), pytest.raises(CacheBusyError, match="another process"):
        run(tiny_model, corpus, tmp_path / "c")


def test_forward_stops_at_last_needed_layer(tiny_model, corpus, tmp_path):
    fired: list[str] = []
    tiny_model.add_hook("blocks.1.hook_resid_pre", lambda act, hook: fired.append(hook.name))
    try:
        run(tiny_model, corpus, tmp_path / "c", n_tokens=8 * CTX, hooks=["blocks.0.hook_resid_post"])
    finally:
        tiny_model.reset_hooks()
    assert fired == []


def test_outlier_mask_hand_computed():
    # One window, 5 positions; norms 0 (BOS, unmasked), 1, 2, 3, 10; median of masked = 2.5.
    acts_BTD = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [6.0, 8.0]]])
    mask_BT = torch.tensor([[False, True, True, True, True]])
    assert outlier_mask({"h": acts_BTD}, mask_BT, 3.0).tolist() == [[False, False, False, False, True]]
    assert outlier_mask({"h": acts_BTD}, mask_BT, 4.0).tolist() == [[False] * 5]  # 10 ≤ 4 × 2.5


def test_outlier_masking_in_cache(tiny_model, corpus, tmp_path):
    policy = MaskPolicy(outlier_norm_factor=1.1)
    run(tiny_model, corpus, tmp_path / "c", n_tokens=8 * CTX, mask_policy=policy)
    shard = ActivationCache(tmp_path / "c").load_shard(0)
    base = torch.from_numpy(next(iter_windows(corpus, tiny_model.tokenizer, CTX, batch_size=8)).mask_BT)
    expected = base & ~outlier_mask(shard.acts, base, 1.1)
    assert torch.equal(shard.mask_WT, expected) and expected.sum() < base.sum()
    assert ActivationCache(tmp_path / "c").manifest.mask_policy["outlier_norm_factor"] == 1.1


def test_iter_batches(tiny_model, corpus, tmp_path):
    run(tiny_model, corpus, tmp_path / "c", n_tokens=24 * CTX)
    cache = ActivationCache(tmp_path / "c")
    n_masked = sum(s.n_masked for s in cache.manifest.shards)
    batches = list(cache.iter_batches(HOOKS[0], 50))
    assert [len(b) for b in batches[:-1]] == [50] * (len(batches) - 1) and 0 < len(batches[-1]) <= 50
    assert sum(len(b) for b in batches) == n_masked and batches[0].shape[1] == 64
    assert batches[0].dtype == torch.float32
    assert sum(len(b) for b in cache.iter_batches(HOOKS[0], 50, masked_only=False)) == cache.n_tokens
    assert sum(len(b) for b in cache.iter_batches(HOOKS[0], 50, drop_last=True)) == n_masked // 50 * 50
    # Unshuffled rows are the masked positions in order.
    shard0 = cache.load_shard(0)
    torch.testing.assert_close(batches[0], shard0.acts[HOOKS[0]][shard0.mask_WT][:50])
    a = torch.cat(list(cache.iter_batches(HOOKS[0], 50, shuffle_seed=1)))
    b = torch.cat(list(cache.iter_batches(HOOKS[0], 50, shuffle_seed=1)))
    c = torch.cat(list(cache.iter_batches(HOOKS[0], 50, shuffle_seed=2)))
    plain = torch.cat(batches)
    assert torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(a, plain)
    sort = lambda x: x[x[:, 0].argsort()]  # noqa: E731 — same multiset of rows
    torch.testing.assert_close(sort(a), sort(plain))
    with pytest.raises(CacheMismatchError, match="not in the cache"):
        next(cache.iter_batches("blocks.1.hook_resid_post", 10))


def test_missing_cache_folder(tmp_path):
    with pytest.raises(CacheNotFoundError, match="workbench cache"):
        ActivationCache(tmp_path)


def test_nonfinite_shard_raises_or_is_skipped(corpus, tmp_path):
    model = load_model("tiny:3")
    # A huge embedding for one word overflows float16 (max 65504) exactly where that word occurs.
    assert model.tokenizer is not None
    word = model.tokenizer.encode(" cat", add_special_tokens=False)[0]
    with torch.no_grad():
        model.W_E[word] = 1e6
    run(model, corpus, tmp_path / "c", n_tokens=16 * CTX, hooks=["hook_embed"], dtype="float16")
    cache = ActivationCache(tmp_path / "c")
    with pytest.raises(NonFiniteActivationError, match=r"shard 0 .*hook_embed"):
        cache.load_shard(0)
    rows = torch.cat(list(cache.iter_batches("hook_embed", 32, skip_nonfinite=True)))
    shard_tokens = torch.cat([cache.load_shard(i, check_finite=False).tokens_WT for i in range(2)])
    shard_masks = torch.cat([cache.load_shard(i, check_finite=False).mask_WT for i in range(2)])
    n_word = int(((shard_tokens == word) & shard_masks).sum())
    assert n_word > 0 and torch.isfinite(rows).all()
    assert len(rows) == int(shard_masks.sum()) - n_word


def test_bad_arguments(tiny_model, corpus, tmp_path):
    from sae_workbench.errors import ContextSizeError, HookNotFoundError

    with pytest.raises(HookNotFoundError):
        run(tiny_model, corpus, tmp_path / "c", hooks=["blocks.7.hook_resid_post"])
    with pytest.raises(ContextSizeError):
        run(tiny_model, corpus, tmp_path / "c", context_size=10_000, n_tokens=20_000)
    with pytest.raises(WorkbenchError, match="attention maps"):
        run(tiny_model, corpus, tmp_path / "c", hooks=["blocks.0.attn.hook_pattern"])
    assert not (tmp_path / "c").exists()


def test_short_corpus_caches_what_it_has(tiny_model, tmp_path, caplog):
    small = resolve_corpus(str(write_corpus(tmp_path / "small.txt", n_docs=2)))
    stats = run(tiny_model, small, tmp_path / "c", n_tokens=10_000 * CTX)
    n_windows = sum(len(b.window_ids) for b in iter_windows(small, tiny_model.tokenizer, CTX))
    assert stats.new_tokens == n_windows * CTX > 0
    assert "ran out" in caplog.text
