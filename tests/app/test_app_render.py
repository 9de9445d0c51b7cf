"""Token rendering: escaping, shading, hover values, context bounds (hand-computed cases)."""

import re
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from sae_workbench.app.render import context_bounds, escape_text, render_token_list, render_tokens, text_block
from tests.app.sample_store import PRISM_TRICKY_TEXT


def test_escape_text_neutralises_html_and_markdown() -> None:
    assert escape_text('<img src=x onerror="alert(1)">') == "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
    assert escape_text("a & b 'c' #1") == "a &amp; b &#x27;c&#x27; &#35;1"
    assert escape_text("$x$ *a* _b_ `c`") == "&#36;x&#36; &#42;a&#42; &#95;b&#95; &#96;c&#96;"


def test_render_tokens_escapes_shades_and_puts_value_on_hover() -> None:
    html = render_tokens(
        ["<bos>", " <script>", "alert", "</script>"], [9.0, 2.0, 1.0, 0.0], max_value=2.0, skip=[0]
    )
    assert "<script" not in html and "</script" not in html and "<bos" not in html
    assert "&lt;script&gt;" in html and "&lt;/script&gt;" in html
    spans = re.findall(r"<span [^>]*>", html)
    assert len(spans) == 4
    # BOS is skipped: greyed, unshaded, value 0 even though 9.0 was passed.
    assert 'class="wb-tok wb-special"' in spans[0] and "background-color" not in spans[0]
    assert 'title="0.000 · &#x27;&lt;bos&gt;&#x27;"' in spans[0]
    # alpha = 0.08 + 0.82 * value / max: 2.0 → 0.900, 1.0 → 0.490; zero stays unshaded.
    assert "rgba(255,128,0,0.900)" in spans[1] and 'title="2.000 · ' in spans[1]
    assert "rgba(255,128,0,0.490)" in spans[2]
    assert "background-color" not in spans[3]
    assert "\n" not in html  # one line: a raw HTML block for the markdown renderer


def test_render_tokens_marks_peak_and_slices_with_ellipses() -> None:
    html = render_tokens(
        ["a", "b", "c", "d"], [0.0, 1.0, 3.0, 0.5], max_value=3.0, peak_position=2, start=1, stop=3
    )
    assert html.count("<span") == 2 and "wb-peak" in html
    assert '<div class="wb-tokens">…<span' in html and "</span>…</div>" in html


def test_newlines_become_visible_arrows() -> None:
    html = render_tokens(["x\ny", "\t"], [0.0, 0.0], max_value=1.0)
    assert ">x↵y<" in html and ">⇥<" in html and "\n" not in html


def test_misaligned_values_raise() -> None:
    with pytest.raises(ValueError, match="must align"):
        render_tokens(["a", "b"], [1.0], max_value=1.0)


def test_context_bounds_clip_to_window() -> None:
    assert context_bounds(32, 5, 24, 8) == (0, 14)
    assert context_bounds(32, 30, 24, 8) == (6, 32)


def test_token_list_escapes() -> None:
    html = render_token_list(["<b>", "ok"], [1.5, -0.25])
    assert "&lt;b&gt;" in html and "+1.50" in html and "-0.25" in html and "<b>" not in html


# --- whole texts (PRISM cluster texts, continuations): one markdown line, shown as stored (issue 37 item 3) ----


class _TextOf(HTMLParser):
    """The text content of an HTML fragment, entities decoded (what a browser's textContent gives)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def text_content(fragment: str) -> str:
    parser = _TextOf()
    parser.feed(fragment)
    parser.close()
    return "".join(parser.parts)


def commonmark(markdown: str) -> str:
    """What a CommonMark renderer with raw HTML on (as Streamlit's unsafe_allow_html) makes of `markdown`."""
    return MarkdownIt("commonmark", {"html": True}).render(markdown)


@pytest.mark.parametrize(
    "text",
    [
        PRISM_TRICKY_TEXT,
        "first\n\n    indented four: a code block in raw markdown",
        "tab\n\n\tthen <b>bold</b> & 'quotes' \"double\"",
        "windows\r\n\r\n    line endings",
        "# heading? * list? > quote? 1. item?",
    ],
)
def test_text_block_stays_one_html_block_and_shows_the_text_as_stored(text: str) -> None:
    block = text_block(text)
    assert "\n" not in block and "\r" not in block and "\t" not in block
    # A CommonMark renderer passes the block through untouched: no code block, no paragraph, no stray </div>.
    assert commonmark(block).rstrip("\n") == block
    assert text_content(block) == text
    # Every inline use of escape_text is one line too (the explanation headline, the tree, search hits).
    wrapped = f'<div class="wb-explanation">{escape_text(text)}</div>'
    assert commonmark(wrapped).rstrip("\n") == wrapped and text_content(wrapped) == text


def test_text_block_puts_trusted_markup_before_the_escaped_text() -> None:
    block = text_block("a\n\n  <i>b</i>", '<span class="wb-special">α = +2 →</span> ')
    assert block == (
        '<div class="wb-tokens wb-text"><span class="wb-special">α = +2 →</span> '
        "a&#10;&#10;  &lt;i&gt;b&lt;/i&gt;</div>"
    )
