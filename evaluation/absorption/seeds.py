"""Absorption's spread over seeds: per-letter and SAE-level means with Student-t intervals (issue 33 item 7).

One absorption run depends on its seed (`ProbingConfig.seed`, SAEBench's random_seed), which picks
- the words: the seeded shuffle before the 80/20 train/test split (and, under --max-words, which words are kept),
  so each seed scores absorption on a different fifth of the vocabulary;
- the in-context examples of every prompt (so the residuals read at each word change too);
- the initialisation and batch order of the 26 letter probes (the probe directions and which test words are probe
  true positives), and of the L1 probe on SAE features that ranks the k-sparse candidates (the main features).
It does not change the model, the SAE, the vocabulary or any threshold. An interval over seeds therefore covers the
probe and word-sample randomness of the eval, not the corpus or the SAE's own training noise.

    spread = seed_spread({0: run0.letters, 1: run1.letters, 2: run2.letters})
    spread.mean_absorption_fraction_score  # MeanCI over the three runs' SAE-level means
    spread.letters[0].absorption_fraction  # letter a: MeanCI over the seeds in which a was included
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.absorption.eval import AbsorptionMetrics, LetterAbsorption, aggregate_letters
from sae_workbench.evaluation.absorption.probes import LETTERS
from sae_workbench.stats import MeanCI, t_confidence_interval

CONFIDENCE = 0.95
"""Two-sided level of every interval over seeds (Student-t, n − 1 degrees of freedom)."""


class SeedSpreadError(WorkbenchError):
    """Seeds that cannot be summarised (none given, or a seed with no included letter)."""


@dataclass(frozen=True)
class LetterSpread:
    """One letter over seeds: each figure's mean and interval over the seeds in which the letter was included."""

    first_letter: str
    n_seeds: int
    """Seeds in which the letter was included (probe F1 above the threshold and ≥ 1 probe true positive)."""
    of_seeds: int
    """Seeds run; a letter with n_seeds < of_seeds is averaged over its n_seeds only and must be read so."""
    absorption_fraction: MeanCI
    full_absorption_rate: MeanCI
    num_split_features: MeanCI
    probe_f1: MeanCI
    """Residual probe's test F1, over every seed that lists the letter (included or not)."""


@dataclass(frozen=True)
class SeedSpread:
    """Absorption over several seeds: per letter and SAE-level, each a mean with its interval over seeds."""

    seeds: list[int]
    confidence: float
    letters: list[LetterSpread]
    mean_absorption_fraction_score: MeanCI
    """Interval over the seeds' SAE-level means (each a mean over that seed's included letters, as SAEBench)."""
    mean_full_absorption_score: MeanCI
    mean_num_split_features: MeanCI
    per_seed: dict[int, AbsorptionMetrics]
    """Each seed's own SAE-level metrics (what its single-run document reports)."""


def seed_spread(
    letters_by_seed: Mapping[int, Sequence[LetterAbsorption]],
    confidence: float = CONFIDENCE,
) -> SeedSpread:
    """Summarise per-seed absorption runs: per letter and SAE-level means with Student-t intervals over seeds.

    A letter's figures come from the seeds in which it was included; its `n_seeds` says how many. The SAE-level
    figures take each seed's mean over its included letters (`aggregate_letters`, the single-run numbers) and put an
    interval over those. Letters are listed a..z, then any other letter a run names.
    """
    if not letters_by_seed:
        raise SeedSpreadError("no seeds to summarise")
    seeds = list(letters_by_seed)
    per_seed: dict[int, AbsorptionMetrics] = {}
    for seed, letters in letters_by_seed.items():
        if not any(x.included for x in letters):
            raise SeedSpreadError(f"seed {seed} has no included letter; its run reports no absorption")
        per_seed[seed] = aggregate_letters(list(letters), min_letters=1)
    named = {x.first_letter for letters in letters_by_seed.values() for x in letters}
    order = [c for c in LETTERS if c in named] + sorted(named - set(LETTERS))
    spreads = []
    for letter in order:
        rows = [x for letters in letters_by_seed.values() for x in letters if x.first_letter == letter]
        kept = [x for x in rows if x.included]
        spreads.append(
            LetterSpread(
                first_letter=letter,
                n_seeds=len(kept),
                of_seeds=len(seeds),
                absorption_fraction=t_confidence_interval(
                    [x.mean_absorption_fraction for x in kept], confidence
                ),
                full_absorption_rate=t_confidence_interval(
                    [x.full_absorption_rate for x in kept], confidence
                ),
                num_split_features=t_confidence_interval(
                    [float(x.num_split_features) for x in kept], confidence
                ),
                probe_f1=t_confidence_interval([x.probe_f1 for x in rows], confidence),
            )
        )
    metrics = list(per_seed.values())
    return SeedSpread(
        seeds=seeds,
        confidence=confidence,
        letters=spreads,
        mean_absorption_fraction_score=t_confidence_interval(
            [m.mean_absorption_fraction_score for m in metrics], confidence
        ),
        mean_full_absorption_score=t_confidence_interval(
            [m.mean_full_absorption_score for m in metrics], confidence
        ),
        mean_num_split_features=t_confidence_interval(
            [m.mean_num_split_features for m in metrics], confidence
        ),
        per_seed=per_seed,
    )


def format_ci(ci: MeanCI, digits: int = 3) -> str:
    """'0.182 [0.101, 0.263]'; a single value shows '(1 seed)' and no value '—'."""
    if ci.n == 0:
        return "—"
    if ci.n < 2:
        return f"{ci.mean:.{digits}f} (1 seed)"
    return f"{ci.mean:.{digits}f} [{ci.low:.{digits}f}, {ci.high:.{digits}f}]"


def spread_table(spread: SeedSpread) -> list[str]:
    """The summary as printed lines: one per letter, then the SAE-level means (interval = the spread's level)."""
    level = f"{spread.confidence:.0%}"
    lines = [
        f"absorption over seeds {','.join(map(str, spread.seeds))}: mean [{level} Student-t interval over seeds]",
        f"{'letter':6s} {'seeds':>5s}  {'absorption fraction':24s} {'full absorption':24s} {'split features':20s}",
    ]
    for x in spread.letters:
        note = "" if x.n_seeds == x.of_seeds else "  (included in fewer seeds: averaged over those only)"
        lines.append(
            f"{x.first_letter:6s} {x.n_seeds:>2d}/{x.of_seeds:<2d}  {format_ci(x.absorption_fraction):24s} "
            f"{format_ci(x.full_absorption_rate):24s} {format_ci(x.num_split_features, 2):20s}{note}"
        )
    lines.append(
        f"SAE mean_absorption_fraction_score={format_ci(spread.mean_absorption_fraction_score, 4)} "
        f"mean_full_absorption_score={format_ci(spread.mean_full_absorption_score, 4)} "
        f"mean_num_split_features={format_ci(spread.mean_num_split_features, 2)}"
    )
    return lines
