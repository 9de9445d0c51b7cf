"""HTML for token windows shaded by activation. Every piece of corpus text is escaped here, nowhere else.

html = render_tokens(["<s>", " Hello", " <script>"], [0.0, 1.5, 3.0], max_value=3.0, skip=[0])

The output is one line (no blank lines) so Streamlit's markdown renderer treats it as a raw HTML block and never
interprets corpus text as markdown; markdown/LaTeX control characters are additionally written as entities. Line
breaks and tabs inside a text are entities too (`escape_text`): a blank line followed by indentation in raw markdown
would end the HTML block and turn the rest into a code block that shows the entities and the closing `</div>`
literally. Whole texts (PRISM cluster texts, continuations) go through `text_block`, which keeps their line breaks
and indentation visible.

    st.markdown(text_block(corpus_text), unsafe_allow_html=True)   # shows the text exactly as stored
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

# Characters Streamlit's markdown (CommonMark + GFM + remark-math) could act on; written as numeric entities so a
# token like "$x$" or "**" shows literally even if a renderer ever parsed the block as markdown.
_MARKDOWN_CHARS = "$*_`~[]\\#|{}"
# One pass over the text (escaping in two passes would re-escape the "#" of the first pass's entities).
# Line breaks and tabs as entities keep every escaped text on one markdown line (see the module docstring).
_ENTITY = {ord(c): html.escape(c, quote=True) for c in "&<>\"'"} | {
    ord(c): f"&#{ord(c)};" for c in _MARKDOWN_CHARS + "\n\r\t"
}

# Orange (activation) on white; alpha carries the strength so text stays readable at every level.
_ACTIVE_RGB = (255, 128, 0)
_NEGATIVE_RGB = (40, 110, 255)

CSS = (
    "<style>"
    ".wb-tokens{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:0.86rem;line-height:1.9;"
    "white-space:pre-wrap;word-break:break-word;padding:4px 6px;border:1px solid rgba(128,128,128,0.25);"
    "border-radius:4px;margin-bottom:4px}"
    ".wb-tok{border-radius:2px;padding:1px 0}"
    ".wb-peak{outline:1.5px solid #c0392b}"
    ".wb-special{color:#999}"
    ".wb-nl{color:#999}"
    "</style>"
)


def escape_text(text: str) -> str:
    """Escape corpus text for HTML (tags, quotes), neutralise markdown/LaTeX control characters, and write line
    breaks and tabs as entities, so the result is one markdown line whatever the text holds."""
    return text.translate(_ENTITY)


def text_block(text: str, prefix_html: str = "") -> str:
    """A whole text as one HTML line in a `wb-tokens` block (pre-wrap): its line breaks, blank lines and indentation
    show as stored, and nothing in it is read as markdown or HTML. `prefix_html` (trusted markup, e.g. a label) goes
    before the text."""
    return f'<div class="wb-tokens wb-text">{prefix_html}{escape_text(text)}</div>'


def _display(token: str) -> str:
    """Visible form of a token: newlines and tabs shown as arrows so they do not vanish or break the block."""
    return token.replace("\r", "").replace("\n", "↵").replace("\t", "⇥")


@dataclass(frozen=True)
class TokenStyle:
    """How to shade one window."""

    max_value: float
    """Activation mapped to full colour (the feature's max, so shading is comparable across examples)."""
    peak_position: int | None = None
    """Position to outline (the window's maximum)."""


def token_span(
    token: str, value: float, style: TokenStyle, *, special: bool = False, peak: bool = False
) -> str:
    """One token as a <span>, shaded by `value / style.max_value`, with the value in its hover title."""
    text = escape_text(_display(token))
    title = escape_text(f"{value:.3f} · {token!r}")
    classes = ["wb-tok"]
    if special:
        classes.append("wb-special")
    if peak:
        classes.append("wb-peak")
    style_attr = ""
    if value != 0.0 and style.max_value > 0:
        alpha = min(abs(value) / style.max_value, 1.0)
        r, g, b = _ACTIVE_RGB if value > 0 else _NEGATIVE_RGB
        style_attr = f' style="background-color:rgba({r},{g},{b},{0.08 + 0.82 * alpha:.3f})"'
    return (
        f'<span class="{" ".join(classes)}" title="{title}" data-act="{value:.4g}"{style_attr}>{text}</span>'
    )


def render_tokens(
    token_strings: Sequence[str],
    values: Sequence[float] | np.ndarray,
    *,
    max_value: float,
    skip: Iterable[int] = (),
    peak_position: int | None = None,
    start: int = 0,
    stop: int | None = None,
) -> str:
    """A window's tokens[start:stop] as one HTML line, each shaded by its activation (values aligned to tokens).

    `skip` positions (BOS, masked tokens) are shown greyed and never shaded.
    """
    if len(values) != len(token_strings):
        raise ValueError(f"{len(values)} activation values for {len(token_strings)} tokens; they must align")
    style = TokenStyle(max_value=max_value, peak_position=peak_position)
    skipped = set(skip)
    stop = len(token_strings) if stop is None else min(stop, len(token_strings))
    spans = []
    for pos in range(max(start, 0), stop):
        special = pos in skipped
        value = 0.0 if special else float(values[pos])
        spans.append(token_span(token_strings[pos], value, style, special=special, peak=pos == peak_position))
    prefix = "…" if start > 0 else ""
    suffix = "…" if stop < len(token_strings) else ""
    return f'<div class="wb-tokens">{prefix}{"".join(spans)}{suffix}</div>'


def context_bounds(n_tokens: int, center: int, left: int, right: int) -> tuple[int, int]:
    """[start, stop) of a view of `left` tokens before and `right` after `center`, clipped to the window."""
    start = max(0, center - left)
    stop = min(n_tokens, center + right + 1)
    return start, stop


def render_token_list(tokens: Sequence[str], values: Sequence[float]) -> str:
    """Logit-lens style list: escaped tokens with their values, as one HTML line."""
    items = "".join(
        f'<span class="wb-tok" style="margin-right:6px">{escape_text(_display(t))}'
        f'<span class="wb-special"> {v:+.2f}</span></span>'
        for t, v in zip(tokens, values, strict=True)
    )
    return f'<div class="wb-tokens">{items}</div>'
