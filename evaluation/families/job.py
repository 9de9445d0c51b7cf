"""The family job behind `workbench match`: match every pair of SAEs, store the pairs, and read them back as curves,
splits and trees.

    members = [load_member(store, spec) for spec in ("runs/fam/seed=1-d_sae=1152", "runs/fam/seed=2-d_sae=1152")]
    report = match_family(store, members, FamilyConfig(methods=("hungarian", "greedy")))
    run_agreement(store, report.runs[0])                  # functional agreement from both SAEs' indexed activations

Which side is A: for one-to-one methods (hungarian, sinkhorn) the narrower SAE (every one of its features gets a
partner), for greedy the wider one (each wider feature's best match in the narrower one is its parent, what splitting
needs); at equal widths, the SAE given first. A run is keyed by both SAE ids, the method and every setting that changes
its pairs (`match_key`); a stored run is skipped, so a rerun after a crash redoes only the runs not committed, and
agreement resumes per chunk of A features.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.families.agreement import (
    QUOTED_THRESHOLD,
    THRESHOLDS,
    TOP_WINDOWS,
    SharedCurve,
    agreement_from_sums,
    shared_fraction_curve,
)
from sae_workbench.evaluation.families.matching import (
    DEFAULT_BLOCK,
    DEFAULT_DENSE_MAX_BYTES,
    DEFAULT_K,
    METHODS,
    Directions,
    Matching,
    directions_of,
    match,
)
from sae_workbench.evaluation.families.splitting import (
    MIN_COVERAGE,
    SPLIT_THRESHOLD,
    Split,
    TreeNode,
    absorption_mentions,
    find_splits,
    split_tree,
)
from sae_workbench.status import Status
from sae_workbench.store import Store
from sae_workbench.store.families import MatchRun
from sae_workbench.store.sql import pa

log = logging.getLogger(__name__)

JOB_VERSION = 1
"""Part of every match key: bump when a change to matching changes stored pairs."""
AGREEMENT_CHUNK = 512
"""A features per agreement transaction (the resume unit)."""


class FamilyError(WorkbenchError):
    """SAEs that cannot form a family: unknown, on different models or hooks, or files the store cannot find."""


@dataclass(frozen=True)
class FamilyConfig:
    """What `workbench match` computes."""

    methods: tuple[str, ...] = ("hungarian",)
    """Any of hungarian, greedy, sinkhorn."""
    similarity: str = "decoder"
    """decoder, encoder or both (the smaller of the two)."""
    k: int = DEFAULT_K
    """Candidates per row and column of the sparse graph."""
    block: int = DEFAULT_BLOCK
    """A rows per similarity block."""
    solver: str = "auto"
    """hungarian's solver: auto (sparse, dense fallback), sparse or dense."""
    threshold: float = QUOTED_THRESHOLD
    """Similarity at which a pair counts as shared (recorded with every row)."""
    dense_max_bytes: int = DEFAULT_DENSE_MAX_BYTES
    """Largest dense matrix a dense solve may build."""


@dataclass(frozen=True)
class Member:
    """One SAE of a family: its store id, hook and feature directions."""

    sae_id: str
    model: str
    hook: str
    d_sae: int
    directions: Directions = field(repr=False)


def _registered_path(cfg: dict[str, Any]) -> str | None:
    """Where the store says an SAE's files are (`path`, as `workbench index` records it)."""
    value = cfg.get("path")
    return value if isinstance(value, str) and value else None


def load_member(store: Store, spec: str) -> Member:
    """An SAE by store id (its files from the path the store recorded) or by folder (registered if new)."""
    from sae_workbench.sae.io import load_sae, recorded_hook, recorded_model, sae_id_of

    known = {s.sae_id: s for s in store.list_saes()}
    if spec in known:
        record = known[spec]
        path = _registered_path(record.cfg)
        if path is None or not Path(path).exists():
            raise FamilyError(
                f"the store does not record where SAE {spec}'s files are ({path or 'no path'}); pass its folder."
            )
        sae = load_sae(path)
        return Member(record.sae_id, record.model, record.hook, record.d_sae, directions_of(sae))
    folder = Path(spec).expanduser()
    if not folder.exists():
        raise FamilyError(
            f"{spec!r} is neither an SAE id in {store.path} (known: {sorted(known) or 'none'}) nor an SAE folder."
        )
    resolved = str(folder.resolve())
    for record in known.values():
        path = _registered_path(record.cfg)
        if path is not None and Path(path).resolve() == Path(resolved):
            return Member(
                record.sae_id, record.model, record.hook, record.d_sae, directions_of(load_sae(resolved))
            )
    sae = load_sae(resolved)
    model, hook = recorded_model(sae), recorded_hook(sae)
    if model is None or hook is None:
        raise FamilyError(f"the SAE in {spec} records no model or hook; index it first (`workbench index`).")
    sae_id = sae_id_of(sae, model, hook, resolved)
    cfg = {**sae.cfg.to_dict(), "path": resolved}
    store.register_sae(sae_id, model, hook, int(sae.cfg.d_in), int(sae.cfg.d_sae), cfg)
    return Member(sae_id, model, hook, int(sae.cfg.d_sae), directions_of(sae))


def check_family(members: Sequence[Member]) -> None:
    """FamilyError unless there are two or more distinct SAEs, all on one model and hook."""
    if len({m.sae_id for m in members}) < 2:
        raise FamilyError("give two or more different SAEs to match (--sae A --sae B ...).")
    places = {(m.model, m.hook) for m in members}
    if len(places) > 1:
        raise FamilyError(
            f"SAEs of a family read one model and hook; these read {sorted(places)}. Match SAEs of one hook."
        )


def match_key(sae_a: str, sae_b: str, method: str, cfg: FamilyConfig) -> str:
    """The key of one run: both ids, the method and the settings that change its pairs."""
    settings = {
        "v": JOB_VERSION, "a": sae_a, "b": sae_b, "method": method, "similarity": cfg.similarity,
        "k": cfg.k if method != "sinkhorn" else None, "solver": cfg.solver if method == "hungarian" else None,
        "threshold": cfg.threshold,
    }  # fmt: skip
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def oriented(x: Member, y: Member, method: str) -> tuple[Member, Member]:
    """(A, B) for `method` (see the module doc): narrower first for one-to-one, wider first for greedy."""
    if x.d_sae == y.d_sae:
        return x, y
    narrow, wide = (x, y) if x.d_sae < y.d_sae else (y, x)
    return (wide, narrow) if method == "greedy" else (narrow, wide)


def run_match(store: Store, a: Member, b: Member, method: str, cfg: FamilyConfig) -> tuple[MatchRun, bool]:
    """Match A to B by `method` and store the run (skipped when stored); return (run, whether it was computed)."""
    key = match_key(a.sae_id, b.sae_id, method, cfg)
    stored = store.match_run(key)
    if stored is not None:
        return stored, False
    t0 = time.perf_counter()
    m = match(a.directions, b.directions, method, cfg.similarity, k=cfg.k, block=cfg.block, solver=cfg.solver,
              dense_max_bytes=cfg.dense_max_bytes)  # fmt: skip
    seconds = time.perf_counter() - t0
    params = {"k": cfg.k, "block": cfg.block, "solver": m.solver, "d_a": a.d_sae, "d_b": b.d_sae,
              "seconds": round(seconds, 3), "job_version": JOB_VERSION}  # fmt: skip
    run = MatchRun(key, a.sae_id, b.sae_id, method, cfg.similarity, cfg.threshold, params, len(m.feature_a))
    store.add_match_run(run, m.feature_a, m.feature_b, m.sim)
    log.info("matched %s -> %s by %s (%s) in %.2f s", a.sae_id, b.sae_id, method, m.solver, seconds)
    return run, True


def stored_matching(store: Store, run: MatchRun) -> Matching:
    """A stored run's pairs as a Matching."""
    t = store.feature_matches(run.match_key)
    return Matching(
        run.method, run.similarity, str(run.params.get("solver", "")),
        t.column("feature_a").to_numpy().astype(np.int64), t.column("feature_b").to_numpy().astype(np.int64),
        t.column("sim").to_numpy().astype(np.float32),
    )  # fmt: skip


def dead_mask(store: Store, sae_id: str) -> np.ndarray | None:
    """(d_sae,) True for features that never fired over the SAE's indexed tokens (None when not indexed)."""
    progress = store.index_progress(sae_id)
    if progress is None or not progress.finalized:
        return None
    d_sae = store.get_sae(sae_id).d_sae
    dead = np.ones(d_sae, dtype=bool)
    table = store.feature_table(sae_id)
    active = table.column("feature").to_numpy().astype(np.int64)
    n_active = table.column("n_active").to_numpy()
    dead[active[n_active > 0]] = False
    return dead


def shared_curve(store: Store, run: MatchRun, thresholds: tuple[float, ...] = THRESHOLDS) -> SharedCurve:
    """The run's shared-fraction curve, dead features counted apart (when both SAEs are indexed)."""
    m = stored_matching(store, run)
    d_a = store.get_sae(run.sae_a).d_sae
    sim = np.full(d_a, -np.inf)
    sim[m.feature_a] = m.sim
    return shared_fraction_curve(
        m.partner_of(d_a), sim, dead_mask(store, run.sae_a), dead_mask(store, run.sae_b), thresholds
    )


@dataclass(frozen=True)
class RunSummary:
    """One stored run with its curve."""

    run: MatchRun
    computed: bool
    """False when it was already stored (resumed)."""
    curve: SharedCurve


@dataclass(frozen=True)
class FamilyReport:
    """What `match_family` did."""

    runs: list[RunSummary]
    splits: dict[str, list[Split]]
    """greedy wide->narrow match key -> the splits found on it."""


def width_chain(members: Sequence[Member]) -> list[Member]:
    """One SAE per distinct width, narrowest first (the first given at each width)."""
    chosen: dict[int, Member] = {}
    for m in members:
        chosen.setdefault(m.d_sae, m)
    return [chosen[w] for w in sorted(chosen)]


def chain_links(
    store: Store, members: Sequence[Member], cfg: FamilyConfig
) -> list[tuple[Member, Member, MatchRun]]:
    """Greedy wide->narrow runs between consecutive widths of the chain (computed when missing)."""
    chain = width_chain(members)
    links: list[tuple[Member, Member, MatchRun]] = []
    for narrow, wide in itertools.pairwise(chain):
        run, _ = run_match(store, wide, narrow, "greedy", cfg)
        links.append((narrow, wide, run))
    return links


def coverage_of(
    store: Store, parent_sae: str, child_sae: str, top_n: int = TOP_WINDOWS
) -> Callable[[int, list[int]], float | None]:
    """coverage(parent, children) from both SAEs' indexed activations (None when either is not indexed)."""
    indexed = all(store.index_progress(s) is not None for s in (parent_sae, child_sae))

    def coverage(parent: int, children: list[int]) -> float | None:
        """Fraction of the parent's top windows where some child fires."""
        if not indexed:
            return None
        covered, top = store.window_coverage(parent_sae, parent, child_sae, children, top_n)
        return covered / top if top else None

    return coverage


def family_splits(
    store: Store, narrow_sae: str, wide_sae: str, run: MatchRun, threshold: float = SPLIT_THRESHOLD
) -> list[Split]:
    """The splits of `narrow_sae`'s features into `wide_sae`'s on a stored greedy wide->narrow run."""
    return find_splits(
        stored_matching(store, run), threshold, coverage_of(store, narrow_sae, wide_sae), MIN_COVERAGE
    )


def match_family(
    store: Store, members: Sequence[Member], cfg: FamilyConfig, progress: bool = True
) -> FamilyReport:
    """Every pair of members by every method in `cfg`, then the splits between consecutive widths."""
    check_family(members)
    for method in cfg.methods:
        if method not in METHODS:
            raise FamilyError(f"unknown matching method {method!r}; use {', '.join(METHODS)}.")
    pairs = [(x, y) for i, x in enumerate(members) for y in members[i + 1 :] if x.sae_id != y.sae_id]
    summaries: list[RunSummary] = []
    jobs = [(x, y, method) for x, y in pairs for method in cfg.methods]
    for x, y, method in tqdm(jobs, desc="match", disable=not progress or len(jobs) < 2):
        a, b = oriented(x, y, method)
        run, computed = run_match(store, a, b, method, cfg)
        summaries.append(RunSummary(run, computed, shared_curve(store, run)))
    splits: dict[str, list[Split]] = {}
    if len({m.d_sae for m in members}) >= 2:
        for narrow, wide, run in chain_links(store, members, cfg):
            splits[run.match_key] = family_splits(store, narrow.sae_id, wide.sae_id, run)
    return FamilyReport(summaries, splits)


def run_agreement(
    store: Store, run: MatchRun, top_n: int = TOP_WINDOWS, chunk: int = AGREEMENT_CHUNK, progress: bool = True
) -> int:
    """Functional agreement of every pair of the run, chunk by chunk of A features (chunks stored are skipped);
    return the pairs computed now."""
    d_a = store.get_sae(run.sae_a).d_sae
    done = set(store.agreement_features(run.match_key).tolist())
    matched = store.feature_matches(run.match_key).column("feature_a").to_numpy()
    added = 0
    for lo in tqdm(range(0, d_a, chunk), desc="agreement", disable=not progress):
        hi = min(lo + chunk, d_a)
        todo = [int(f) for f in matched[(matched >= lo) & (matched < hi)] if int(f) not in done]
        if not todo:
            continue
        g = agreement_from_sums(store.agreement_sums(run.match_key, lo, hi, top_n))
        table = pa.table(
            {
                "feature_a": pa.array(g.feature_a.astype(np.int32)),
                "feature_b": pa.array(g.feature_b.astype(np.int32)),
                "act_corr": pa.array(g.act_corr.astype(np.float32), from_pandas=True),
                "top_jaccard": pa.array(g.top_jaccard.astype(np.float32), from_pandas=True),
                "n_windows": pa.array(g.n_windows.astype(np.int64)),
            }
        )
        added += store.add_agreement(run.match_key, table)
    return added


def family_tree(
    store: Store, chain_runs: Sequence[MatchRun], root: int, threshold: float = SPLIT_THRESHOLD
) -> TreeNode:
    """The splitting tree under `root` of the narrowest SAE; chain_runs[i] is the greedy run of width i+1 into width
    i. Each node carries its newest explanation, its absorption entries and, where it splits, its coverage."""
    saes = [chain_runs[0].sae_b, *(r.sae_a for r in chain_runs)]
    links = [stored_matching(store, r) for r in chain_runs]
    evals = {s: [e.eval for e in store.evals(sae_id=s) if "absorption" in e.eval_type_id] for s in saes}

    def annotate(level: int, feature: int) -> dict[str, Any]:
        """Explanation and absorption of one node."""
        texts = [
            e.text
            for e in store.explanations(sae_id=saes[level], feature=feature)
            if e.status is not Status.DEAD
        ]
        return {
            "sae_id": saes[level],
            "d_sae": store.get_sae(saes[level]).d_sae,
            "explanation": texts[-1] if texts else None,
            "absorption": absorption_mentions(evals[saes[level]], feature),
        }

    with store.session():
        tree = split_tree(links, root, threshold, annotate)
    return _with_coverage(store, tree, saes)


def _with_coverage(store: Store, node: TreeNode, saes: Sequence[str]) -> TreeNode:
    """The tree with each splitting node's coverage by its children filled in (when both SAEs are indexed)."""
    kids = tuple(_with_coverage(store, c, saes) for c in node.children)
    info = dict(node.info)
    if node.splits:
        info["coverage"] = coverage_of(store, saes[node.level], saes[node.level + 1])(
            node.feature, [c.feature for c in node.children]
        )
    return replace(node, children=kids, info=info)


def chain_runs_for(store: Store, sae_ids: Sequence[str]) -> list[MatchRun]:
    """Stored greedy wide->narrow runs linking consecutive SAEs of `sae_ids` (narrowest first); FamilyError where
    a link was never matched."""
    runs = store.match_runs()
    out: list[MatchRun] = []
    for narrow, wide in itertools.pairwise(sae_ids):
        found = [r for r in runs if r.method == "greedy" and r.sae_a == wide and r.sae_b == narrow]
        if not found:
            raise FamilyError(
                f"no greedy match of {wide} into {narrow} stored; run `workbench match` on both."
            )
        out.append(found[-1])
    return out
