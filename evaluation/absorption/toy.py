"""The toy model of feature absorption (Chanin et al., arXiv 2409.14507, section "Toy model").

Four true features are orthogonal unit vectors in R^50 with magnitude 1; f0 fires with p = 0.25, f1, f2, f3 with
p = 0.05. In the hierarchical variant f1 fires only when f0 fires, P(f1|f0) = 0.2 (so P(f1) is still 0.05).
An input is the sum of the active features. A 4-feature L1 SAE trained on it recovers one true feature per SAE
feature when the features are independent; with the hierarchy the f0 feature's encoder becomes "f0 and not f1",
the f1 feature's decoder becomes ≈ f0 + f1, and the absorption fraction with probe f0 is ≈ P(f1|f0) = 0.2.
Tying encoder and decoder removes absorption.

From a random start (`init_true=False`, what the tests use) training resamples dead latents (Anthropic's
"Towards Monosemanticity" resampling: a latent silent for 100 steps restarts at a badly reconstructed input) and can
keep the lowest-objective of several `restarts`: the tied SAE sometimes settles in a rotated basis ((f0 ± f1)/√2), a
local minimum with a higher objective than the true features (measured 0.0136 vs 0.0119).

    python -m evaluation.absorption.toy          # or: workbench absorption --toy
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import torch
from torch import nn
from tqdm.auto import tqdm

from sae_workbench.evaluation.absorption.eval import score_words
from sae_workbench.progress import bars_enabled

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToyConfig:
    """Toy data and SAE training settings (data constants from the paper's toy model)."""

    d_model: int = 50
    """Dimension of the input space (paper: R^50)."""
    p_parent: float = 0.25
    """Firing probability of f0 (paper: 0.25)."""
    p_other: float = 0.05
    """Firing probability of f1, f2, f3 when independent (paper: 0.05)."""
    hierarchical: bool = False
    """If True, f1 fires only when f0 fires, with probability `p_child_given_parent`."""
    p_child_given_parent: float = 0.2
    """P(f1 | f0) in the hierarchical variant (paper: 0.2, so P(f1) = 0.05 as in the independent case)."""
    tied: bool = False
    """Tie the encoder to the decoder (W_enc = W_decᵀ); the paper shows this removes absorption."""
    l1_coeff: float = 0.03
    """L1 penalty on feature activations (decoder rows are kept at unit norm)."""
    n_steps: int = 1500
    """Adam steps."""
    batch_size: int = 1024
    """Inputs per step (sampled fresh each step)."""
    lr: float = 3e-3
    """Adam learning rate."""
    init_true: bool = True
    """Start the SAE at the true features (encoder = decoder = f0..f3): quick and stable for the CLI's display. The
    tests start from random decoders (False), where the tied SAE can settle in a rotated basis ((f0 ± f1)/√2), a
    local minimum with a higher objective that `restarts` > 1 steps around."""
    restarts: int = 1
    """Train this many SAEs from different random starts and keep the lowest objective on a fixed sample."""
    resample_every: int = 100
    """During the first half of training, latents silent for this many steps restart at an input (0: never)."""
    seed: int = 0
    """Seeds the feature directions, the data and the SAE initialisation."""


N_FEATURES = 4


class ToySAE(nn.Module):
    """A ReLU SAE with unit-norm decoder rows and an optional tied encoder."""

    def __init__(self, W_init_FD: torch.Tensor, tied: bool) -> None:
        super().__init__()
        n_features, d_model = W_init_FD.shape
        W_dec_FD = W_init_FD.clone()
        self.W_dec_FD = nn.Parameter(W_dec_FD / W_dec_FD.norm(dim=-1, keepdim=True))
        self.tied = tied
        self.W_enc_DF = nn.Parameter(self.W_dec_FD.detach().T.clone(), requires_grad=not tied)
        self.b_enc_F = nn.Parameter(torch.zeros(n_features))
        self.b_dec_D = nn.Parameter(torch.zeros(d_model))

    def encoder_DF(self) -> torch.Tensor:
        """The encoder matrix in use (the decoder's transpose when tied)."""
        return self.W_dec_FD.T if self.tied else self.W_enc_DF

    def encode(self, x_BD: torch.Tensor) -> torch.Tensor:
        """Feature activations (B, F)."""
        return torch.relu((x_BD - self.b_dec_D) @ self.encoder_DF() + self.b_enc_F)

    def decode(self, acts_BF: torch.Tensor) -> torch.Tensor:
        """Reconstruction (B, D)."""
        return acts_BF @ self.W_dec_FD + self.b_dec_D

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Project decoder rows back to unit norm (so activations are already 'folded')."""
        self.W_dec_FD /= self.W_dec_FD.norm(dim=-1, keepdim=True)


def true_features(cfg: ToyConfig) -> torch.Tensor:
    """Four orthonormal feature directions in R^d, shape (4, D), seeded."""
    gen = torch.Generator().manual_seed(cfg.seed)
    q, _ = torch.linalg.qr(torch.randn(cfg.d_model, N_FEATURES, generator=gen))
    return q.T.contiguous()


def sample_batch(
    cfg: ToyConfig, feats_FD: torch.Tensor, n: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (n, D) and which true features are active (n, 4), as bool."""
    u = torch.rand(n, N_FEATURES, generator=gen)
    active = torch.empty(n, N_FEATURES, dtype=torch.bool)
    active[:, 0] = u[:, 0] < cfg.p_parent
    if cfg.hierarchical:
        active[:, 1] = active[:, 0] & (u[:, 1] < cfg.p_child_given_parent)
    else:
        active[:, 1] = u[:, 1] < cfg.p_other
    active[:, 2:] = u[:, 2:] < cfg.p_other
    return active.float() @ feats_FD, active


def train_toy_sae(cfg: ToyConfig, feats_FD: torch.Tensor) -> ToySAE:
    """Train `cfg.restarts` 4-feature L1 SAEs and keep the one with the lowest objective on a fixed sample."""
    best: tuple[float, ToySAE] | None = None
    x_ND, _ = sample_batch(cfg, feats_FD, 20_000, torch.Generator().manual_seed(cfg.seed + 3))
    for restart in range(max(1, cfg.restarts)):
        sae = _train_one(cfg, feats_FD, restart)
        loss = toy_objective(cfg, sae, x_ND)
        log.debug("toy restart %d: objective %.5f", restart, loss)
        if best is None or loss < best[0]:
            best = (loss, sae)
    assert best is not None
    return best[1]


@torch.no_grad()
def toy_objective(cfg: ToyConfig, sae: ToySAE, x_ND: torch.Tensor) -> float:
    """MSE + L1 (the training objective) on `x_ND`."""
    acts_NF = sae.encode(x_ND)
    mse = (sae.decode(acts_NF) - x_ND).pow(2).sum(-1).mean()
    return float(mse + cfg.l1_coeff * acts_NF.sum(-1).mean())


def _train_one(cfg: ToyConfig, feats_FD: torch.Tensor, restart: int) -> ToySAE:
    """Train one SAE (restart 0 keeps the single-run seeds)."""
    gen = torch.Generator().manual_seed(cfg.seed + 1 + 7919 * restart)
    W_init_FD = feats_FD if cfg.init_true else torch.randn(N_FEATURES, cfg.d_model, generator=gen)
    sae = ToySAE(W_init_FD, cfg.tied)
    opt = torch.optim.Adam([p for p in sae.parameters() if p.requires_grad], lr=cfg.lr)
    # The matrices are tiny (1024×50×4): one thread is faster, and multi-thread barriers crawl on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _train_loop(cfg, sae, opt, feats_FD, gen)
    finally:
        torch.set_num_threads(threads)
    return sae


def _train_loop(
    cfg: ToyConfig, sae: ToySAE, opt: torch.optim.Optimizer, feats_FD: torch.Tensor, gen: torch.Generator
) -> None:
    """Adam on MSE + L1, with the decoder renormalised after every step and dead latents resampled early on."""
    fired_F = torch.zeros(N_FEATURES, dtype=torch.bool)
    # None: on a terminal only; off under --no-progress (sae_workbench.progress).
    for step in tqdm(
        range(cfg.n_steps), desc="toy SAE", leave=False, disable=None if bars_enabled() else True
    ):
        x_BD, _ = sample_batch(cfg, feats_FD, cfg.batch_size, gen)
        acts_BF = sae.encode(x_BD)
        fired_F |= (acts_BF > 0).any(0)
        mse = (sae.decode(acts_BF) - x_BD).pow(2).sum(-1).mean()
        loss = mse + cfg.l1_coeff * acts_BF.sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sae.normalize_decoder()
        if cfg.resample_every and (step + 1) % cfg.resample_every == 0 and step < cfg.n_steps // 2:
            _resample_dead(sae, x_BD, ~fired_F, gen)
            fired_F[:] = False


@torch.no_grad()
def _resample_dead(sae: ToySAE, x_BD: torch.Tensor, dead_F: torch.Tensor, gen: torch.Generator) -> None:
    """Restart each dead latent at an input drawn with probability ∝ its squared reconstruction error."""
    err_B = (sae.decode(sae.encode(x_BD)) - x_BD).pow(2).sum(-1) + 1e-12
    for j in dead_F.nonzero().flatten().tolist():
        i = int(torch.multinomial(err_B, 1, generator=gen))
        direction_D = x_BD[i] / x_BD[i].norm().clamp(min=1e-8)
        sae.W_dec_FD[j] = direction_D
        if not sae.tied:
            sae.W_enc_DF[:, j] = direction_D
        sae.b_enc_F[j] = 0.0


@dataclass(frozen=True)
class ToyResult:
    """What the toy run measured."""

    config: ToyConfig
    feature_for_true: list[int]
    """For each true feature f0..f3, the SAE feature whose decoder is most aligned with it."""
    decoder_cos_true: list[float]
    """Decoder cosine of that SAE feature with its true feature."""
    parent_encoder_cos_f0_minus_f1: float
    """Cosine of the f0 SAE feature's encoder (within the features' span) with f0 − f1."""
    child_decoder_cos_f0_plus_f1: float
    """Cosine of the f1 SAE feature's decoder with f0 + f1."""
    absorption_fraction: float
    """Mean absorption fraction over inputs where f0 is active, probe = f0, main feature = the f0 SAE feature."""
    full_absorption_rate: float
    """Share of those inputs with full absorption."""
    explained_variance: float
    """Reconstruction quality on the evaluation sample."""


@torch.no_grad()
def evaluate_toy(cfg: ToyConfig, sae: ToySAE, feats_FD: torch.Tensor, n_eval: int = 20_000) -> ToyResult:
    """Measure recovery, the encoder/decoder shapes and absorption with probe f0."""
    dec_cos_FT = torch.nn.functional.normalize(sae.W_dec_FD, dim=-1) @ feats_FD.T
    # Encoder directions outside the features' span never meet an input and keep their initial values, so the
    # encoder is compared within the span.
    enc_FD = torch.nn.functional.normalize(sae.encoder_DF().T @ feats_FD.T @ feats_FD, dim=-1)
    match = [int(dec_cos_FT[:, t].argmax()) for t in range(N_FEATURES)]
    # The parent's SAE feature is the one with the largest encoder cosine with f0: under absorption the f1
    # feature's decoder also leans on f0, but its encoder stays "f1".
    parent = int((enc_FD @ feats_FD[0]).argmax())
    child = int((enc_FD @ feats_FD[1]).argmax())
    f0_minus_f1 = torch.nn.functional.normalize(feats_FD[0] - feats_FD[1], dim=0)
    f0_plus_f1 = torch.nn.functional.normalize(feats_FD[0] + feats_FD[1], dim=0)
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    x_ND, active_NF = sample_batch(cfg, feats_FD, n_eval, gen)
    acts_NF = sae.encode(x_ND)
    recon = sae.decode(acts_NF)
    ev = 1 - float((recon - x_ND).pow(2).sum() / (x_ND - x_ND.mean(0)).pow(2).sum())
    tp = active_NF[:, 0]
    probe_D = feats_FD[0]
    words = score_words(
        acts_NF[tp],
        x_ND[tp] @ probe_D,
        dec_cos_FT[:, 0],
        [parent],
        [f"input{i}" for i in range(int(tp.sum()))],
        "f0",
    )
    return ToyResult(
        config=cfg,
        feature_for_true=match,
        decoder_cos_true=[float(dec_cos_FT[match[t], t]) for t in range(N_FEATURES)],
        parent_encoder_cos_f0_minus_f1=float(enc_FD[parent] @ f0_minus_f1),
        child_decoder_cos_f0_plus_f1=float(
            torch.nn.functional.normalize(sae.W_dec_FD[child], dim=0) @ f0_plus_f1
        ),
        absorption_fraction=sum(w.absorption_fraction for w in words) / max(len(words), 1),
        full_absorption_rate=sum(w.is_full_absorption for w in words) / max(len(words), 1),
        explained_variance=ev,
    )


def run_toy(cfg: ToyConfig = ToyConfig()) -> ToyResult:
    """Sample the toy features, train the SAE, and evaluate it."""
    feats_FD = true_features(cfg)
    sae = train_toy_sae(cfg, feats_FD)
    return evaluate_toy(cfg, sae, feats_FD)


def run_toy_variants(seed: int = 0) -> dict[str, ToyResult]:
    """The three variants the paper contrasts: independent, hierarchical, hierarchical with tied weights."""
    base = ToyConfig(seed=seed)
    return {
        "independent": run_toy(base),
        "hierarchical": run_toy(replace(base, hierarchical=True)),
        "hierarchical_tied": run_toy(replace(base, hierarchical=True, tied=True)),
    }


def analytic_family(delta: float, p11: float, p10: float, d_model: int = 50) -> tuple[float, float]:
    """The paper's analytic check: (max reconstruction error, expected L1 cost) of the δ-family of solutions.

    Parent f1 and child f2 (the child fires only with the parent): encoder rows f1 − δ·f2 and f2, decoder columns
    f1 and f2 + δ·f1. Every δ in [0, 1] reconstructs perfectly; the L1 cost is p11·(2 − δ) + p10, lowest at δ = 1.
    """
    f1 = torch.zeros(d_model, dtype=torch.float64)
    f2 = torch.zeros(d_model, dtype=torch.float64)
    f1[0], f2[1] = 1.0, 1.0
    W_enc_FD = torch.stack([f1 - delta * f2, f2])
    W_dec_FD = torch.stack([f1, f2 + delta * f1])
    inputs = {"parent only": (f1, p10), "parent and child": (f1 + f2, p11)}
    max_err, l1 = 0.0, 0.0
    for x_D, prob in inputs.values():
        acts_F = torch.relu(W_enc_FD @ x_D)
        max_err = max(max_err, float((acts_F @ W_dec_FD - x_D).abs().max()))
        l1 += prob * float(acts_F.sum())
    return max_err, l1


def main() -> None:
    """Run the three toy variants and print a table."""
    for name, r in run_toy_variants().items():
        print(
            f"{name:18s} absorption_fraction={r.absorption_fraction:.3f} full={r.full_absorption_rate:.3f} "
            f"dec_cos={[round(c, 3) for c in r.decoder_cos_true]} enc(f0)·(f0−f1)={r.parent_encoder_cos_f0_minus_f1:.3f} "
            f"dec(f1)·(f0+f1)={r.child_decoder_cos_f0_plus_f1:.3f} EV={r.explained_variance:.3f}"
        )


if __name__ == "__main__":
    main()
