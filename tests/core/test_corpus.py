"""Corpora and windows: local file formats, bad files, BOS/mask rules, resume via start_window, the default corpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sae_workbench.corpus import MaskPolicy, default_bos_id, iter_windows, resolve_corpus, special_token_ids
from sae_workbench.errors import CorpusError
from sae_workbench.models import tiny_tokenizer

DOCS = [
    "The quick brown fox jumps over the lazy dog. " * 6,
    "def add(a, b):\n    return a + b\n" * 5,
    "In the beginning God created the heaven and the earth. " * 4,
]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def documents(spec: str) -> list[str]:
    return [d.text for d in resolve_corpus(spec).documents()]


def test_txt_jsonl_parquet_give_the_same_documents(tmp_path: Path):
    (tmp_path / "a.txt").write_text("\n\n\n".join(DOCS))
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in DOCS) + "\n\n")
    pq.write_table(pa.table({"text": DOCS, "id": [1, 2, 3]}), tmp_path / "a.parquet")
    assert documents(str(tmp_path / "a.txt")) == [d.strip("\n") for d in DOCS]
    assert documents(str(tmp_path / "a.jsonl")) == DOCS
    assert documents(str(tmp_path / "a.parquet")) == DOCS
    # A folder reads every supported file in sorted order.
    assert len(documents(str(tmp_path))) == 9
    sources = [d.source for d in resolve_corpus(str(tmp_path / "a.jsonl")).documents()]
    assert sources == ["a.jsonl:1", "a.jsonl:2", "a.jsonl:3"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bin.txt", b"\x7fELF\x00\x01\x02binary", "binary"),
        ("latin1.txt", "café crème".encode("latin-1"), "not valid UTF-8"),
        ("bad.jsonl", b'{"text": "ok"}\n{not json\n', "bad.jsonl:2 is not valid JSON"),
        ("notext.jsonl", b'{"body": "x"}\n', "no string field 'text'"),
        ("bad.parquet", b"PAR1 garbage", "not a readable Parquet"),
        ("data.csv", b"text\nhello\n", "unsupported corpus file type"),
    ],
)
def test_bad_files_raise_corpus_error(tmp_path: Path, name: str, content: bytes, message: str):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(CorpusError, match=message):
        documents(str(tmp_path / name))


def test_parquet_without_text_column(tmp_path: Path):
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "a.parquet")
    with pytest.raises(CorpusError, match="no 'text' column"):
        documents(str(tmp_path / "a.parquet"))


def test_empty_and_missing_corpora(tmp_path: Path, tokenizer):
    (tmp_path / "empty.txt").write_text("  \n\n\n \n")
    with pytest.raises(CorpusError, match="empty"):
        next(iter_windows(resolve_corpus(str(tmp_path / "empty.txt")), tokenizer, 16))
    with pytest.raises(CorpusError, match="not found"):
        resolve_corpus(str(tmp_path / "missing.txt"))
    (tmp_path / "folder").mkdir()
    with pytest.raises(CorpusError, match="contains no"):
        resolve_corpus(str(tmp_path / "folder"))


def test_windows_bos_tokens_and_masks(tmp_path: Path, tokenizer):
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in DOCS))
    corpus = resolve_corpus(str(tmp_path / "a.jsonl"))
    bos = default_bos_id(tokenizer)
    assert bos == 0 and tokenizer.convert_ids_to_tokens(bos) == "<|endoftext|>"
    # Hand-built expectation: documents joined by the separator (= BOS id), cut into chunks of T−1 tokens.
    stream: list[int] = []
    for d in DOCS:
        stream += [*tokenizer(d, add_special_tokens=False)["input_ids"], bos]
    T = 16
    n = len(stream) // (T - 1)
    batches = list(iter_windows(corpus, tokenizer, T, batch_size=4))
    tokens = np.concatenate([b.tokens_BT for b in batches])
    mask = np.concatenate([b.mask_BT for b in batches])
    assert tokens.shape == (n, T) and tokens.dtype == np.int32
    assert (tokens[:, 0] == bos).all()
    assert np.array_equal(tokens[:, 1:].reshape(-1), np.array(stream[: n * (T - 1)]))
    assert np.concatenate([b.window_ids for b in batches]).tolist() == list(range(n))
    # Mask: BOS column and every special token (the document separators) are excluded, everything else included.
    specials = special_token_ids(tokenizer)
    assert not mask[:, 0].any()
    assert np.array_equal(mask[:, 1:], ~np.isin(tokens[:, 1:], specials))
    assert (~mask[:, 1:]).sum() == (tokens[:, 1:] == bos).sum() >= 1
    assert batches[0].texts[0] == tokenizer.decode(tokens[0, 1:].tolist())
    assert batches[0].sources[0] == "a.jsonl:1" and batches[0].offsets[0] == 0
    # Policies that keep BOS / specials.
    keep = next(iter_windows(corpus, tokenizer, T, batch_size=n, mask_policy=MaskPolicy(False, False)))
    assert keep.mask_BT.all()
    # n_tokens bounds the windows (whole windows only).
    assert sum(len(b.window_ids) for b in iter_windows(corpus, tokenizer, T, n_tokens=5 * T + 7)) == 5


def test_start_window_resumes_the_tail(tmp_path: Path, tokenizer):
    (tmp_path / "a.txt").write_text("\n\n\n".join(DOCS * 3))
    corpus = resolve_corpus(str(tmp_path / "a.txt"))
    full = list(iter_windows(corpus, tokenizer, 12, batch_size=3, n_tokens=30 * 12))
    tail = list(iter_windows(corpus, tokenizer, 12, batch_size=3, n_tokens=30 * 12, start_window=7))
    full_tokens = np.concatenate([b.tokens_BT for b in full])
    tail_tokens = np.concatenate([b.tokens_BT for b in tail])
    assert len(full_tokens) == 30
    assert np.array_equal(tail_tokens, full_tokens[7:])
    assert np.concatenate([b.window_ids for b in tail]).tolist() == list(range(7, 30))
    assert np.array_equal(
        np.concatenate([b.mask_BT for b in tail]), np.concatenate([b.mask_BT for b in full])[7:]
    )
    assert list(iter_windows(corpus, tokenizer, 12, n_tokens=30 * 12, start_window=30)) == []


def test_fingerprint_changes_with_content(tmp_path: Path):
    path = tmp_path / "a.txt"
    path.write_text("one")
    before = resolve_corpus(str(path)).fingerprint
    path.write_text("one two")
    assert resolve_corpus(str(path)).fingerprint != before


@pytest.mark.slow
def test_default_corpus_has_at_least_2m_tokens(tokenizer):
    corpus = resolve_corpus("default")
    windows = sum(
        len(b.window_ids)
        for b in iter_windows(corpus, tokenizer, 1024, n_tokens=2000 * 1024, batch_size=256, decode=False)
    )
    assert windows == 2000  # 2000 whole windows of 1024 tokens = 2,048,000 tokens ≥ 2M
