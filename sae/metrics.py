"""Core SAE quality metrics on held-out activations, and CE-loss / KL recovered by splicing the SAE into the model.

Every metric's direction is part of `METRICS` (and of the JSON written next to the SAE):

    metrics = evaluate_sae(sae, model, hook, held_out_batches)    # dict name -> value
    write_metrics(folder, metrics, config={...})                   # folder/metrics.json
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from sae_lens import SAE
from transformer_lens import HookedTransformer

from workbench import paths

METRICS_FILENAME = "metrics.json"
# A feature firing on more than 10% of tokens counts as dense (SAEBench's core eval uses the same cut-off).
DENSE_THRESHOLD = 0.1
DENSITY_BINS = 20


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


@torch.no_grad()
def evaluate_sae(
    sae: SAE[Any],
    model: HookedTransformer | None,
    hook: str,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    with_ce: bool = True,
) -> dict[str, Any]:
    """All metrics on held-out (tokens_BT, mask_BT) batches; mask False (BOS/special) positions are excluded.

    Reconstruction metrics use activations at masked-in positions. CE/KL compare next-token predictions at
    masked-in positions with the SAE reconstruction spliced in, the hook zero-ablated, and clean activations.
    """
    assert model is not None, "evaluate_sae needs the model to read activations"
    sae.eval()
    xs, recons, fire_counts = [], [], torch.zeros(sae.cfg.d_sae)
    l1_sum, l0_sum, n = 0.0, 0.0, 0
    ce = {"clean": 0.0, "sae": 0.0, "zero": 0.0}
    kl = {"sae": 0.0, "zero": 0.0}
    n_pred = 0
    for tokens_BT, mask_BT in batches:
        mask_BT = mask_BT.bool()
        _, cache = model.run_with_cache(tokens_BT, names_filter=[hook])
        acts_BTD = cache[hook]
        x_ND = acts_BTD[mask_BT].float()
        feats_NF = sae.encode(x_ND)
        recon_ND = sae.decode(feats_NF)
        xs.append(x_ND)
        recons.append(recon_ND)
        fire_counts += (feats_NF != 0).sum(0).float()
        l0_sum += float((feats_NF != 0).float().sum())
        l1_sum += float(feats_NF.abs().sum())
        n += x_ND.shape[0]
        if not with_ce:
            continue
        clean_BTV = model(tokens_BT)

        def with_sae(act: torch.Tensor) -> torch.Tensor:
            return sae.decode(sae.encode(act.float()))

        sae_BTV = _spliced_logits(model, tokens_BT, hook, mask_BT, with_sae)
        zero_BTV = _spliced_logits(model, tokens_BT, hook, mask_BT, torch.zeros_like)
        # Predict token t+1 from position t, only where position t is a real (masked-in) token.
        pred_BT = mask_BT[:, :-1]
        targets_N = tokens_BT[:, 1:][pred_BT]
        for name, logits in (("clean", clean_BTV), ("sae", sae_BTV), ("zero", zero_BTV)):
            ce[name] += float(F.cross_entropy(logits[:, :-1][pred_BT].float(), targets_N, reduction="sum"))
        clean_NV = clean_BTV[:, :-1][pred_BT].float()
        kl["sae"] += float(kl_divergence(clean_NV, sae_BTV[:, :-1][pred_BT].float()).sum())
        kl["zero"] += float(kl_divergence(clean_NV, zero_BTV[:, :-1][pred_BT].float()).sum())
        n_pred += int(pred_BT.sum())
    x_all, r_all = torch.cat(xs), torch.cat(recons)
    density_F = feature_density(fire_counts, n)
    out: dict[str, Any] = {
        "mse": mse(x_all, r_all),
        "explained_variance": explained_variance(x_all, r_all),
        "cosine": cosine(x_all, r_all),
        "l0": l0_sum / max(n, 1),
        "l1": l1_sum / max(n, 1),
        "dead_fraction": dead_fraction(density_F),
        "dense_fraction": dense_fraction(density_F),
        "n_tokens": n,
    }
    out["fvu"] = 1 - out["explained_variance"]
    if with_ce and n_pred:
        c = {k: v / n_pred for k, v in ce.items()}
        out.update({"ce_loss_clean": c["clean"], "ce_loss_sae": c["sae"], "ce_loss_zero": c["zero"]})
        out["ce_loss_recovered"] = recovered(c["clean"], c["sae"], c["zero"])
        out["kl_sae"], out["kl_zero"] = kl["sae"] / n_pred, kl["zero"] / n_pred
        out["kl_recovered"] = 1 - out["kl_sae"] / out["kl_zero"] if out["kl_zero"] > 0 else math.nan
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
