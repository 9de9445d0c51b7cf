"""Corpora and fixed-size token windows.

A corpus spec is one of:
- ``default`` — the embedded offline corpus (English prose + Python code, several million tokens), assembled once
  from files on this machine (see `workbench.default_corpus`) and cached under WORKBENCH_HOME;
- a path to a ``.txt``, ``.jsonl`` (field ``text``) or ``.parquet`` (column ``text``) file, or a folder of them;
- ``hf:<dataset>[:<split>[:<column>]]`` — a Hugging Face dataset, streamed (needs hub access).

Documents are concatenated into one token stream with the separator token between documents, and cut into windows
of ``context_size`` tokens whose first position is always the BOS token (explicit, recorded). The mask marks
positions to include in training and statistics: BOS, separator/special tokens and padding are excluded.

    corpus = resolve_corpus("default")
    for batch in iter_windows(corpus, model.tokenizer, 128, n_tokens=200_000): ...
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sae_workbench import defaults
from sae_workbench.errors import CorpusError

TEXT_SUFFIXES = (".txt", ".jsonl", ".parquet")
HF_PREFIX = "hf:"


@dataclass(frozen=True)
class Document:
    """One document of a corpus."""

    text: str
    """The document's text."""
    source: str
    """Where it came from (file name and line/row, dataset row, default-corpus part)."""


@dataclass(frozen=True)
class MaskPolicy:
    """Which positions of a window are excluded from training and statistics."""

    exclude_bos: bool = True
    """Exclude position 0, the BOS token (its residual norm is ~8.6× other tokens in SmolLM2, design.md)."""
    exclude_special: bool = True
    """Exclude the tokenizer's special tokens (document separators, padding, chat markers) anywhere in a window."""
    outlier_norm_factor: float | None = None
    """If set, also exclude positions whose activation norm exceeds this factor × their window's median norm
    (applied by the activation stages, which see the norms; per window so masks do not depend on batch size)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for manifests and provenance."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class WindowBatch:
    """A batch of token windows."""

    window_ids: np.ndarray
    """(B,) int64 — position of each window in the corpus's deterministic window sequence."""
    tokens_BT: np.ndarray
    """(B, T) int32 token ids; column 0 is the BOS token."""
    mask_BT: np.ndarray
    """(B, T) bool — True where the position counts for training and statistics."""
    texts: list[str] = field(default_factory=list)
    """Decoded text of each window without the BOS token."""
    sources: list[str] = field(default_factory=list)
    """Source of the document each window starts in."""
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """(B,) int64 — token offset of each window's first text token within its starting document."""


class Corpus:
    """A named, re-iterable sequence of documents."""

    def __init__(self, name: str, documents: Any, fingerprint: str) -> None:
        self.name = name
        self._documents = documents
        self.fingerprint = fingerprint

    def documents(self) -> Iterator[Document]:
        """Iterate documents in a fixed order (the same on every call)."""
        yield from self._documents()

    def __repr__(self) -> str:
        return f"Corpus({self.name!r}, fingerprint={self.fingerprint[:12]})"


def _read_text_file(path: Path) -> str:
    """Read a UTF-8 text file, refusing binary or mis-encoded content with a clear error."""
    data = path.read_bytes()
    if b"\x00" in data[:65536]:
        raise CorpusError(
            f"{path} looks binary (contains NUL bytes); pass a UTF-8 text, .jsonl or .parquet file."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(
            f"{path} is not valid UTF-8 (byte {err.start}: {err.reason}); convert it, e.g. `iconv -f latin1 -t utf-8`."
        ) from err


def _file_documents(path: Path) -> Iterator[Document]:
    """Documents of one local file: .txt (blank-line separated paragraphs grouped), .jsonl or .parquet."""
    suffix = path.suffix.lower()
    if suffix == ".txt":
        text = _read_text_file(path)
        # One document per block of text separated by two or more blank lines keeps files with many short
        # paragraphs from becoming thousands of tiny documents.
        for i, block in enumerate(text.split("\n\n\n")):
            if block.strip():
                yield Document(block.strip("\n"), f"{path.name}#{i}")
    elif suffix == ".jsonl":
        raw = _read_text_file(path)
        for lineno, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise CorpusError(
                    f"{path}:{lineno} is not valid JSON ({err.msg}); each line must be an object."
                ) from err
            text = row.get("text") if isinstance(row, dict) else None
            if not isinstance(text, str):
                raise CorpusError(f"{path}:{lineno} has no string field 'text'.")
            if text.strip():
                yield Document(text, str(row.get("source", f"{path.name}:{lineno}")))
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as err:  # pyarrow raises several types for corrupt files
            raise CorpusError(f"{path} is not a readable Parquet file: {err}") from err
        if "text" not in table.column_names:
            raise CorpusError(f"{path} has no 'text' column (columns: {table.column_names}).")
        for i, text in enumerate(table.column("text").to_pylist()):
            if isinstance(text, str) and text.strip():
                yield Document(text, f"{path.name}:{i}")
    else:
        raise CorpusError(f"{path}: unsupported corpus file type {suffix!r}; use one of {TEXT_SUFFIXES}.")


def _fingerprint_files(files: list[Path]) -> str:
    """Hash of the files' names, sizes and modification times."""
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.resolve()}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()


def _local_corpus(path: Path) -> Corpus:
    """A corpus of one local file or every supported file in a folder (sorted)."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in TEXT_SUFFIXES)
        if not files:
            raise CorpusError(f"{path} contains no {TEXT_SUFFIXES} files.")
    else:
        files = [path]

    def documents() -> Iterator[Document]:
        for f in files:
            yield from _file_documents(f)

    return Corpus(str(path), documents, _fingerprint_files(files))


def _hf_corpus(spec: str) -> Corpus:
    """A streamed Hugging Face dataset: ``hf:name[:split[:column]]``."""
    parts = spec[len(HF_PREFIX) :].split(":")
    name, split, column = (
        parts[0],
        parts[1] if len(parts) > 1 else "train",
        parts[2] if len(parts) > 2 else "text",
    )

    def documents() -> Iterator[Document]:
        from datasets import load_dataset

        try:
            dataset = load_dataset(name, split=split, streaming=True)
        except Exception as err:
            raise CorpusError(
                f"could not open Hugging Face dataset {name!r} ({err}); this needs hub access."
            ) from err
        for i, row in enumerate(dataset):
            text = row.get(column) if isinstance(row, dict) else None
            if isinstance(text, str) and text.strip():
                yield Document(text, f"{name}:{split}:{i}")

    return Corpus(spec, documents, hashlib.sha256(spec.encode()).hexdigest())


def resolve_corpus(spec: str = "default") -> Corpus:
    """Turn a corpus spec (``default``, a local path, or ``hf:name[:split[:column]]``) into a Corpus."""
    if spec == "default":
        from sae_workbench.default_corpus import default_corpus_path

        path = default_corpus_path()
        corpus = _local_corpus(path)
        return Corpus("default", corpus._documents, corpus.fingerprint)
    if spec.startswith(HF_PREFIX):
        return _hf_corpus(spec)
    path = Path(spec).expanduser()
    if path.exists():
        return _local_corpus(path)
    raise CorpusError(
        f"corpus {spec!r} not found: pass 'default', a .txt/.jsonl/.parquet file or folder, or hf:<dataset>."
    )


def default_bos_id(tokenizer: Any) -> int:
    """The token that starts every window: the document separator when the tokenizer has one, else BOS.

    SmolLM2's tokenizer declares ``<|im_start|>`` as BOS, but its document separator is ``<|endoftext|>`` (id 0),
    which is what the model saw between documents in pre-training (design.md).
    """
    for candidate in ("<|endoftext|>", "</s>", "<s>"):
        tid = tokenizer.convert_tokens_to_ids(candidate)
        if isinstance(tid, int) and tid >= 0 and tokenizer.convert_ids_to_tokens(tid) == candidate:
            return tid
    for attr in ("eos_token_id", "bos_token_id"):
        tid = getattr(tokenizer, attr, None)
        if isinstance(tid, int):
            return tid
    raise CorpusError(
        "tokenizer has neither a document separator, EOS nor BOS token; pass bos_id explicitly."
    )


def special_token_ids(tokenizer: Any) -> np.ndarray:
    """Ids of every special token the tokenizer declares (excluded by MaskPolicy.exclude_special)."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        tid = getattr(tokenizer, attr, None)
        if isinstance(tid, int):
            ids.add(tid)
    return np.array(sorted(ids), dtype=np.int64)


TOKENIZE_DOCS = 64
"""Documents tokenized per call (the fast tokenizer batches them natively)."""


LONG_DOCUMENT_CHARS = 1_000_000
"""A document longer than this is tokenized in pieces of at most this many characters, cut before a whitespace
character, as the windows need them (issue 34: a 10 MB one-line corpus was tokenized whole, 2.1 GB peak, to index
32 windows). No document of the embedded default corpus is this long (its longest: 755,864 characters)."""


def _pieces(text: str, limit: int = LONG_DOCUMENT_CHARS) -> Iterator[str]:
    """`text` in consecutive pieces of at most `limit` characters, each cut just before a whitespace character where
    one lies in the second half of the piece (a byte-level BPE tokenizer then tokenizes the pieces as the whole)."""
    start = 0
    while len(text) - start > limit:
        end = start + limit
        cut = max(text.rfind(" ", start + limit // 2, end), text.rfind("\n", start + limit // 2, end))
        end = cut if cut > start else end
        yield text[start:end]
        start = end
    yield text[start:]


def _document_tokens(
    corpus: Corpus, tokenizer: Any, separator_id: int
) -> Iterator[tuple[np.ndarray, str, int]]:
    """Yield each non-empty document's token ids (int64) followed by the separator token, with its source and the
    offset of its first token in the document (0; a document over LONG_DOCUMENT_CHARS comes in pieces, tokenized one
    at a time as they are consumed, the separator after the last)."""
    any_doc = False
    pending: list[Document] = []

    def flush() -> Iterator[tuple[np.ndarray, str, int]]:
        if not pending:
            return
        encoded = tokenizer([d.text for d in pending], add_special_tokens=False)["input_ids"]
        for doc, ids in zip(pending, encoded, strict=True):
            if ids:
                yield np.array([*ids, separator_id], dtype=np.int64), doc.source, 0

    def long_document(doc: Document) -> Iterator[tuple[np.ndarray, str, int]]:
        offset = 0
        pieces = _pieces(doc.text)
        piece = next(pieces)
        for following in pieces:
            ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
            yield np.array(ids, dtype=np.int64), doc.source, offset
            offset += len(ids)
            piece = following
        ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
        yield np.array([*ids, separator_id], dtype=np.int64), doc.source, offset

    for doc in corpus.documents():
        if len(doc.text) > LONG_DOCUMENT_CHARS:
            for item in flush():  # the documents before it first: the stream's order is the corpus's
                any_doc = True
                yield item
            pending = []
            for item in long_document(doc):
                any_doc = True
                yield item
            continue
        pending.append(doc)
        if len(pending) == TOKENIZE_DOCS:
            for item in flush():
                any_doc = True
                yield item
            pending = []
    if pending:
        for item in flush():
            any_doc = True
            yield item
    if not any_doc:
        raise CorpusError(f"corpus {corpus.name!r} is empty: it has no non-blank documents.")


def iter_windows(
    corpus: Corpus,
    tokenizer: Any,
    context_size: int,
    *,
    bos_id: int | None = None,
    n_tokens: int | None = None,
    batch_size: int = defaults.FORWARD_BATCH_WINDOWS,
    start_window: int = 0,
    mask_policy: MaskPolicy | None = None,
    decode: bool = True,
) -> Iterator[WindowBatch]:
    """Cut the corpus into windows of `context_size` tokens (BOS + context_size−1 text tokens), in batches.

    Documents are joined by the separator token into one stream. Window ids count from 0 in a fixed order, so
    `start_window` resumes exactly where an earlier run stopped. `n_tokens` bounds the total tokens (BOS included)
    of the windows yielded, counting from window 0; only whole windows are produced.
    """
    if context_size < 2:
        raise CorpusError("context_size must be at least 2 (BOS + one token).")
    policy = mask_policy or MaskPolicy()
    bos = default_bos_id(tokenizer) if bos_id is None else bos_id
    specials = special_token_ids(tokenizer)
    per_window = context_size - 1
    max_windows = None if n_tokens is None else n_tokens // context_size
    if max_windows is not None and max_windows <= start_window:
        return

    # Pending stream: token ids, the index of each token's document (into `sources`) and its offset there.
    ids_parts: list[np.ndarray] = []
    doc_parts: list[np.ndarray] = []
    off_parts: list[np.ndarray] = []
    pending = 0
    sources: list[str] = []
    out_tokens: list[np.ndarray] = []
    out_doc: list[np.ndarray] = []
    out_off: list[np.ndarray] = []
    out_ids: list[np.ndarray] = []
    buffered = 0
    next_window = 0

    def make_batch(n: int) -> WindowBatch:
        nonlocal out_tokens, out_doc, out_off, out_ids, buffered
        tokens_all, doc_all = np.concatenate(out_tokens), np.concatenate(out_doc)
        off_all, wid_all = np.concatenate(out_off), np.concatenate(out_ids)
        out_tokens, out_doc, out_off, out_ids = [tokens_all[n:]], [doc_all[n:]], [off_all[n:]], [wid_all[n:]]
        buffered -= n
        body = tokens_all[:n]
        tokens = np.concatenate([np.full((n, 1), bos, dtype=np.int64), body], axis=1).astype(np.int32)
        mask = np.ones_like(tokens, dtype=bool)
        if policy.exclude_bos:
            mask[:, 0] = False
        if policy.exclude_special:
            mask[:, 1:] &= ~np.isin(tokens[:, 1:], specials)
        texts = tokenizer.batch_decode(body.tolist()) if decode else []
        return WindowBatch(
            window_ids=wid_all[:n],
            tokens_BT=tokens,
            mask_BT=mask,
            texts=texts,
            sources=[sources[d] for d in doc_all[:n]],
            offsets=off_all[:n],
        )

    for doc_ids, source, first_offset in _document_tokens(corpus, tokenizer, bos):
        sources.append(source)
        ids_parts.append(doc_ids)
        doc_parts.append(np.full(len(doc_ids), len(sources) - 1, dtype=np.int64))
        off_parts.append(np.arange(first_offset, first_offset + len(doc_ids), dtype=np.int64))
        pending += len(doc_ids)
        if pending < per_window:
            continue
        stream = np.concatenate(ids_parts)
        docs, offs = np.concatenate(doc_parts), np.concatenate(off_parts)
        n_new = pending // per_window
        if max_windows is not None:
            n_new = min(n_new, max_windows - next_window)
        cut = n_new * per_window
        ids_parts, doc_parts, off_parts = [stream[cut:]], [docs[cut:]], [offs[cut:]]
        pending -= cut
        wids = np.arange(next_window, next_window + n_new, dtype=np.int64)
        next_window += n_new
        keep = wids >= start_window
        if keep.any():
            out_tokens.append(stream[:cut].reshape(n_new, per_window)[keep])
            out_doc.append(docs[:cut:per_window][keep])
            out_off.append(offs[:cut:per_window][keep])
            out_ids.append(wids[keep])
            buffered += int(keep.sum())
        while buffered >= batch_size:
            yield make_batch(batch_size)
        if max_windows is not None and next_window >= max_windows:
            break
    if buffered:
        yield make_batch(buffered)


def count_windows(corpus: Corpus, tokenizer: Any, context_size: int) -> int:
    """Number of whole windows the corpus yields (tokenizes everything; for reporting)."""
    return sum(
        len(b.window_ids)
        for b in iter_windows(corpus, tokenizer, context_size, batch_size=1024, decode=False)
    )
