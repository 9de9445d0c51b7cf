"""Feature splitting across SAEs of growing width on one hook, as a tree per feature.

    link = match(wide, narrow, "greedy", "decoder")          # each wider feature's parent: its best narrower match
    splits = find_splits(link, threshold=SPLIT_THRESHOLD)    # parents with two or more children above it
    tree = split_tree([link_1_0, link_2_1], root=17)         # widths w0 < w1 < w2: the tree under feature 17 of w0

A parent *splits* when two or more wider features have it as their best decoder match with similarity at least
`SPLIT_THRESHOLD`, and (when activations are known) the children's activations cover at least `MIN_COVERAGE` of the
parent's top windows (spec "Splitting across widths"; the absorption paper, Chanin et al. arXiv 2409.14507, describes
the parent→children hierarchy this finds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sae_workbench.evaluation.families.matching import Matching

SPLIT_THRESHOLD = 0.7
"""Decoder cosine a child must reach with its parent (the shared-fraction threshold most often quoted; a planted child
parent ± an orthogonal offset of norm 0.75, renormalised, sits at cos 0.8 and clears it)."""
MIN_COVERAGE = 0.5
"""Fraction of the parent's top windows on which some child must fire ("most of" them, spec)."""

Coverage = Callable[[int, list[int]], float | None]
"""coverage(parent, children) -> fraction of the parent's top windows where a child fires (None: unknown)."""


@dataclass(frozen=True)
class Split:
    """A parent feature of the narrower SAE and its children in the wider one."""

    parent: int
    children: tuple[int, ...]
    """Wider features whose best match is the parent at or above the threshold, most similar first."""
    sims: tuple[float, ...]
    coverage: float | None
    """Fraction of the parent's top windows where a child fires (None: no activations to check)."""


def children_of(link: Matching, threshold: float = SPLIT_THRESHOLD) -> dict[int, list[tuple[int, float]]]:
    """parent -> [(child, similarity), …] most similar first, over the wide→narrow best-match `link`."""
    out: dict[int, list[tuple[int, float]]] = {}
    for child, parent, sim in zip(
        link.feature_a.tolist(), link.feature_b.tolist(), link.sim.tolist(), strict=True
    ):
        if sim >= threshold:
            out.setdefault(int(parent), []).append((int(child), float(sim)))
    for kids in out.values():
        kids.sort(key=lambda cs: (-cs[1], cs[0]))
    return out


def find_splits(
    link: Matching,
    threshold: float = SPLIT_THRESHOLD,
    coverage: Coverage | None = None,
    min_coverage: float = MIN_COVERAGE,
) -> list[Split]:
    """Parents with two or more children at or above `threshold` (and, given `coverage`, covered enough)."""
    splits: list[Split] = []
    for parent, kids in sorted(children_of(link, threshold).items()):
        if len(kids) < 2:
            continue
        cov = None if coverage is None else coverage(parent, [c for c, _ in kids])
        if cov is not None and cov < min_coverage:
            continue
        splits.append(Split(parent, tuple(c for c, _ in kids), tuple(s for _, s in kids), cov))
    return splits


@dataclass(frozen=True)
class TreeNode:
    """One feature of one width in a splitting tree."""

    level: int
    """Index of its SAE in the widths, narrowest 0."""
    feature: int
    sim: float | None
    """Decoder cosine with its parent (None at the root)."""
    children: tuple[TreeNode, ...] = ()
    info: dict[str, Any] = field(default_factory=lambda: dict[str, Any]())
    """Annotations: explanation, absorption entries, coverage (filled by the caller's `annotate`)."""

    @property
    def splits(self) -> bool:
        """Two or more children."""
        return len(self.children) >= 2

    def walk(self) -> list[TreeNode]:
        """This node and every descendant, depth first."""
        return [self, *(n for c in self.children for n in c.walk())]


def split_tree(
    links: Sequence[Matching],
    root: int,
    threshold: float = SPLIT_THRESHOLD,
    annotate: Callable[[int, int], dict[str, Any]] | None = None,
) -> TreeNode:
    """The tree under feature `root` of the narrowest SAE; links[i] is the best match of width i+1 into width i."""
    maps = [children_of(link, threshold) for link in links]

    def node(level: int, feature: int, sim: float | None) -> TreeNode:
        """A node and its subtree."""
        kids: tuple[TreeNode, ...] = ()
        if level < len(maps):
            kids = tuple(node(level + 1, c, s) for c, s in maps[level].get(feature, []))
        info = annotate(level, feature) if annotate is not None else {}
        return TreeNode(level, feature, sim, kids, info)

    return node(0, int(root), None)


def absorption_mentions(evals: Sequence[dict[str, Any]], feature: int) -> list[dict[str, Any]]:
    """Entries about `feature` in stored absorption evals (their `absorbing_features` lists), wherever nested."""
    found: list[dict[str, Any]] = []

    def visit(value: Any) -> None:
        """Collect absorbing-feature entries naming the feature."""
        if isinstance(value, dict):
            for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
                if key == "absorbing_features" and isinstance(item, list):
                    found.extend(
                        e
                        for e in item
                        if isinstance(e, dict) and e.get("feature_id") == feature  # pyright: ignore
                    )
                else:
                    visit(item)
        elif isinstance(value, list):
            for item in value:  # pyright: ignore[reportUnknownVariableType]
                visit(item)

    for doc in evals:
        visit(doc)
    return found
