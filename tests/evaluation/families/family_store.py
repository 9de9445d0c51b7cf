"""A small, real SAE family in a store: the tiny model, a random TopK SAE A, B = A permuted plus a little noise, and
two wider SAEs with planted splits (C: ten of A's features each split into two children; D: ten of C's), every one
indexed over the same sample corpus and explained by the real lexical job.

    from tests.evaluation.families.family_store import build_family_store
    fam = build_family_store(tmp_path)            # -> FamilyStore(path, a, b, c, d, perm, splits_ac, splits_cd)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.app.sample_store import HOOK, MODEL, SAMPLE_TEXT

D_SAE = 64
K = 8
EXPLAINED = 12
"""A's features 0..11 and their partners in B are explained (lexical), for the stability checks."""
SPLIT_OFFSET = 0.75
"""Children = parent ± 0.75 × an orthogonal unit vector, renormalised: cosine 1/√(1 + 0.75²) = 0.8 with the parent."""


@dataclass(frozen=True)
class FamilyStore:
    """What the builder made (SAE ids and the planted truth)."""

    path: Path
    a: str
    b: str
    c: str
    d: str
    folders: dict[str, Path]
    """sae id -> its SAELens folder."""
    perm: np.ndarray
    """B's feature perm[i] is A's feature i."""
    splits_ac: dict[int, tuple[int, int]]
    """A's split parents -> their two children in C."""
    splits_cd: dict[int, tuple[int, int]]
    """C's split parents -> their two children in D."""


def split_rows(
    W_FD: np.ndarray, parents: Sequence[int], offset: float, rng: np.random.Generator
) -> tuple[np.ndarray, dict[int, tuple[int, int]]]:
    """Rows with each parent replaced by two children (parent ± offset × a unit vector orthogonal to it, scaled to the
    parent's norm), the children at the parent's index and at the end. Returns (rows, parent -> (child 1, child 2))."""
    rows = [r.copy() for r in W_FD]
    where: dict[int, tuple[int, int]] = {}
    for p in parents:
        u = W_FD[p] / np.linalg.norm(W_FD[p])
        v = rng.standard_normal(W_FD.shape[1])
        v -= (v @ u) * u
        v /= np.linalg.norm(v)
        kids = [
            (u + s * offset * v) / np.linalg.norm(u + s * offset * v) * np.linalg.norm(W_FD[p])
            for s in (1, -1)
        ]
        rows[p] = kids[0]
        rows.append(kids[1])
        where[int(p)] = (int(p), len(rows) - 1)
    return np.stack(rows).astype(np.float32), where


def build_family_store(folder: Path, seed: int = 0) -> FamilyStore:
    """Build and index the four SAEs (a few seconds on 2 cores)."""
    import torch
    from sae_lens import TopKSAE, TopKSAEConfig

    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.explainers.base import ExplainConfig
    from sae_workbench.explainers.job import ExplainJob
    from sae_workbench.models import load_model
    from sae_workbench.sae.feature_stats import compute_feature_stats
    from sae_workbench.sae.index_loop import index_sae
    from sae_workbench.sae.index_request import IndexConfig, IndexRequest
    from sae_workbench.sae.io import compute_sae_id, save_sae
    from sae_workbench.store import Store

    folder.mkdir(parents=True, exist_ok=True)
    corpus_file = folder / "sample_corpus.txt"
    corpus_file.write_text(SAMPLE_TEXT)
    model = load_model(MODEL)
    d_in = model.cfg.d_model
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)

    def index(
        dec_FD: np.ndarray, enc_FD: np.ndarray, b_enc: np.ndarray, name: str, explain: list[int]
    ) -> tuple[str, Path]:
        """A TopK SAE with these weights, saved, registered, indexed, and its features `explain` explained."""
        sae = TopKSAE(TopKSAEConfig(d_in=d_in, d_sae=dec_FD.shape[0], k=K))
        sae.cfg.metadata.hook_name = HOOK
        sae.cfg.metadata.model_name = MODEL
        with torch.no_grad():
            sae.W_dec.copy_(torch.from_numpy(dec_FD))
            sae.W_enc.copy_(torch.from_numpy(enc_FD.T.copy()))
            sae.b_enc.copy_(torch.from_numpy(b_enc))
        sae_dir = save_sae(sae, folder / name)
        sae_id = compute_sae_id(sae, MODEL, HOOK)
        store.register_sae(
            sae_id, MODEL, HOOK, d_in, dec_FD.shape[0], {**sae.cfg.to_dict(), "path": str(sae_dir)}
        )
        cfg = IndexConfig(context_size=32, batch_size=8, commit_tokens=512, compute_stats=False)
        corpus = resolve_corpus(str(corpus_file))
        index_sae(store, IndexRequest(model, sae, HOOK, corpus, 32 * 1000, cfg, model_name=MODEL))
        compute_feature_stats(store, sae_id, sae, model, cfg)
        if explain:
            ExplainJob(
                store, sae_id, ExplainConfig("lexical", negatives="RANDOM_NEGATIVE"), progress=False
            ).run(explain)
        return sae_id, sae_dir

    store = Store.open(folder / "store.duckdb")
    dec_a = rng.standard_normal((D_SAE, d_in)).astype(np.float32)
    dec_a /= np.linalg.norm(dec_a, axis=1, keepdims=True)
    enc_a = dec_a + 0.3 * rng.standard_normal(dec_a.shape).astype(np.float32)
    b_a = (0.1 * rng.standard_normal(D_SAE)).astype(np.float32)
    a, dir_a = index(dec_a, enc_a, b_a, "sae_a", list(range(EXPLAINED)))

    perm = rng.permutation(D_SAE)
    dec_b, enc_b, b_b = np.empty_like(dec_a), np.empty_like(enc_a), np.empty_like(b_a)
    dec_b[perm] = dec_a + 0.02 * rng.standard_normal(dec_a.shape).astype(np.float32)
    enc_b[perm] = enc_a + 0.02 * rng.standard_normal(enc_a.shape).astype(np.float32)
    b_b[perm] = b_a
    b, dir_b = index(dec_b, enc_b, b_b, "sae_b", sorted(perm[:EXPLAINED].tolist()))

    parents_a = sorted(rng.choice(D_SAE, 10, replace=False).tolist())
    dec_c, splits_ac = split_rows(dec_a, parents_a, SPLIT_OFFSET, np.random.default_rng(seed + 1))
    enc_c, _ = split_rows(enc_a, parents_a, SPLIT_OFFSET, np.random.default_rng(seed + 1))
    b_c = np.concatenate([b_a, b_a[parents_a]])
    c, dir_c = index(dec_c, enc_c, b_c, "sae_c", list(splits_ac[parents_a[0]]))

    # D splits ten of C's features that are not themselves children: a second level for some trees, and one first-
    # level child split again (A's first parent's first child), so one tree has three levels.
    children = {x for kids in splits_ac.values() for x in kids}
    plain = [f for f in range(dec_c.shape[0]) if f not in children]
    parents_c = sorted([splits_ac[parents_a[0]][0], *rng.choice(plain, 9, replace=False).tolist()])
    dec_d, splits_cd = split_rows(dec_c, parents_c, SPLIT_OFFSET, np.random.default_rng(seed + 2))
    enc_d, _ = split_rows(enc_c, parents_c, SPLIT_OFFSET, np.random.default_rng(seed + 2))
    b_d = np.concatenate([b_c, b_c[parents_c]])
    d, dir_d = index(dec_d, enc_d, b_d, "sae_d", list(splits_cd[splits_ac[parents_a[0]][0]]))
    return FamilyStore(
        folder / "store.duckdb",
        a,
        b,
        c,
        d,
        {a: dir_a, b: dir_b, c: dir_c, d: dir_d},
        perm,
        splits_ac,
        splits_cd,
    )


def build_matched_family(folder: Path, seed: int = 0) -> FamilyStore:
    """build_family_store, then everything `workbench match` stores: hungarian + greedy runs of every pair, the
    width chain, agreement of A ↔ B, and explanation stability of A ↔ B (lexical)."""
    from sae_workbench.evaluation.families.job import FamilyConfig, load_member, match_family, run_agreement
    from sae_workbench.evaluation.families.stability import explanation_pairs, record_stability
    from sae_workbench.store import Store

    fam = build_family_store(folder, seed)
    store = Store.open(fam.path)
    members = [load_member(store, s) for s in (fam.a, fam.b, fam.c, fam.d)]
    report = match_family(store, members, FamilyConfig(methods=("hungarian", "greedy")), progress=False)
    ab = next(
        s.run for s in report.runs if (s.run.sae_a, s.run.sae_b, s.run.method) == (fam.a, fam.b, "hungarian")
    )
    run_agreement(store, ab, progress=False)
    record_stability(store, ab, explanation_pairs(store, ab, "lexical"))
    return fam
