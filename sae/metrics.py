"""Core SAE quality metrics on held-out activations, and CE-loss / KL recovered by splicing the SAE into the model.

Every metric's direction is part of `METRICS` (and of the JSON written next to the SAE):

    metrics = evaluate_sae(sae, model, hook, held_out_batches)    # dict name -> value
    write_metrics(folder, metrics, config={...})                   # folder/metrics.json
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from sae_lens import SAE
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer

from sae_workbench import paths
from sae_workbench.corpus import Corpus, iter_windows
from sae_workbench.models import forward_to_hooks

METRICS_FILENAME = "metrics.json"
# A feature firing on more than 10% of tokens counts as dense (SAEBench's core eval uses the same cut-off).
DENSE_THRESHOLD = 0.1
DENSITY_BINS = 20
EVAL_BATCH_WINDOWS = 8
"""Held-out windows per forward pass (CE/KL keeps three (windows, T, vocab) logits tensors alive at once)."""


@dataclass(frozen=True)
class MetricInfo:
    """What a metric means and which way is better."""

    higher_is_better: bool | None
    """True/False, or None where neither direction is better (L0 is a budget, not a goal)."""
    doc: str
    """One-line definition."""


METRICS: dict[str, MetricInfo] = {
    "mse": MetricInfo(
        False, "mean over tokens of the squared L2 reconstruction error ‖x − x̂‖² (lower is better)"
    ),
    "explained_variance": MetricInfo(True, "1 − Σ‖x − x̂‖² / Σ‖x − mean(x)‖² (higher is better, 1 = perfect)"),
    "fvu": MetricInfo(False, "fraction of variance unexplained = 1 − explained_variance (lower is better)"),
    "cosine": MetricInfo(True, "mean cosine similarity of x and x̂ per token (higher is better)"),
    "l0": MetricInfo(None, "mean number of active features per token (a sparsity budget; lower = sparser)"),
    "l1": MetricInfo(None, "mean L1 norm of feature activations per token (lower = sparser)"),
    "dead_fraction": MetricInfo(
        False, "fraction of features that never fire on the held-out tokens (lower is better)"
    ),
    "dense_fraction": MetricInfo(
        False, f"fraction of features firing on > {DENSE_THRESHOLD:.0%} of tokens (lower is better)"
    ),
    "ce_loss_clean": MetricInfo(
        False, "model cross-entropy with clean activations (reference; lower is better)"
    ),
    "ce_loss_sae": MetricInfo(
        False, "cross-entropy with the SAE reconstruction spliced in (lower is better)"
    ),
    "ce_loss_zero": MetricInfo(
        False, "cross-entropy with the hook zero-ablated (reference; lower is better)"
    ),
    "ce_loss_recovered": MetricInfo(
        True, "(CE_zero − CE_sae) / (CE_zero − CE_clean) (higher is better, 1 = as good as clean)"
    ),
    "kl_sae": MetricInfo(
        False, "mean KL(clean ‖ SAE-spliced) next-token distribution per token (lower is better)"
    ),
    "kl_zero": MetricInfo(False, "mean KL(clean ‖ zero-ablated) per token (reference; lower is better)"),
    "kl_recovered": MetricInfo(True, "1 − KL_sae / KL_zero (higher is better, 1 = as good as clean)"),
    "n_tokens": MetricInfo(None, "held-out tokens evaluated (BOS and special positions excluded)"),
    "n_ce_tokens": MetricInfo(
        None, "predicting positions behind the CE/KL metrics (the first --ce-windows windows)"
    ),
}


def mse(x_ND: torch.Tensor, recon_ND: torch.Tensor) -> float:
    """Mean over tokens of ‖x − x̂‖² (lower is better)."""
    return float((x_ND - recon_ND).pow(2).sum(-1).mean())


def explained_variance(x_ND: torch.Tensor, recon_ND: torch.Tensor) -> float:
    """1 − Σ‖x − x̂‖² / Σ‖x − mean(x)‖² over tokens (higher is better)."""
    err = (x_ND - recon_ND).pow(2).sum()
    var = (x_ND - x_ND.mean(0)).pow(2).sum()
    return float(1 - err / var)


def cosine(x_ND: torch.Tensor, recon_ND: torch.Tensor) -> float:
    """Mean per-token cosine similarity of x and x̂ (higher is better)."""
    return float(F.cosine_similarity(x_ND, recon_ND, dim=-1).mean())


def l0(feats_NF: torch.Tensor) -> float:
    """Mean number of non-zero features per token (sparsity budget)."""
    return float((feats_NF != 0).float().sum(-1).mean())


def l1(feats_NF: torch.Tensor) -> float:
    """Mean L1 norm of the feature activations per token."""
    return float(feats_NF.abs().sum(-1).mean())


def feature_density(fire_counts_F: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """(F,) fraction of tokens on which each feature fired."""
    return fire_counts_F.float() / max(n_tokens, 1)


def dead_fraction(density_F: torch.Tensor) -> float:
    """Fraction of features that never fired (lower is better)."""
    return float((density_F == 0).float().mean())


def dense_fraction(density_F: torch.Tensor, threshold: float = DENSE_THRESHOLD) -> float:
    """Fraction of features firing on more than `threshold` of tokens (lower is better)."""
    return float((density_F > threshold).float().mean())


def density_histogram(density_F: torch.Tensor, bins: int = DENSITY_BINS, low: float = -8.0) -> dict[str, Any]:
    """Histogram of log10 feature density over [low, 0]; dead features are counted separately."""
    alive = density_F[density_F > 0]
    counts = (
        torch.histc(alive.log10().clamp(min=low), bins=bins, min=low, max=0.0)
        if len(alive)
        else torch.zeros(bins)
    )
    edges = torch.linspace(low, 0.0, bins + 1)
    return {
        "log10_edges": [round(float(e), 6) for e in edges],
        "counts": [int(c) for c in counts],
        "dead": int((density_F == 0).sum()),
    }


def kl_divergence(clean_logits_NV: torch.Tensor, other_logits_NV: torch.Tensor) -> torch.Tensor:
    """(N,) KL(clean ‖ other) of the next-token distributions."""
    clean_logp = clean_logits_NV.log_softmax(-1)
    return (clean_logp.exp() * (clean_logp - other_logits_NV.log_softmax(-1))).sum(-1)


def recovered(clean: float, sae: float, zero: float) -> float:
    """(zero − sae) / (zero − clean): 1 when the SAE is as good as clean, 0 when as bad as ablation."""
    denom = zero - clean
    return float((zero - sae) / denom) if abs(denom) > 1e-12 else math.nan


def _spliced_logits(
    model: HookedTransformer, tokens_BT: torch.Tensor, hook: str, mask_BT: torch.Tensor, replace: Any
) -> torch.Tensor:
    """Logits with the hook's activations replaced by `replace(acts)` at masked-in positions only (BOS untouched)."""

    def hook_fn(act: torch.Tensor, hook: Any) -> torch.Tensor:
        new = replace(act)
        return torch.where(mask_BT.unsqueeze(-1), new.to(act.dtype), act)

    return model.run_with_hooks(tokens_BT, fwd_hooks=[(hook, hook_fn)])


@dataclass
class _Sums:
    """Running float64 sums over held-out tokens, so no per-token tensor outlives its batch."""

    d_sae: int
    n: int = 0
    err: float = 0.0
    sq: float = 0.0
    cos: float = 0.0
    l0: float = 0.0
    l1: float = 0.0
    x_sum: torch.Tensor | None = None
    fire_counts: torch.Tensor | None = None
    n_pred: int = 0
    ce: dict[str, float] = field(default_factory=lambda: {"clean": 0.0, "sae": 0.0, "zero": 0.0})
    kl: dict[str, float] = field(default_factory=lambda: {"sae": 0.0, "zero": 0.0})

    def add_reconstruction(self, x_ND: torch.Tensor, feats_NF: torch.Tensor, recon_ND: torch.Tensor) -> None:
        """Accumulate MSE / EV / cosine / L0 / L1 / firing counts of one batch."""
        x64 = x_ND.double()
        self.n += x_ND.shape[0]
        self.err += float((x64 - recon_ND.double()).pow(2).sum())
        self.sq += float(x64.pow(2).sum())
        self.x_sum = x64.sum(0) if self.x_sum is None else self.x_sum + x64.sum(0)
        self.cos += float(F.cosine_similarity(x_ND, recon_ND, dim=-1).double().sum())
        active_NF = feats_NF != 0
        fired_F = active_NF.sum(0).double()
        self.fire_counts = fired_F if self.fire_counts is None else self.fire_counts + fired_F
        self.l0 += float(fired_F.sum())
        self.l1 += float(feats_NF.abs().double().sum())

    def explained_variance(self) -> float:
        """1 − Σ‖x − x̂‖² / Σ‖x − mean(x)‖², from the running sums (Σ‖x − μ‖² = Σ‖x‖² − N‖μ‖²)."""
        if not self.n or self.x_sum is None:
            return math.nan
        var = self.sq - float(self.x_sum.pow(2).sum()) / self.n
        return 1 - self.err / var if var > 0 else math.nan


def _ce_kl_into(
    sums: _Sums,
    clean_logp_NV: torch.Tensor,
    other_BTV: torch.Tensor,
    pred_BT: torch.Tensor,
    targets_N: torch.Tensor,
    name: str,
    chunk: int,
) -> None:
    """Add CE(other) and KL(clean ‖ other) over predicting positions, `chunk` positions at a time."""
    b_N, t_N = pred_BT.nonzero(as_tuple=True)  # row-major, the order of boolean-mask indexing
    for i in range(0, b_N.shape[0], chunk):
        other_logp = other_BTV[b_N[i : i + chunk], t_N[i : i + chunk]].float().log_softmax(-1)
        clean_logp = clean_logp_NV[i : i + chunk]
        tgt = targets_N[i : i + chunk]
        sums.ce[name] += float(-other_logp.gather(1, tgt[:, None]).double().sum())
        sums.kl[name] += float((clean_logp.exp() * (clean_logp - other_logp)).sum(-1).double().sum())


@torch.no_grad()
def evaluate_sae(
    sae: SAE[Any],
    model: HookedTransformer | None,
    hook: str,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    with_ce: bool = True,
    ce_windows: int | None = None,
    batch_windows: int = 8,
    total_windows: int | None = None,
    progress: bool = False,
    chunk_positions: int = 256,
) -> dict[str, Any]:
    """All metrics on held-out (tokens_BT, mask_BT) batches; mask False (BOS/special) positions are excluded.

    Reconstruction metrics use activations at masked-in positions of every window (a forward that stops right after
    the hook). CE/KL compare next-token predictions at masked-in positions with the SAE reconstruction spliced in,
    the hook zero-ablated, and clean activations — on the first `ce_windows` windows only (None: all; 0 or
    `with_ce=False`: none). Those windows take one clean pass (activations + logits together) and two spliced
    passes; each logits tensor is reduced to per-position CE/KL right away. Windows go through the model
    `batch_windows` at a time, whatever the batch size of `batches`.
    """
    if model is None:
        raise ValueError("evaluate_sae needs the model to read activations")
    sae.eval()
    ce_left = (ce_windows if ce_windows is not None else math.inf) if with_ce else 0
    device = next(model.parameters()).device
    sums = _Sums(sae.cfg.d_sae)
    bar = tqdm(total=total_windows, unit="win", desc="eval", disable=not progress)

    for big_tokens_BT, big_mask_BT in batches:
        for start in range(0, big_tokens_BT.shape[0], batch_windows):
            tokens_BT = big_tokens_BT[start : start + batch_windows].to(device)
            mask_BT = big_mask_BT[start : start + batch_windows].bool().to(device)
            n_ce = int(min(ce_left, tokens_BT.shape[0]))
            ce_left -= n_ce
            if n_ce:
                _eval_part(model, sae, sums, tokens_BT[:n_ce], mask_BT[:n_ce], hook, chunk_positions)
            if n_ce < tokens_BT.shape[0]:
                _eval_part(model, sae, sums, tokens_BT[n_ce:], mask_BT[n_ce:], hook, None)
            bar.update(tokens_BT.shape[0])
    bar.close()
    return _finish(sums, with_ce)


@torch.no_grad()
def evaluate_on_activations(sae: SAE[Any], batches: Iterable[torch.Tensor]) -> dict[str, Any]:
    """Reconstruction metrics (no CE/KL) on already-computed (N, d_in) activation rows, e.g. held-out cache shards."""
    sae.eval()
    sums = _Sums(sae.cfg.d_sae)
    for x_ND in batches:
        x_ND = x_ND.float()
        feats_NF = sae.encode(x_ND)
        sums.add_reconstruction(x_ND, feats_NF, sae.decode(feats_NF))
    return _finish(sums, with_ce=False)


def _eval_part(
    model: HookedTransformer,
    sae: SAE[Any],
    sums: _Sums,
    tokens_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    hook: str,
    ce_chunk: int | None,
) -> None:
    """Reconstruction sums for one batch; with `ce_chunk`, also CE/KL from the same (full) clean forward."""
    logits = None
    if ce_chunk is None:
        acts_BTD = forward_to_hooks(model, tokens_BT, [hook])[hook]
    else:  # the clean logits are needed too: one full forward that also keeps the hook's activations
        logits, cache = model.run_with_cache(tokens_BT, names_filter=[hook])
        acts_BTD = cache[hook]
        del cache
    x_ND = acts_BTD[mask_BT].float()
    del acts_BTD
    feats_NF = sae.encode(x_ND)
    sums.add_reconstruction(x_ND, feats_NF, sae.decode(feats_NF))
    if ce_chunk is not None:

        def reconstruct(act: torch.Tensor) -> torch.Tensor:
            return sae.decode(sae.encode(act.float()))

        # Predict token t+1 from position t, only where position t is a real (masked-in) token.
        clean_logp_NV = cast(torch.Tensor, logits)[:, :-1][mask_BT[:, :-1]].float()
        del logits  # only the predicting positions stay alive
        _splice_ce_kl(model, sums, clean_logp_NV, tokens_BT, mask_BT, hook, reconstruct, ce_chunk)


def _splice_ce_kl(
    model: HookedTransformer,
    sums: _Sums,
    clean_logp_NV: torch.Tensor,
    tokens_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    hook: str,
    reconstruct: Any,
    chunk: int,
) -> None:
    """CE of clean, SAE-spliced and zero-ablated forwards and the two KLs, for one batch of windows.

    `clean_logp_NV` holds the clean logits at predicting positions; it is turned into log-probabilities in place.
    """
    pred_BT = mask_BT[:, :-1]
    targets_N = tokens_BT[:, 1:][pred_BT]
    for i in range(0, clean_logp_NV.shape[0], chunk):  # in place: no second (N, V) tensor
        clean_logp_NV[i : i + chunk] = clean_logp_NV[i : i + chunk].log_softmax(-1)
    sums.ce["clean"] += float(-clean_logp_NV.gather(1, targets_N[:, None]).double().sum())
    for name, replace in (("sae", reconstruct), ("zero", torch.zeros_like)):
        other_BTV = _spliced_logits(model, tokens_BT, hook, mask_BT, replace)
        _ce_kl_into(sums, clean_logp_NV, other_BTV, pred_BT, targets_N, name, chunk)
        del other_BTV
    sums.n_pred += int(pred_BT.sum())


def _finish(sums: _Sums, with_ce: bool) -> dict[str, Any]:
    """The metrics dict from the running sums."""
    n = max(sums.n, 1)
    fire_counts = sums.fire_counts if sums.fire_counts is not None else torch.zeros(sums.d_sae)
    density_F = feature_density(fire_counts, sums.n)
    ev = sums.explained_variance()
    out: dict[str, Any] = {
        "mse": sums.err / n,
        "explained_variance": ev,
        "cosine": sums.cos / n,
        "l0": sums.l0 / n,
        "l1": sums.l1 / n,
        "dead_fraction": dead_fraction(density_F),
        "dense_fraction": dense_fraction(density_F),
        "n_tokens": sums.n,
    }
    out["fvu"] = 1 - ev
    if with_ce and sums.n_pred:
        c = {k: v / sums.n_pred for k, v in sums.ce.items()}
        out.update({"ce_loss_clean": c["clean"], "ce_loss_sae": c["sae"], "ce_loss_zero": c["zero"]})
        out["ce_loss_recovered"] = recovered(c["clean"], c["sae"], c["zero"])
        out["kl_sae"], out["kl_zero"] = sums.kl["sae"] / sums.n_pred, sums.kl["zero"] / sums.n_pred
        out["kl_recovered"] = 1 - out["kl_sae"] / out["kl_zero"] if out["kl_zero"] > 0 else math.nan
        out["n_ce_tokens"] = sums.n_pred
    out["density_histogram"] = density_histogram(density_F)
    return out


def write_metrics(folder: Path, metrics: dict[str, Any], config: dict[str, Any]) -> Path:
    """Write metrics.json next to the SAE: values, each metric's direction and definition, and the eval config."""
    directions = {
        name: {"higher_is_better": METRICS[name].higher_is_better, "doc": METRICS[name].doc}
        for name in metrics
        if name in METRICS
    }
    payload = {"metrics": metrics, "directions": directions, "eval_config": config}
    path = Path(folder) / METRICS_FILENAME
    paths.atomic_write_bytes(path, json.dumps(payload, indent=1, allow_nan=True).encode())
    return path


def read_metrics(source: str | Path) -> dict[str, Any] | None:
    """The metric values `write_metrics` stored next to an SAE, or None when `source` is not a folder that has them."""
    path = Path(source).expanduser() / METRICS_FILENAME
    if not path.is_file():
        return None
    metrics = json.loads(path.read_text()).get("metrics")
    return metrics if isinstance(metrics, dict) else None


def held_out_metrics(
    sae: SAE[Any],
    model: HookedTransformer,
    hook: str,
    corpus: Corpus,
    *,
    context_size: int,
    bos_id: int,
    first_window: int,
    n_windows: int,
    ce_windows: int,
    progress: bool = False,
) -> dict[str, Any]:
    """`evaluate_sae` on `n_windows` corpus windows from `first_window` on (BOS/special positions masked), CE/KL on
    the first `ce_windows` of them."""
    assert model.tokenizer is not None, "the model needs a tokenizer to cut windows"
    batches = (
        (torch.from_numpy(b.tokens_BT).long(), torch.from_numpy(b.mask_BT))
        for b in iter_windows(
            corpus,
            model.tokenizer,
            context_size,
            bos_id=bos_id,
            batch_size=EVAL_BATCH_WINDOWS,
            start_window=first_window,
            n_tokens=(first_window + n_windows) * context_size,
            decode=False,
        )
    )
    return evaluate_sae(
        sae,
        model,
        hook,
        batches,
        ce_windows=min(ce_windows, n_windows),
        batch_windows=EVAL_BATCH_WINDOWS,
        total_windows=n_windows,
        progress=progress,
    )
