"""How records are shown to an LLM: token<TAB>value lines (tree paper, Ma et al. 2025).

When fewer than 20% of the shown values are non-zero, the records are repeated with the zeros removed so the
active tokens stand out (the paper's rule).
"""

from __future__ import annotations

from collections.abc import Sequence

from sae_workbench.examples.records import Record, format_record, format_record_nonzero, nonzero_fraction

# Tree paper: repeat the records without zeros when fewer than 20% of values are non-zero.
SPARSE_REPEAT_FRACTION = 0.2


def format_examples(records: Sequence[Record], global_max: float) -> str:
    """Numbered records as token<TAB>value blocks, plus the zero-free repeat when values are sparse."""
    blocks = [f"Example {i + 1}:\n{format_record(r, global_max)}" for i, r in enumerate(records)]
    text = "\n\n".join(blocks)
    if nonzero_fraction(records, global_max) < SPARSE_REPEAT_FRACTION:
        repeat = [f"Example {i + 1}:\n{format_record_nonzero(r, global_max)}" for i, r in enumerate(records)]
        text += "\n\nThe same examples with the zero values removed:\n\n" + "\n\n".join(repeat)
    return text
