"""The options of one split configuration (`examples.testsets.SplitConfig`) that `workbench score` reads: given, they
override each explanation's own; not given (None), each explanation is scored on the split it was explained on.
`split_config` builds the ONE `SplitConfig` of a command (explain and score). Re-exported by `cli.options`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sae_workbench import defaults

if TYPE_CHECKING:
    from sae_workbench.examples.testsets import SplitConfig


def optional_source_name(value: str | None) -> str | None:
    """`--negatives` in the `NegativeSource` spelling (any case); None (not given) stays None."""
    return None if value is None else value.strip().upper()


ScoreNegatives = Annotated[
    str | None,
    typer.Option(
        "--negatives",
        callback=optional_source_name,
        help="Negative source of the test third scored, in any case: random, random_negative, similar or "
        "similar_negative. Default: each explanation's own (the split it was explained on; similar_negative where "
        "it records none); given, it overrides them and score says so (unused by cosy, polysemanticity, complexity).",
    ),
]
ScoreRecordLen = Annotated[
    int | None,
    typer.Option(
        "--record-len",
        "--record-length",
        help="Tokens per test record, around each peak. Default: each explanation's own record length (what its "
        "author was shown; tree paper: 32); given, it overrides them and score says so; 0 = whole windows.",
    ),
]


def split_config(
    negatives: str | None, seed: int, record_len: int | None, per_split: int = defaults.PER_SPLIT
) -> SplitConfig:
    """The ONE split configuration of a command (record length, negatives, seed, embedding crop, split sizes),
    built here and nested in the explain and the score configuration. `negatives` None: the default source;
    `record_len` 0 or None: whole windows; the embedding crop follows the record length (what is shown is what is
    embedded)."""
    from sae_workbench.examples.sampling import NegativeSource
    from sae_workbench.examples.testsets import SplitConfig

    length = record_len or None
    return SplitConfig(negatives=NegativeSource(negatives or defaults.NEGATIVES), per_split=per_split, seed=seed,
                       embed_crop=length, record_length=length)  # fmt: skip
