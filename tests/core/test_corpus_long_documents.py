"""Issue 34 item 5: a long one-line document is tokenized in pieces as the windows need it, not whole, and the pieces
give exactly the windows the whole document gives."""

from pathlib import Path

import numpy as np
import pytest

from sae_workbench import corpus as corpus_module
from sae_workbench.corpus import LONG_DOCUMENT_CHARS, iter_windows, resolve_corpus


class CountingTokenizer:
    """The real tokenizer, recording how many characters each call was given."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.sizes = tokenizer, []

    def __call__(self, text, **kwargs):
        self.sizes.append(max(len(t) for t in text) if isinstance(text, list) else len(text))
        return self.tokenizer(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def __len__(self) -> int:
        return len(self.tokenizer)


def one_line(path: Path, n_chars: int) -> Path:
    words = np.random.default_rng(0).choice(
        ["fox", "river", "lazy", "dog", "bank", "jumps", "over", "the"], n_chars // 4
    )
    path.write_text(" ".join(words)[:n_chars])
    return path


def test_a_long_line_is_not_tokenized_whole_to_index_a_few_windows(tmp_path: Path, tiny_model) -> None:
    path = one_line(tmp_path / "line.txt", 3 * LONG_DOCUMENT_CHARS)  # the issue: 10 MB
    tokenizer = CountingTokenizer(tiny_model.tokenizer)
    batches = list(iter_windows(resolve_corpus(str(path)), tokenizer, 128, n_tokens=32 * 128, batch_size=8))
    assert sum(len(b.window_ids) for b in batches) == 32
    # Before: one call with all 3,000,000 characters (a 10 MB line: 2.1 GB peak in the run).
    assert max(tokenizer.sizes) <= LONG_DOCUMENT_CHARS and len(tokenizer.sizes) == 1


def test_pieces_give_the_same_windows_as_the_whole_document(tmp_path: Path, tiny_model, monkeypatch) -> None:
    path = one_line(tmp_path / "line.txt", 60_000)
    (tmp_path / "line.txt").write_text(path.read_text() + "\n\n\nA short second document.")

    def windows() -> tuple[np.ndarray, np.ndarray, list[str]]:
        batches = list(iter_windows(resolve_corpus(str(path)), tiny_model.tokenizer, 64, batch_size=64))
        return (np.concatenate([b.tokens_BT for b in batches]), np.concatenate([b.offsets for b in batches]),
                [s for b in batches for s in b.sources])  # fmt: skip

    whole = windows()
    monkeypatch.setattr(corpus_module, "LONG_DOCUMENT_CHARS", 5_000)
    pieces = windows()
    assert whole[0].shape == pieces[0].shape and np.array_equal(whole[0], pieces[0])
    assert np.array_equal(whole[1], pieces[1]) and whole[2] == pieces[2]


@pytest.mark.parametrize("limit", [10, 1000])
def test_pieces_cover_the_text_in_order(limit: int) -> None:
    text = "alpha beta\ngamma " * 500
    parts = list(corpus_module._pieces(text, limit))
    assert "".join(parts) == text and all(len(p) <= limit for p in parts)
