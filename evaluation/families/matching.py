"""Match the features of two SAEs on one hook by the cosine of their weight rows, in blocks.

    a, b = directions_of(sae_a), directions_of(sae_b)
    cands = top_k_candidates(a, b, "decoder", k=32)            # (d_a, k) and (d_b, k), memory ~ block × d_b
    one_to_one = match(a, b, "hungarian", "decoder")           # Hungarian on the sparse candidate graph
    best = match(a, b, "greedy", "decoder")                    # each A feature's best B feature (many-to-one)
    plan = match(a, b, "sinkhorn", "decoder")                  # optimal transport, uniform marginals (POT)

Methods (references in ../shared/specs/sae-families.md):
- hungarian: one-to-one assignment maximising the summed similarity, as Paulo & Belrose (arXiv 2501.16615) align two
  seeds (Hungarian on 1 − cosine). The dense cosine matrix of two 16k SAEs is 1 GiB in float32, so each A row keeps
  its top-k B candidates and each B column its top-k A candidates (computed block by block), and scipy's
  `min_weight_full_bipartite_matching` solves the assignment on that sparse graph. The dense
  `linear_sum_assignment` runs instead when `solver="dense"`, or as the fallback when the candidate graph admits no
  full matching and the dense matrix fits in `dense_max_bytes`.
- greedy: each A feature's most similar B feature (many-to-one: what splitting across widths needs); the
  "Benchmarking Cross-Seed Feature Correspondence" study (TMLR 2026) finds greedy cosine ties Sinkhorn at the top.
- sinkhorn: entropic optimal transport with uniform marginals (POT's `ot.sinkhorn`), each A feature matched to the B
  feature its transport row puts most mass on; dense, so only for widths whose matrix fits in `dense_max_bytes`.

Similarity: "decoder" (cosine of decoder rows), "encoder" (cosine of encoder columns) or "both" (the smaller of the
two, the seed paper's conservative variant).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch

from sae_workbench.errors import WorkbenchError

log = logging.getLogger(__name__)

Similarity = Literal["decoder", "encoder", "both"]
Method = Literal["hungarian", "greedy", "sinkhorn"]
Solver = Literal["auto", "sparse", "dense"]
SIMILARITIES: tuple[str, ...] = get_args(Similarity)
METHODS: tuple[str, ...] = get_args(Method)

DEFAULT_K = 32
"""Candidates kept per row and per column (our choice: wide enough that the sparse assignment equals the dense one on
every SAE pair we tried, small enough that the graph is 2·k·d_sae edges)."""
DEFAULT_BLOCK = 1024
"""A rows per block: the block's similarity matrix is block × d_b float32 (64 MiB for d_b = 16384)."""
DEFAULT_DENSE_MAX_BYTES = 1 << 30
"""The largest dense matrix (float64 for the solvers) a dense solve may build: 1 GiB, ~11.5k × 11.5k."""
SINKHORN_REG = 0.02
"""Entropic regularisation of Sinkhorn on the cost 1 − similarity (our choice: small enough that the plan's row
maxima pick the same partner as the exact assignment on planted permutations, large enough for plain float64
Sinkhorn to converge in a few hundred iterations)."""
SINKHORN_MAX_ITER = 2000
"""Sinkhorn iterations at most (POT's numItermax)."""


class MatchingError(WorkbenchError):
    """Two SAEs cannot be matched as asked: different d_in, an unknown method, or a dense solve too large."""


@dataclass(frozen=True)
class Directions:
    """One SAE's feature directions, unit-normalised rows (a dead all-zero row stays zero)."""

    decoder_FD: np.ndarray
    """(d_sae, d_in) float32 decoder rows."""
    encoder_FD: np.ndarray | None
    """(d_sae, d_in) float32 encoder columns as rows (None when only decoders are known)."""

    @property
    def d_sae(self) -> int:
        """Number of features."""
        return int(self.decoder_FD.shape[0])

    @property
    def d_in(self) -> int:
        """Input width."""
        return int(self.decoder_FD.shape[1])


def unit_rows(W_FD: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm in float32 (all-zero rows stay zero)."""
    W = np.asarray(W_FD, dtype=np.float32)
    norms = np.linalg.norm(W, axis=1, keepdims=True)
    return np.divide(W, norms, out=np.zeros_like(W), where=norms > 0)


def make_directions(decoder_FD: np.ndarray, encoder_FD: np.ndarray | None = None) -> Directions:
    """Directions from raw decoder rows (d_sae, d_in) and optional encoder rows (d_sae, d_in)."""
    if encoder_FD is not None and encoder_FD.shape != decoder_FD.shape:
        raise MatchingError(
            f"encoder rows {encoder_FD.shape} and decoder rows {decoder_FD.shape} differ; pass W_enc transposed."
        )
    return Directions(unit_rows(decoder_FD), None if encoder_FD is None else unit_rows(encoder_FD))


def directions_of(sae: Any) -> Directions:
    """An sae-lens SAE's decoder rows (W_dec, d_sae × d_in) and encoder columns (W_enc, d_in × d_sae) as rows."""
    with torch.no_grad():
        W_dec_FD = sae.W_dec.detach().float().cpu().numpy()
        W_enc_DF = getattr(sae, "W_enc", None)
        enc_FD = None if W_enc_DF is None else W_enc_DF.detach().float().cpu().numpy().T
    return make_directions(W_dec_FD, enc_FD)


@dataclass(frozen=True)
class Candidates:
    """The top-k similarities of every A row (over B) and every B column (over A)."""

    a_to_b_AK: np.ndarray
    """(d_a, k) int64: each A feature's k most similar B features, most similar first."""
    a_sim_AK: np.ndarray
    """(d_a, k) float32: their similarities."""
    b_to_a_BK: np.ndarray
    """(d_b, k) int64: each B feature's k most similar A features, most similar first."""
    b_sim_BK: np.ndarray
    """(d_b, k) float32: their similarities."""


@dataclass(frozen=True)
class Matching:
    """Matched pairs (feature_a[i], feature_b[i]) with their similarity."""

    method: str
    """hungarian, greedy or sinkhorn."""
    similarity: str
    """decoder, encoder or both."""
    solver: str
    """How it was solved: sparse (candidate graph), dense, blocked (greedy) or sinkhorn."""
    feature_a: np.ndarray
    """(n,) int64 A features, ascending."""
    feature_b: np.ndarray
    """(n,) int64 their B partners."""
    sim: np.ndarray
    """(n,) float32 similarity of each pair."""

    def partner_of(self, d_a: int) -> np.ndarray:
        """(d_a,) int64 B partner of every A feature (−1 where unmatched)."""
        out = np.full(d_a, -1, dtype=np.int64)
        out[self.feature_a] = self.feature_b
        return out


def _check_pair(a: Directions, b: Directions, similarity: str) -> None:
    """Typed errors for an impossible pair or setting, before any work."""
    if similarity not in SIMILARITIES:
        raise MatchingError(f"unknown similarity {similarity!r}; use one of {', '.join(SIMILARITIES)}.")
    if a.d_in != b.d_in:
        raise MatchingError(
            f"SAE A reads d_in={a.d_in} but SAE B d_in={b.d_in}: only SAEs on the same model and hook can be matched."
        )
    if similarity != "decoder" and (a.encoder_FD is None or b.encoder_FD is None):
        raise MatchingError(f"similarity {similarity!r} needs both SAEs' encoders; use --similarity decoder.")


def _block_sim(a: Directions, b: Directions, similarity: str, lo: int, hi: int) -> torch.Tensor:
    """(hi − lo, d_b) float32 similarities of A rows lo..hi against every B row."""
    out: torch.Tensor | None = None
    if similarity in ("decoder", "both"):
        out = torch.from_numpy(a.decoder_FD[lo:hi]) @ torch.from_numpy(b.decoder_FD).T
    if similarity in ("encoder", "both"):
        assert a.encoder_FD is not None and b.encoder_FD is not None
        enc = torch.from_numpy(a.encoder_FD[lo:hi]) @ torch.from_numpy(b.encoder_FD).T
        out = enc if out is None else torch.minimum(out, enc)
    assert out is not None
    return out


def top_k_candidates(
    a: Directions,
    b: Directions,
    similarity: str = "decoder",
    k: int = DEFAULT_K,
    block: int = DEFAULT_BLOCK,
    columns: bool = True,
) -> Candidates:
    """Each A row's and each B column's k most similar partners, one block of A rows at a time (memory ~ block × d_b).

    `columns=False` skips the column candidates (greedy needs only the rows): b_to_a_BK is then (d_b, 0)."""
    _check_pair(a, b, similarity)
    if k < 1 or block < 1:
        raise MatchingError(f"k={k} and block={block} must be positive.")
    ka, kb = min(k, b.d_sae), min(k, a.d_sae)
    a_idx = np.empty((a.d_sae, ka), dtype=np.int64)
    a_sim = np.empty((a.d_sae, ka), dtype=np.float32)
    col_sim_BK = torch.full((b.d_sae, 0), -np.inf)
    col_idx_BK = torch.zeros((b.d_sae, 0), dtype=torch.int64)
    for lo in range(0, a.d_sae, block):
        hi = min(lo + block, a.d_sae)
        S_bB = _block_sim(a, b, similarity, lo, hi)  # (block, d_b)
        if ka == 1:  # the best match alone: a max, no sort
            best_v, best_i = S_bB.max(dim=1)
            vals, idx = best_v[:, None], best_i[:, None]
        else:
            vals, idx = torch.topk(S_bB, ka, dim=1)
        a_idx[lo:hi], a_sim[lo:hi] = idx.numpy(), vals.numpy()
        if not columns:
            continue
        # Merge this block's best rows per B column into the running top-k of every column (rows of S_bB.T).
        cv, ci = torch.topk(S_bB.T.contiguous(), min(kb, hi - lo), dim=1)  # (d_b, ≤k)
        merged_sim = torch.cat([col_sim_BK, cv], dim=1)
        merged_idx = torch.cat([col_idx_BK, ci + lo], dim=1)
        col_sim_BK, order = torch.topk(merged_sim, min(kb, merged_sim.shape[1]), dim=1)
        col_idx_BK = torch.gather(merged_idx, 1, order)
    return Candidates(a_idx, a_sim, col_idx_BK.numpy(), col_sim_BK.numpy())


def dense_similarity(
    a: Directions, b: Directions, similarity: str = "decoder", block: int = DEFAULT_BLOCK
) -> np.ndarray:
    """The full (d_a, d_b) float32 similarity matrix (filled block by block; d_a × d_b × 4 bytes)."""
    _check_pair(a, b, similarity)
    out = np.empty((a.d_sae, b.d_sae), dtype=np.float32)
    for lo in range(0, a.d_sae, block):
        hi = min(lo + block, a.d_sae)
        out[lo:hi] = _block_sim(a, b, similarity, lo, hi).numpy()
    return out


def dense_fits(d_a: int, d_b: int, max_bytes: int = DEFAULT_DENSE_MAX_BYTES) -> bool:
    """Whether a float64 d_a × d_b matrix fits in `max_bytes`."""
    return d_a * d_b * 8 <= max_bytes


def greedy_from_candidates(cands: Candidates, similarity: str) -> Matching:
    """Each A feature's best B feature (the first candidate)."""
    n = cands.a_to_b_AK.shape[0]
    return Matching(
        "greedy", similarity, "blocked", np.arange(n, dtype=np.int64), cands.a_to_b_AK[:, 0].copy(),
        cands.a_sim_AK[:, 0].copy(),
    )  # fmt: skip


def _candidate_graph(cands: Candidates, d_a: int, d_b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of row and column candidates as unique (a, b, similarity) edges."""
    ka, kb = cands.a_to_b_AK.shape[1], cands.b_to_a_BK.shape[1]
    rows = np.concatenate([np.repeat(np.arange(d_a), ka), cands.b_to_a_BK.ravel()])
    cols = np.concatenate([cands.a_to_b_AK.ravel(), np.repeat(np.arange(d_b), kb)])
    sims = np.concatenate([cands.a_sim_AK.ravel(), cands.b_sim_BK.ravel()])
    _, first = np.unique(rows * d_b + cols, return_index=True)  # sorted by (a, b)
    return rows[first], cols[first], sims[first]


def hungarian_sparse(cands: Candidates, d_a: int, d_b: int, similarity: str) -> Matching | None:
    """One-to-one assignment on the candidate graph (None when the graph admits no full matching)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    rows, cols, sims = _candidate_graph(cands, d_a, d_b)
    # Cost 2 − similarity lies in [1, 3]: strictly positive, so no edge is mistaken for an absent (zero) one, and
    # every full matching has min(d_a, d_b) edges, so minimising it maximises the summed similarity.
    cost = csr_matrix((2.0 - sims.astype(np.float64), (rows, cols)), shape=(d_a, d_b))
    try:
        r, c = min_weight_full_bipartite_matching(cost)
    except ValueError:
        return None
    r, c = np.asarray(r, dtype=np.int64), np.asarray(c, dtype=np.int64)
    order = np.argsort(r)
    r, c = r[order], c[order]
    keys = rows * d_b + cols  # ascending: _candidate_graph keeps np.unique's order
    matched = sims[np.searchsorted(keys, r * d_b + c)].astype(np.float32)
    return Matching("hungarian", similarity, "sparse", r, c, matched)


def hungarian_dense(S_AB: np.ndarray, similarity: str) -> Matching:
    """One-to-one assignment on the dense similarity matrix (scipy's linear_sum_assignment)."""
    from scipy.optimize import linear_sum_assignment

    r, c = linear_sum_assignment(S_AB, maximize=True)
    r, c = np.asarray(r, dtype=np.int64), np.asarray(c, dtype=np.int64)
    return Matching("hungarian", similarity, "dense", r, c, S_AB[r, c].astype(np.float32))


def sinkhorn_dense(S_AB: np.ndarray, similarity: str, reg: float = SINKHORN_REG) -> Matching:
    """Each A feature's partner under the entropic transport plan with uniform marginals (POT)."""
    import ot

    d_a, d_b = S_AB.shape
    M = 1.0 - S_AB.astype(np.float64)
    plan = ot.sinkhorn(
        np.full(d_a, 1.0 / d_a), np.full(d_b, 1.0 / d_b), M, reg, numItermax=SINKHORN_MAX_ITER, stopThr=1e-7
    )
    c = np.asarray(plan).argmax(axis=1).astype(np.int64)
    r = np.arange(d_a, dtype=np.int64)
    return Matching("sinkhorn", similarity, "sinkhorn", r, c, S_AB[r, c].astype(np.float32))


def match(
    a: Directions,
    b: Directions,
    method: str = "hungarian",
    similarity: str = "decoder",
    *,
    k: int = DEFAULT_K,
    block: int = DEFAULT_BLOCK,
    solver: str = "auto",
    dense_max_bytes: int = DEFAULT_DENSE_MAX_BYTES,
) -> Matching:
    """Match A's features to B's by `method` (hungarian | greedy | sinkhorn) on `similarity` (see the module doc).

    `solver` applies to hungarian: auto (the sparse candidate graph, dense only as the fallback when the graph has no
    full matching and the dense matrix fits), sparse (never dense) or dense (the dense matrix, which must fit).
    """
    _check_pair(a, b, similarity)
    if method not in METHODS:
        raise MatchingError(f"unknown matching method {method!r}; use one of {', '.join(METHODS)}.")
    if solver not in ("auto", "sparse", "dense"):
        raise MatchingError(f"unknown solver {solver!r}; use auto, sparse or dense.")
    fits = dense_fits(a.d_sae, b.d_sae, dense_max_bytes)
    if method == "sinkhorn" or (method == "hungarian" and solver == "dense"):
        if not fits:
            raise MatchingError(
                f"a dense {a.d_sae} × {b.d_sae} solve needs {a.d_sae * b.d_sae * 8 / 2**30:.1f} GiB, over the "
                f"{dense_max_bytes / 2**30:.2f} GiB allowed; use --method hungarian (sparse) or greedy, or raise "
                "--dense-max-gib."
            )
        S_AB = dense_similarity(a, b, similarity, block)
        return sinkhorn_dense(S_AB, similarity) if method == "sinkhorn" else hungarian_dense(S_AB, similarity)
    if method == "greedy":
        return greedy_from_candidates(top_k_candidates(a, b, similarity, 1, block, columns=False), similarity)
    cands = top_k_candidates(a, b, similarity, k, block)
    found = hungarian_sparse(cands, a.d_sae, b.d_sae, similarity)
    if found is not None:
        return found
    if solver == "auto" and fits:
        log.info(
            "the top-%d candidate graph has no full matching; solving the dense %d × %d problem",
            k,
            a.d_sae,
            b.d_sae,
        )
        return hungarian_dense(dense_similarity(a, b, similarity, block), similarity)
    raise MatchingError(
        f"the top-{k} candidate graph of {a.d_sae} × {b.d_sae} features admits no one-to-one matching and the dense "
        "matrix does not fit (or --solver sparse); raise --k."
    )
