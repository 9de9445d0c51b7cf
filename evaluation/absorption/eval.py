"""Feature absorption on the first-letter task, with SAEBench's definitions and output names.

Paper: Chanin et al., "A is for Absorption: Studying Feature Splitting and Absorption in Sparse Autoencoders",
arXiv 2409.14507 (NeurIPS 2025). Reference implementation: SAEBench's ``sae_bench/evals/absorption``
(``feature_absorption_calculator.py`` and ``main.py``); every threshold below is SAEBench's default.

    acts = collect_probe_activations(model, ProbingConfig(layer=3))   # evaluation/absorption/probes.py (cached)
    result = run_absorption(sae, acts, AbsorptionConfig())
    result.metrics.mean_absorption_fraction_score

Definitions (p = unit probe direction, a = resid·p, a feature's projection = activation × cos(decoder row, p),
activations taken with decoder norms folded in, i.e. activation × ‖decoder row‖):
- full absorption (per probe true positive): every main feature is zero, the top projecting feature has
  cos ≥ 0.025, a ≥ 0, and that feature's projection / a ≥ 0.4;
- absorption fraction: M = Σ main projections; absorbers = other features with cos ≥ 0.1 and positive projection,
  A = sum of the top 3; fraction = 0 if M ≥ a or A/a < 0.4; 1 if M ≤ 0; else x/(x+M), x = min(A, a − M), in [0, 1];
- per letter: sums / number of probe true positives; means over letters whose probe F1 > 0.6.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.absorption.probes import (
    F1_JUMP_THRESHOLD,
    LETTERS,
    MAX_K,
    ProbeActivations,
    ProbingConfig,
    collect_probe_activations,
    k_sparse_probing,
    sae_feature_acts,
    train_letter_probes,
)
from sae_workbench.model_identity import check_model_identity
from sae_workbench.sae.io import recorded_fingerprint, recorded_model

log = logging.getLogger(__name__)

# SAEBench feature_absorption_calculator.py: activations below this count as "not firing".
EPS = 1e-8


class ProbeTooWeakError(WorkbenchError):
    """Too few first-letter probes reach the F1 needed to evaluate absorption."""


class SAEMismatchError(WorkbenchError):
    """The SAE was not trained on the model/hook being probed."""


@dataclass(frozen=True)
class AbsorptionThresholds:
    """SAEBench's absorption thresholds (feature_absorption.py constants)."""

    full_absorption_cos: float = 0.025
    """Full absorption: the top projecting feature's decoder must have at least this cosine with the probe."""
    fraction_cos: float = 0.1
    """Absorption fraction: candidate absorbers must have at least this decoder cosine with the probe."""
    projection_proportion: float = 0.4
    """Both metrics: absorbers must explain at least this share of the probe projection a."""
    max_absorbers: int = 3
    """Absorption fraction: at most this many absorbers are summed (A = sum of the top ones)."""
    top_features: int = 10
    """Features recorded per word, ranked by projection (SAEBench topk_feats)."""


@dataclass(frozen=True)
class WordAbsorption:
    """Absorption of one probe true positive (one word token of the first-letter task)."""

    word: str
    letter: str
    probe_projection: float
    main_feature_acts: list[float]
    absorption_fraction: float
    is_full_absorption: bool
    absorbing_feature_ids: list[int]
    """Features counted as absorbers for this word (top ≤3 for the fraction, or the top one for full absorption)."""
    top_feature_ids: list[int]
    top_feature_projections: list[float]
    top_feature_cos: list[float]


@dataclass(frozen=True)
class LetterAbsorption:
    """Per-letter result (SAEBench AbsorptionResultDetail plus the probe F1 and the main features)."""

    first_letter: str
    probe_f1: float
    included: bool
    """Whether the probe F1 exceeds the threshold, i.e. the letter counts in the means."""
    main_feature_ids: list[int]
    num_split_features: int
    num_probe_true_positives: int
    num_full_absorption: int
    mean_absorption_fraction: float
    full_absorption_rate: float


@dataclass(frozen=True)
class AbsorptionMetrics:
    """SAEBench's absorption metrics (eval_result_metrics["mean"])."""

    mean_absorption_fraction_score: float
    mean_full_absorption_score: float
    mean_num_split_features: float
    std_dev_absorption_fraction_score: float
    std_dev_full_absorption_score: float
    std_dev_num_split_features: float


@dataclass(frozen=True)
class AbsorbingFeature:
    """One feature that absorbs a letter: on which tokens, and how much."""

    feature_id: int
    letter: str
    num_tokens: int
    tokens: list[str]
    mean_absorption_fraction: float


@dataclass(frozen=True)
class AbsorptionResult:
    """Everything one absorption run produces: metrics, per-letter, per-word and per-feature details."""

    metrics: AbsorptionMetrics
    letters: list[LetterAbsorption]
    words: list[WordAbsorption]
    absorbing_features: list[AbsorbingFeature] = field(default_factory=list)


def absorption_fraction(
    probe_projection: float,
    main_projection: float,
    absorber_projection: float,
    projection_proportion: float = 0.4,
) -> float:
    """SAEBench's absorption fraction from a, M (main features' projection) and A (top absorbers' projection).

    a ≤ 0 gives 0 (SAEBench divides by a; with a ≤ 0 every branch it can reach yields 0, and a = 0 would raise).
    """
    a, m, big_a = probe_projection, main_projection, absorber_projection
    if a <= 0 or m >= a or big_a / a < projection_proportion:
        return 0.0
    if m <= 0.0:
        return 1.0
    x = min(big_a, a - m)
    return float(np.clip(x / (x + m), 0.0, 1.0))


def is_full_absorption(
    probe_projection: float,
    main_acts: list[float],
    top_projection: float,
    top_cos: float,
    thresholds: AbsorptionThresholds = AbsorptionThresholds(),
) -> bool:
    """SAEBench's full absorption: mains silent, top feature aligned, a ≥ 0, top projection ≥ 0.4·a."""
    if any(act >= EPS for act in main_acts):
        return False
    if top_cos < thresholds.full_absorption_cos:
        return False
    if probe_projection < 0:
        return False
    if probe_projection == 0:
        return False  # SAEBench would divide by zero here; no probe signal means nothing to absorb
    return top_projection / probe_projection >= thresholds.projection_proportion


def decoder_probe_cos(W_dec_FD: torch.Tensor, probe_D: torch.Tensor) -> torch.Tensor:
    """Cosine of every decoder row with the probe direction, shape (F,)."""
    return torch.nn.functional.cosine_similarity(W_dec_FD.float(), probe_D.float()[None, :], dim=-1)


def score_words(
    acts_NF: torch.Tensor,
    probe_proj_N: torch.Tensor,
    cos_F: torch.Tensor,
    main_ids: list[int],
    words: list[str],
    letter: str,
    thresholds: AbsorptionThresholds = AbsorptionThresholds(),
) -> list[WordAbsorption]:
    """Absorption of each word from its folded SAE activations and its residual's probe projection a."""
    acts_NF = acts_NF.float()
    cos_F = cos_F.float()
    proj_NF = acts_NF * cos_F[None, :]
    n_features = acts_NF.shape[1]
    main_mask_F = torch.zeros(n_features, dtype=torch.bool)
    main_mask_F[main_ids] = True
    candidate_F = (~main_mask_F) & (cos_F >= thresholds.fraction_cos)
    k_top = min(thresholds.top_features, n_features)
    top_vals_NK, top_ids_NK = proj_NF.topk(k_top, dim=-1)
    cand_proj_NF = torch.where(candidate_F[None, :] & (proj_NF > 0), proj_NF, torch.zeros_like(proj_NF))
    k_abs = min(thresholds.max_absorbers, n_features)
    abs_vals_NK, abs_ids_NK = cand_proj_NF.topk(k_abs, dim=-1)
    main_proj_N = proj_NF[:, main_ids].sum(-1) if main_ids else torch.zeros(acts_NF.shape[0])
    out: list[WordAbsorption] = []
    for i, word in enumerate(words):
        a = float(probe_proj_N[i])
        m = float(main_proj_N[i])
        big_a = float(abs_vals_NK[i].sum())
        fraction = absorption_fraction(a, m, big_a, thresholds.projection_proportion)
        main_acts = [float(acts_NF[i, j]) for j in main_ids]
        full = is_full_absorption(
            a, main_acts, float(top_vals_NK[i, 0]), float(cos_F[top_ids_NK[i, 0]]), thresholds
        )
        if full:
            absorbers = [int(top_ids_NK[i, 0])]
        elif fraction > 0:
            absorbers = [int(j) for j, v in zip(abs_ids_NK[i], abs_vals_NK[i], strict=True) if float(v) > 0]
        else:
            absorbers = []
        top_ids = [int(j) for j in top_ids_NK[i]]
        out.append(
            WordAbsorption(
                word=word,
                letter=letter,
                probe_projection=a,
                main_feature_acts=main_acts,
                absorption_fraction=fraction,
                is_full_absorption=full,
                absorbing_feature_ids=absorbers,
                top_feature_ids=top_ids,
                top_feature_projections=[float(v) for v in top_vals_NK[i]],
                top_feature_cos=[float(cos_F[j]) for j in top_ids],
            )
        )
    return out


def letter_summary(
    letter: str, probe_f1: float, main_ids: list[int], words: list[WordAbsorption], min_probe_f1: float = 0.6
) -> LetterAbsorption:
    """SAEBench's per-letter aggregate: sums over probe true positives divided by their number."""
    n = len(words)
    n_full = sum(w.is_full_absorption for w in words)
    total_fraction = sum(w.absorption_fraction for w in words)
    return LetterAbsorption(
        first_letter=letter,
        probe_f1=probe_f1,
        # SAEBench main.py: a letter counts when f1_probe > min_GT_probe_f1 and it has probe true positives.
        included=probe_f1 > min_probe_f1 and n > 0,
        main_feature_ids=list(main_ids),
        # SAEBench main.py reports len(split_feats) as num_split_features in its output.
        num_split_features=len(main_ids),
        num_probe_true_positives=n,
        num_full_absorption=n_full,
        mean_absorption_fraction=total_fraction / n if n else 0.0,
        full_absorption_rate=n_full / n if n else 0.0,
    )


def _stdev(values: list[float]) -> float:
    """Sample standard deviation (statistics.stdev, as SAEBench), 0 for fewer than two values."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def aggregate_letters(letters: list[LetterAbsorption], min_letters: int = 20) -> AbsorptionMetrics:
    """Means over the included letters; refuse when fewer than `min_letters` qualify (SAEBench: 20)."""
    included = [x for x in letters if x.included]
    if len(included) < max(min_letters, 1):
        f1s = ", ".join(f"{x.first_letter}={x.probe_f1:.2f}" for x in letters)
        raise ProbeTooWeakError(
            f"only {len(included)} first-letter probes have F1 above the threshold (need {max(min_letters, 1)}); "
            f"probe F1 per letter: {f1s}. Use more words (≥ 20k; --max-words), another layer (--layer), "
            "or lower --min-letters."
        )
    fractions = [x.mean_absorption_fraction for x in included]
    fulls = [x.full_absorption_rate for x in included]
    splits = [float(x.num_split_features) for x in included]
    return AbsorptionMetrics(
        mean_absorption_fraction_score=statistics.mean(fractions),
        mean_full_absorption_score=statistics.mean(fulls),
        mean_num_split_features=statistics.mean(splits),
        std_dev_absorption_fraction_score=_stdev(fractions),
        std_dev_full_absorption_score=_stdev(fulls),
        std_dev_num_split_features=_stdev(splits),
    )


def absorbing_features(words: list[WordAbsorption], max_tokens: int = 50) -> list[AbsorbingFeature]:
    """Which feature absorbs which letter, on which tokens (for the browser), most tokens first."""
    groups: dict[tuple[int, str], list[WordAbsorption]] = {}
    for w in words:
        for fid in w.absorbing_feature_ids:
            groups.setdefault((fid, w.letter), []).append(w)
    out = [
        AbsorbingFeature(
            feature_id=fid,
            letter=letter,
            num_tokens=len(ws),
            tokens=[w.word for w in ws[:max_tokens]],
            mean_absorption_fraction=sum(w.absorption_fraction for w in ws) / len(ws),
        )
        for (fid, letter), ws in groups.items()
    ]
    return sorted(out, key=lambda f: (-f.num_tokens, f.letter, f.feature_id))


ABSORPTION_PRESETS = ("default", "paper")
"""Names `AbsorptionConfig.preset` takes (`workbench absorption --preset`)."""


class AbsorptionPresetError(WorkbenchError):
    """Unknown absorption preset."""


@dataclass(frozen=True)
class AbsorptionConfig:
    """Settings of one absorption run (defaults: SAEBench's AbsorptionEvalConfig, except 5 ICL examples instead of
    10 to halve CPU time; `paper()` is SAEBench's throughout)."""

    probing: ProbingConfig = field(default_factory=ProbingConfig)
    """How the first-letter data is built and the residual probes trained."""
    thresholds: AbsorptionThresholds = field(default_factory=AbsorptionThresholds)
    """Full-absorption and absorption-fraction thresholds."""
    min_probe_f1: float = 0.6
    """A letter counts only if its residual probe's test F1 exceeds this (SAEBench min_GT_probe_f1)."""
    min_letters: int = 20
    """Refuse to report when fewer letters qualify (SAEBench min_feats_for_eval)."""
    max_k: int = MAX_K
    """Largest k of the k-sparse probes (SAEBench max_k_value)."""
    f1_jump_threshold: float = F1_JUMP_THRESHOLD
    """τ: main features grow with k while k-sparse F1 rises by more than this (SAEBench f1_jump_threshold)."""
    k_sparse_l1_decay: float = 0.01
    """L1 strength of the probe that ranks SAE features (SAEBench k_sparse_probe_l1_decay)."""
    k_sparse_epochs: int = 50
    """Epochs of that probe (SAEBench k_sparse_probe_num_epochs)."""
    preset: str = "default"
    """Which preset these settings come from ('default' or 'paper'); recorded with the result."""

    @classmethod
    def paper(cls) -> AbsorptionConfig:
        """SAEBench's settings: 10 ICL examples per prompt (its absorption prompts, feature_absorption.py, use
        max_icl_examples=10), letter probes at batch 64 for 50 epochs (common.py train_and_save_probes), and the
        AbsorptionEvalConfig thresholds (our defaults already). Absorption is still read from the probes' test
        prompts, not from freshly drawn ones (see `evaluate_absorption`)."""
        return cls(probing=ProbingConfig(n_icl_examples=10, probe_batch_size=64), preset="paper")

    @classmethod
    def named(cls, preset: str) -> AbsorptionConfig:
        """The settings of a preset by name (AbsorptionPresetError for an unknown one)."""
        if preset == "default":
            return cls()
        if preset == "paper":
            return cls.paper()
        raise AbsorptionPresetError(
            f"unknown absorption preset {preset!r}; choose one of {', '.join(ABSORPTION_PRESETS)}"
        )


def check_sae_fits_probe(sae: Any, model: Any, hook: str, force_model: bool = False) -> None:
    """Raise SAEMismatchError when the SAE's width or hook does not fit the probed residual, ModelMismatchError when
    it records another model (aliases accepted; `force_model` warns instead, see `sae_workbench.model_identity`)."""
    d_in = int(sae.W_dec.shape[1])
    if d_in != model.cfg.d_model:
        raise SAEMismatchError(
            f"SAE d_in={d_in} but {hook} of {model.cfg.model_name!r} has d_model={model.cfg.d_model}; "
            "pass the SAE trained on this model (or --model/--layer that match the SAE)."
        )
    meta = getattr(sae.cfg, "metadata", None)
    sae_hook = getattr(meta, "hook_name", None)
    if sae_hook and sae_hook != hook:
        raise SAEMismatchError(
            f"SAE was trained on {sae_hook} but absorption would probe {hook}; pass --layer to match."
        )
    check_model_identity(recorded_model(sae), model, fingerprint=recorded_fingerprint(sae), force=force_model)


def evaluate_absorption(
    sae: Any, acts: ProbeActivations, cfg: AbsorptionConfig = AbsorptionConfig(), progress: bool = False
) -> AbsorptionResult:
    """Probe, refuse when probes are weak, k-sparse-probe the SAE, and score absorption on probe true positives.

    Absorption is read from the same test prompts the probes are evaluated on (SAEBench re-prompts the same test
    words with fresh ICL examples; reusing the cached residuals saves a second pass of the model).
    """
    probes = train_letter_probes(acts, cfg.probing, progress)
    qualifying = sum(f1 > cfg.min_probe_f1 for f1 in probes.f1)
    if qualifying < cfg.min_letters:
        f1s = ", ".join(f"{c}={f:.2f}" for c, f in zip(LETTERS, probes.f1, strict=True))
        raise ProbeTooWeakError(
            f"only {qualifying} first-letter probes have F1 > {cfg.min_probe_f1} (need {cfg.min_letters}); "
            f"probe F1 per letter: {f1s}. Use more words (≥ 20k; --max-words), another layer (--layer), "
            "or lower --min-letters."
        )
    train_acts = sae_feature_acts(sae, acts.train_resid_ND, progress=progress)
    test_acts = sae_feature_acts(sae, acts.test_resid_ND, progress=progress)
    ksparse = k_sparse_probing(
        train_acts, acts.train_labels, test_acts, acts.test_labels,
        max_k=cfg.max_k, tau=cfg.f1_jump_threshold, l1_decay=cfg.k_sparse_l1_decay, epochs=cfg.k_sparse_epochs,
        seed=cfg.probing.seed, progress=progress,
    )  # fmt: skip
    W_dec_FD = sae.W_dec.detach().float().cpu()
    letters, words = [], []
    for li, letter in enumerate(LETTERS):
        probe_D = torch.from_numpy(probes.weights_LD[li]).float()
        probe_D = probe_D / probe_D.norm()
        tp = np.nonzero((acts.test_labels == li) & (probes.test_scores_NL[:, li] > 0))[0]
        main_ids = ksparse[li].main_feature_ids
        letter_words = score_words(
            torch.from_numpy(test_acts[tp].toarray()),
            torch.from_numpy(acts.test_resid_ND[tp]).float() @ probe_D,
            decoder_probe_cos(W_dec_FD, probe_D),
            main_ids,
            [acts.test_words[i] for i in tp],
            letter,
            cfg.thresholds,
        )
        letters.append(letter_summary(letter, probes.f1[li], main_ids, letter_words, cfg.min_probe_f1))
        words.extend(letter_words)
    metrics = aggregate_letters(letters, cfg.min_letters)
    return AbsorptionResult(metrics, letters, words, absorbing_features(words))


def run_absorption(
    model: Any,
    sae: Any,
    cfg: AbsorptionConfig = AbsorptionConfig(),
    *,
    force_model: bool = False,
    progress: bool = False,
) -> AbsorptionResult:
    """The whole eval: check the SAE fits (`force_model`: another model only warns), collect (or load cached) probe
    activations, evaluate; `progress` shows a bar for every step."""
    check_sae_fits_probe(sae, model, cfg.probing.hook(), force_model)
    acts = collect_probe_activations(model, cfg.probing, progress)
    return evaluate_absorption(sae, acts, cfg, progress)
