"""SAE training: every architecture, BatchTopK threshold, NaN handling, kill + resume, streaming and cache sources."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sae_workbench.sae.data import (
    NonFiniteActivationsError,
    ShuffledBatches,
    TrainingDataExhaustedError,
    cache_source,
    streaming_source,
    tensor_source,
)
from sae_workbench.sae.io import SAEIdError, compute_sae_id, load_sae, recorded_sae_id, sae_id_of
from sae_workbench.sae.train import ARCHITECTURES, ResumeError, TrainConfig, train_sae

D_IN = 64
# What the synthetic activations stand for: train_sae needs both (they are part of the SAE's id).
MODEL, HOOK = "synthetic", "blocks.0.hook_resid_post"


def synthetic_chunks(
    n_chunks: int = 8, rows: int = 512, n_true: int = 128, k_true: int = 4
) -> list[torch.Tensor]:
    """Activations that really are sparse combinations of `n_true` unit directions (a solvable SAE task)."""
    gen = torch.Generator().manual_seed(0)
    dictionary = torch.randn(n_true, D_IN, generator=gen)
    dictionary /= dictionary.norm(dim=1, keepdim=True)
    out = []
    for _ in range(n_chunks):
        codes = torch.zeros(rows, n_true)
        codes.scatter_(
            1,
            torch.randint(0, n_true, (rows, k_true), generator=gen),
            torch.rand(rows, k_true, generator=gen) * 3,
        )
        out.append(codes @ dictionary + 0.01 * torch.randn(rows, D_IN, generator=gen))
    return out


def small_cfg(**overrides) -> TrainConfig:
    """A few dozen steps of a 64→256 SAE."""
    base = {
        "d_sae": 256,
        "k": 8,
        "n_tokens": 256 * 30,
        "batch_size": 256,
        "lr": 3e-3,
        "shuffle_chunks": 2,
        "dead_feature_tokens": 2048,
        "log_every": 5,
    }
    return TrainConfig(**{**base, **overrides})


def test_batcher_is_deterministic_and_resumes_exactly():
    chunks = synthetic_chunks(6, rows=100)
    full = [
        b
        for _, b in zip(
            range(10), ShuffledBatches(tensor_source(chunks), 48, seed=3, chunks_per_block=2), strict=False
        )
    ]
    first = ShuffledBatches(tensor_source(chunks), 48, seed=3, chunks_per_block=2)
    for _ in range(4):
        next(first)
    resumed = ShuffledBatches(tensor_source(chunks), 48, seed=3, chunks_per_block=2, resume=first.state())
    for expected in full[4:10]:
        torch.testing.assert_close(next(resumed), expected)
    # rows are a permutation of the data, not copies
    assert not torch.equal(full[0], chunks[0][:48])


def test_batcher_reads_no_chunk_past_its_limit_and_peek_consumes_nothing():
    chunks = synthetic_chunks(8, rows=100)
    read: list[int] = []

    def counting(start: int):
        for i, chunk in enumerate(tensor_source(chunks)(start), start=start):
            read.append(i)
            yield chunk

    # 250 rows need chunks 0-2 (300 rows); without the limit the 4-chunk block would read chunk 3 as well.
    limited = ShuffledBatches(counting, 50, seed=1, chunks_per_block=4, limit=250)
    peeked = limited.peek(120)
    batches = [next(limited) for _ in range(5)]
    assert read == [0, 1, 2]
    torch.testing.assert_close(torch.cat(batches)[:120], peeked)
    unlimited = ShuffledBatches(tensor_source(chunks), 50, seed=1, chunks_per_block=4)
    assert not torch.equal(
        torch.cat([next(unlimited) for _ in range(5)]), torch.cat(batches)
    )  # 3- vs 4-chunk block


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_each_architecture_trains_saves_and_reloads(arch: str, tmp_path: Path):
    result = train_sae(
        tensor_source(synthetic_chunks(), repeat=True),
        D_IN,
        small_cfg(architecture=arch, n_tokens=256 * 12),
        tmp_path,
        model_name=MODEL,
        hook=HOOK,
        progress=False,
    )
    sae = load_sae(result.folder)
    assert sae.cfg.d_in == D_IN and sae.cfg.d_sae == 256
    assert {"loss", "l0", "explained_variance", "dead_fraction"} <= set(result.final)
    lines = (tmp_path / "train_log.jsonl").read_text().splitlines()
    assert len(lines) >= 2 and "tokens_per_s" in json.loads(lines[-1])
    assert not (tmp_path / "checkpoints").exists()


def test_training_records_the_sae_id_and_loaders_read_it_back(tmp_path: Path):
    result = train_sae(
        tensor_source(synthetic_chunks(), repeat=True),
        D_IN,
        small_cfg(n_tokens=256 * 4),
        tmp_path,
        model_name=MODEL,
        hook=HOOK,
        progress=False,
    )
    model, hook = MODEL, HOOK
    sae = load_sae(tmp_path)
    # The recorded id is the hash of the saved SAE, the same the hashing function gives directly.
    assert result.sae_id == compute_sae_id(sae, model, hook) == sae_id_of(sae, model, hook, tmp_path)
    record_path = tmp_path / "train_result.json"
    record = json.loads(record_path.read_text())
    assert (record["sae_id"], record["model_name"], record["hook"]) == (result.sae_id, model, hook)
    # Loaders read the record (no rehash): a planted id comes back as it is...
    record_path.write_text(json.dumps({**record, "sae_id": "0123456789abcdef"}))
    assert sae_id_of(sae, model, hook, tmp_path) == "0123456789abcdef"
    # ...but only for the model and hook it was made for, and while the weights file is the one it describes.
    assert sae_id_of(sae, model, "blocks.1.hook_resid_post", tmp_path) == compute_sae_id(
        sae, model, "blocks.1.hook_resid_post"
    )
    assert recorded_sae_id(tmp_path, sae, "other-model", hook) is None
    record_path.write_text(json.dumps({**record, "sae_id": "0123456789abcdef", "weights_bytes": 1}))
    assert sae_id_of(sae, model, hook, tmp_path) == result.sae_id
    # A rerun into the folder drops the old record before it touches the weights (kept from a killed run otherwise).
    with pytest.raises(ResumeError):  # a refused resume leaves the finished run's record alone
        train_sae(tensor_source([]), D_IN, small_cfg(), tmp_path, model_name=MODEL, hook=HOOK, resume=True)
    assert record_path.exists()
    with pytest.raises(TrainingDataExhaustedError):
        train_sae(tensor_source([]), D_IN, small_cfg(), tmp_path, model_name=MODEL, hook=HOOK, progress=False)
    assert not record_path.exists()


def test_model_and_hook_are_required_for_an_id(tmp_path: Path):
    with pytest.raises(SAEIdError, match="model"):
        compute_sae_id(load_sae(train_small(tmp_path)), "", HOOK)
    with pytest.raises(SAEIdError, match="hook"):
        compute_sae_id(load_sae(tmp_path), MODEL, " ")
    with pytest.raises(SAEIdError, match="hook"):  # before any training
        train_sae(
            tensor_source([]), D_IN, small_cfg(), tmp_path / "y", model_name=MODEL, hook="", progress=False
        )
    with pytest.raises(TypeError):
        train_sae(tensor_source(synthetic_chunks()), D_IN, small_cfg(), tmp_path / "x", progress=False)  # type: ignore[call-arg]


def train_small(out: Path) -> Path:
    """A 4-step SAE in `out`."""
    train_sae(
        tensor_source(synthetic_chunks(), repeat=True),
        D_IN,
        small_cfg(n_tokens=256 * 4),
        out,
        model_name=MODEL,
        hook=HOOK,
        progress=False,
    )
    return out


def test_topk_learns(tmp_path: Path):
    topk = train_sae(
        tensor_source(synthetic_chunks(), repeat=True),
        D_IN,
        small_cfg(n_tokens=256 * 60),
        tmp_path / "t",
        model_name=MODEL,
        hook=HOOK,
        progress=False,
    )
    assert topk.final["explained_variance"] > 0.5


@pytest.mark.parametrize("arch", ["batchtopk", "matryoshka_batchtopk"])
def test_short_batchtopk_run_reloads_with_trained_l0(arch: str, tmp_path: Path):
    # 20 steps: far too few for sae-lens's threshold EMA alone (design.md); the end-of-run calibration fixes it.
    held_out = synthetic_chunks(9)[8]
    res = train_sae(
        tensor_source(synthetic_chunks(), repeat=True),
        D_IN,
        small_cfg(architecture=arch, n_tokens=256 * 20),
        tmp_path,
        model_name=MODEL,
        hook=HOOK,
        progress=False,
    )
    sae = load_sae(res.folder)
    assert type(sae).__name__ == "JumpReLUSAE"
    l0 = (sae.encode(held_out) != 0).float().sum(-1).mean().item()
    assert 8 * 0.8 <= l0 <= 8 * 1.2, f"reloaded {arch} L0 {l0} not within ±20% of the trained k=8"


def test_calibrate_threshold_by_hand():
    from sae_lens import BatchTopKTrainingSAE, BatchTopKTrainingSAEConfig

    from sae_workbench.sae.train import calibrate_threshold

    sae = BatchTopKTrainingSAE(
        BatchTopKTrainingSAEConfig(d_in=2, d_sae=2, k=1, apply_b_dec_to_input=False, decoder_init_norm=None)
    )
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(2))
        sae.W_dec.copy_(torch.eye(2))
        sae.b_enc.zero_()
    # pre-activations 5, 3, 2, 1, 0, −1 over 3 rows; k=1 keeps 3 values (5, 3, 2): threshold = 1, the largest dropped
    rows = torch.tensor([[5.0, 1.0], [3.0, -1.0], [2.0, 0.0]])
    assert float(calibrate_threshold(sae, [rows[:2], rows[2:]], 1)) == pytest.approx(1.0)
    assert float(calibrate_threshold(sae, [rows], 0.5)) == pytest.approx(3.0)  # int(0.5 × 3) = 1 value kept


def test_nan_rows_stop_with_location_or_are_skipped(tmp_path: Path):
    chunks = synthetic_chunks(4)
    chunks[2][5, 3] = float("nan")
    chunks[2][9, 0] = float("inf")
    with pytest.raises(NonFiniteActivationsError, match=r"2 activation rows .* tensor 2"):
        train_sae(
            tensor_source(chunks),
            D_IN,
            small_cfg(n_tokens=256 * 6),
            tmp_path / "stop",
            model_name=MODEL,
            hook=HOOK,
            progress=False,
        )
    res = train_sae(
        tensor_source(chunks),
        D_IN,
        small_cfg(n_tokens=256 * 6, nan_policy="skip"),
        tmp_path / "skip",
        model_name=MODEL,
        hook=HOOK,
        progress=False,
    )
    assert res.skipped_rows == 2
    assert all(torch.isfinite(p).all() for p in load_sae(res.folder).parameters())


def test_resume_refuses_other_settings(tmp_path: Path):
    with pytest.raises(ResumeError, match="no checkpoint"):
        train_sae(
            tensor_source(synthetic_chunks()),
            D_IN,
            small_cfg(),
            tmp_path,
            resume=True,
            model_name=MODEL,
            hook=HOOK,
            progress=False,
        )


KILL_SCRIPT = """
import sys, time, torch
sys.path.insert(0, {root!r})
from tests.sae.test_sae_train import synthetic_chunks, small_cfg, D_IN, MODEL, HOOK
from sae_workbench.sae.data import tensor_source
from sae_workbench.sae.train import train_sae
torch.set_num_threads(1)
chunks = synthetic_chunks()
def slow(start):
    for c in tensor_source(chunks, repeat=True)(start):
        time.sleep(0.2)   # a slow producer, like a model forward pass
        yield c
train_sae(slow, D_IN, small_cfg(checkpoint_every=4), {out!r}, model_name=MODEL, hook=HOOK, progress=False)
"""


def test_killed_run_resumes_to_same_result(tmp_path: Path):
    torch.set_num_threads(1)
    reference = train_sae(
        tensor_source(synthetic_chunks(), repeat=True),
        D_IN,
        small_cfg(checkpoint_every=4),
        tmp_path / "ref",
        model_name=MODEL,
        hook=HOOK,
        progress=False,
    )
    out = tmp_path / "killed"
    script = tmp_path / "run.py"
    script.write_text(KILL_SCRIPT.format(root=str(Path(__file__).parents[2]), out=str(out)))
    proc = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    latest = out / "checkpoints" / "latest.json"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if latest.exists() and json.loads(latest.read_text())["checkpoint"] >= "step_00000008":
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the training subprocess finished before it could be killed"
    assert not (out / "sae_weights.safetensors").exists()
    resumed = train_sae(
        tensor_source(synthetic_chunks(), repeat=True),
        D_IN,
        small_cfg(checkpoint_every=4),
        out,
        resume=True,
        model_name=MODEL,
        hook=HOOK,
        progress=False,
    )
    assert resumed.n_tokens == reference.n_tokens
    a, b = load_sae(reference.folder).state_dict(), load_sae(resumed.folder).state_dict()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory) -> Path:
    """A small real-text corpus file."""
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    import inspect
    import json as json_mod

    path.write_text(inspect.getsource(json_mod) + "\n" + inspect.getsource(inspect)[:60000])
    return path


def test_streaming_source_excludes_masked_positions(tiny_model, tiny_corpus: Path):
    from sae_workbench.corpus import iter_windows, resolve_corpus

    corpus = resolve_corpus(str(tiny_corpus))
    hook = "blocks.1.hook_resid_post"
    chunk = next(streaming_source(tiny_model, hook, corpus, context_size=32, windows_per_chunk=4)(0))
    batch = next(iter_windows(corpus, tiny_model.tokenizer, 32, batch_size=4, decode=False))
    assert chunk.acts_ND.shape == (int(batch.mask_BT.sum()), 64)
    assert int(batch.mask_BT.sum()) < batch.mask_BT.size  # BOS at least was dropped
    _, cache = tiny_model.run_with_cache(torch.from_numpy(batch.tokens_BT).long(), names_filter=[hook])
    torch.testing.assert_close(chunk.acts_ND, cache[hook][torch.from_numpy(batch.mask_BT)])
    second = next(streaming_source(tiny_model, hook, corpus, context_size=32, windows_per_chunk=4)(1))
    assert chunk.label == "windows 0-3" and second.label == "windows 4-7"


def test_train_from_cache_and_streaming(tiny_model, tiny_corpus: Path, tmp_path: Path):
    from sae_workbench.activation_cache.caching import cache_activations
    from sae_workbench.corpus import resolve_corpus

    corpus = resolve_corpus(str(tiny_corpus))
    hook = "blocks.1.hook_resid_post"
    cache_activations(
        tiny_model,
        [hook],
        corpus,
        tmp_path / "cache",
        n_tokens=32 * 64,
        context_size=32,
        dtype="float32",
        shard_tokens=512,
        progress=False,
    )
    cfg = small_cfg(n_tokens=256 * 4, shuffle_chunks=1)
    from_cache = train_sae(
        cache_source(tmp_path / "cache", hook),
        64,
        cfg,
        tmp_path / "c",
        model_name="tiny",
        hook=hook,
        progress=False,
    )
    streamed = train_sae(
        streaming_source(tiny_model, hook, corpus, context_size=32, windows_per_chunk=8),
        64,
        cfg,
        tmp_path / "s",
        model_name="tiny",
        hook=hook,
        progress=False,
    )
    for res in (from_cache, streamed):
        sae = load_sae(res.folder)
        assert sae.cfg.metadata.hook_name == hook and sae.cfg.metadata.model_name == "tiny"
        assert res.n_tokens == 256 * 4


@pytest.mark.parametrize("shuffle_chunks", [1, 3])
def test_held_out_windows_start_after_every_window_training_read(
    tiny_model, tiny_corpus: Path, tmp_path: Path, shuffle_chunks: int
):
    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.sae.data import first_held_out_window

    corpus, hook, context_size, per_chunk = (
        resolve_corpus(str(tiny_corpus)),
        "blocks.1.hook_resid_post",
        32,
        4,
    )
    stream = streaming_source(
        tiny_model, hook, corpus, context_size=context_size, windows_per_chunk=per_chunk
    )
    last_read = []

    def watched(start: int):
        for chunk in stream(start):
            last_read.append(int(chunk.label.split("-")[-1]))  # "windows a-b"
            yield chunk

    cfg = small_cfg(n_tokens=256 * 6, shuffle_chunks=shuffle_chunks)
    train_sae(watched, 64, cfg, tmp_path, model_name="tiny", hook=hook, progress=False)
    first = first_held_out_window(cfg.n_tokens, context_size, shuffle_chunks, windows_per_chunk=per_chunk)
    assert max(last_read) < first, (max(last_read), first)
    assert (
        max(last_read) >= int(cfg.n_tokens / (context_size - 1)) - 1
    )  # it did read past the bare token count
