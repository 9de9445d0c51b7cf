"""Explainers × scorers comparison table of one SAE's feature set, as Markdown or CSV.

One row per (explainer, scorer, negative source): the mean of the scorer's headline metric over the features scored
OK, its 95% t CI, how many scores were recorded as failures (no activations, unscorable explanation) and how many
explanations were of dead features (recorded, not scored). A second table shows, per explainer and scorer, how much
close negatives lower the score compared with random ones, paired over the features scored under both, for each
pair present: SIMILAR_NEGATIVE vs RANDOM_NEGATIVE, SIMILAR_NEGATIVE vs RANDOM, SIMILAR vs RANDOM (tree paper:
random negatives hide false positives). A third shows PRISM polysemanticity (mean pairwise cosine of a feature's
descriptions vs the same for random descriptions of other features; lower = more distinct concepts). A fourth shows
rule complexity (an LLM's 0..5 rating of each rule, tree paper; lower = simpler), per explainer and rating LLM. A
fifth shows CoSy description scores summarised as PRISM's Table 1 prints them (evaluation/scorers/cosy_summary.py, the same
functions that reproduce the paper's Table 1 from its released results): PRISM (mean) over all description rows,
PRISM (max) over each feature's best description, AUC with its 95% t CI and MAD ± SD.

    rows = collect_rows(store, sae_id);  print(render_markdown(rows, negative_deltas(store, sae_id)))
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sae_workbench.evaluation.scorers.cosy_summary import (
    RULES,
    CosySummary,
    DescriptionScore,
    summarise_cosy,
    summarise_polysemanticity,
)
from sae_workbench.evaluation.scorers.metrics import t_confidence_interval
from sae_workbench.evaluation.scorers.registry import SCORERS
from sae_workbench.status import Status
from sae_workbench.store import Store

# Scorers whose headline metric the main table shows (higher is better for all of them); polysemanticity and
# complexity have tables of their own. The metric is the scorer's own (`evaluation.scorers.registry`).
TABLE_SCORERS = ("simulation", "detection", "fuzzing", "embedding", "cosy")
HEADLINE = {name: SCORERS[name].headline for name in TABLE_SCORERS}


@dataclass(frozen=True)
class ReportRow:
    """One explainer × scorer × negative-source cell."""

    explainer: str
    """Explainer name."""
    scorer: str
    """Scorer name."""
    negative_source: str
    """Negative source ('' for cosy)."""
    metric: str
    """Headline metric (higher is better for all of them)."""
    mean: float
    """Mean over features scored OK (NaN-valued scores excluded)."""
    ci_low: float
    """95% t CI lower bound."""
    ci_high: float
    """95% t CI upper bound."""
    n_features: int
    """Scores averaged."""
    n_failed: int
    """Scores recorded with a non-ok status."""
    false_positive_tokens: float
    """Mean false-positive tokens per feature (simulation only; NaN otherwise; lower is better)."""
    n_dead: int = 0
    """Explanations of dead features (status "dead"): recorded, neither scored nor counted as failures."""
    test_windows_seen: float = math.nan
    """Mean test windows per feature the explainer had been shown (replaced from the split's spares before scoring;
    0 when explainer and scorer share the split and the explainer read only its train/valid thirds)."""
    negatives_fired: float = math.nan
    """Mean drawn negatives per feature whose record fires (scored as positives: labels follow activations; only
    RANDOM and SIMILAR can draw them)."""
    circular: bool = False
    """The embedding scorer judged with the model that ranked its close negatives (issue 33 item 4)."""
    scored_by: str = ""
    """The LLM that scored these rows ('' for the offline scorers): scores of one explanation by different scorer
    backends (the rule-matching detector and an LLM detector) are separate rows, never averaged together."""


# (close source, random source) pairs compared, when both were scored.
DELTA_PAIRS = (("SIMILAR_NEGATIVE", "RANDOM_NEGATIVE"), ("SIMILAR_NEGATIVE", "RANDOM"), ("SIMILAR", "RANDOM"))


@dataclass(frozen=True)
class NegativeDelta:
    """How much close negatives lower a score vs random negatives, paired over features."""

    explainer: str
    """Explainer name."""
    scorer: str
    """Scorer name."""
    metric: str
    """Headline metric."""
    random: float
    """Mean under the random source."""
    close: float
    """Mean under the close (similarity-based) source."""
    delta: float
    """close − random (negative = close negatives lower the score)."""
    n_features: int
    """Features scored OK under both."""
    close_source: str = "SIMILAR_NEGATIVE"
    """The close source (SIMILAR_NEGATIVE or SIMILAR)."""
    random_source: str = "RANDOM"
    """The random source (RANDOM or RANDOM_NEGATIVE)."""
    scored_by: str = ""
    """The LLM that scored both sides ('' for the offline scorers)."""


@dataclass(frozen=True)
class PolysemanticityRow:
    """PRISM polysemanticity of one explainer's feature set (Kopf et al. NeurIPS 2025)."""

    explainer: str
    """Explainer name (PRISM)."""
    similarity: float
    """Mean over features of the mean pairwise cosine of their descriptions (lower = more polysemantic)."""
    random_baseline: float
    """Mean over features of the same for random descriptions of other features."""
    n_features: int
    """Features scored (≥ 2 descriptions)."""
    n_skipped: int
    """Features recorded unscored (dead, fewer than 2 descriptions)."""


@dataclass(frozen=True)
class ComplexityRow:
    """LLM-rated rule complexity of one explainer's feature set (tree paper, Ma et al. NeurIPS 2025)."""

    explainer: str
    """Explainer name."""
    rater: str
    """The rating LLM ('llm:<model>')."""
    mean_rating: float
    """Mean over features of the mean rating of their rules (0..5; lower = simpler)."""
    mean_max_rating: float
    """Mean over features of their most complex rule's rating."""
    mean_rules: float
    """Mean rules per rated explanation."""
    n_features: int
    """Features rated."""
    n_failed: int
    """Explanations recorded unrated (no rules, unparseable rules, malformed LLM answer)."""
    n_dead: int = 0
    """Explanations of dead features."""


@dataclass(frozen=True)
class CosyRow:
    """One explainer's CoSy description scores under one of PRISM's aggregation rules (Kopf et al. 2025, Table 1)."""

    explainer: str
    """Explainer name."""
    summary: CosySummary
    """AUC mean (95% t CI) and MAD mean ± SD under the rule ("mean" over descriptions, "max" per feature)."""


def scored_by(provenance: dict[str, Any]) -> str:
    """The LLM a score's provenance names as its backend ("llm:<model>"), or '' for an offline scorer."""
    backend = str(provenance.get("backend", ""))
    return backend.removeprefix("llm:") if backend.startswith("llm:") else ""


def _values(store: Store, sae_id: str, features: set[int] | None):
    """{(explainer, scorer, source, scored_by): {"ok": {feature: value}, "fp": [...], "failed": n}} from the store."""
    out: dict[tuple[str, str, str, str], dict] = defaultdict(
        lambda: {"ok": {}, "fp": [], "failed": 0, "dead": 0, "seen": [], "fired": [], "circular": False}
    )
    explanations = {e.id: e for e in store.explanations(sae_id=sae_id)}
    for s in store.scores(sae_id=sae_id):
        e = explanations.get(s.explanation_id)
        if e is None or (features is not None and e.feature not in features) or s.scorer not in HEADLINE:
            continue
        cell = out[(e.explainer, s.scorer, s.negative_source, scored_by(s.provenance))]
        if s.status is Status.DEAD:
            cell["dead"] += 1
            continue
        if s.status is not Status.OK:
            cell["failed"] += 1
            continue
        v = s.metrics.get(HEADLINE[s.scorer])
        if v is not None and not math.isnan(float(v)):
            cell["ok"][e.feature] = float(v)  # the latest score of a feature wins
        if "false_positive_tokens" in s.metrics:
            cell["fp"].append(float(s.metrics["false_positive_tokens"]))
        if "test_windows_seen" in s.metrics:
            cell["seen"].append(float(s.metrics["test_windows_seen"]))
        if s.metrics.get("circular"):
            cell["circular"] = True
        if "negatives_fired" in s.metrics:
            cell["fired"].append(float(s.metrics["negatives_fired"]))
    return out


def collect_rows(store: Store, sae_id: str, features: list[int] | None = None) -> list[ReportRow]:
    """Every explainer × scorer × negative source cell of an SAE (optionally restricted to some features)."""
    cells = _values(store, sae_id, set(features) if features is not None else None)
    rows = []
    for (explainer, scorer, source, by), cell in sorted(cells.items()):
        ci = t_confidence_interval(list(cell["ok"].values()))
        fp = float(np.mean(cell["fp"])) if cell["fp"] else math.nan
        seen = float(np.mean(cell["seen"])) if cell["seen"] else math.nan
        fired = float(np.mean(cell["fired"])) if cell["fired"] else math.nan
        rows.append(
            ReportRow(
                explainer,
                scorer,
                source,
                HEADLINE[scorer],
                ci.mean,
                ci.low,
                ci.high,
                ci.n,
                cell["failed"],
                fp,
                cell["dead"],
                seen,
                fired,
                bool(cell["circular"]),
                by,
            )
        )
    return rows


def negative_deltas(store: Store, sae_id: str, features: list[int] | None = None) -> list[NegativeDelta]:
    """Close − random per explainer, scorer and source pair (`DELTA_PAIRS`), over features scored under both."""
    cells = _values(store, sae_id, set(features) if features is not None else None)
    out = []
    for explainer, scorer, by in sorted({(k[0], k[1], k[3]) for k in cells}):
        for close_source, random_source in DELTA_PAIRS:
            rand = cells.get((explainer, scorer, random_source, by), {"ok": {}})["ok"]
            close = cells.get((explainer, scorer, close_source, by), {"ok": {}})["ok"]
            common = sorted(set(rand) & set(close))
            if not common:
                continue
            r = float(np.mean([rand[f] for f in common]))
            c = float(np.mean([close[f] for f in common]))
            out.append(
                NegativeDelta(
                    explainer,
                    scorer,
                    HEADLINE[scorer],
                    r,
                    c,
                    c - r,
                    len(common),
                    close_source,
                    random_source,
                    by,
                )
            )
    return out


def polysemanticity_rows(
    store: Store, sae_id: str, features: list[int] | None = None
) -> list[PolysemanticityRow]:
    """Per explainer: mean PRISM polysemanticity and random baseline over features (latest score per feature)."""
    wanted = set(features) if features is not None else None
    explanations = {e.id: e for e in store.explanations(sae_id=sae_id)}
    cells: dict[str, dict] = defaultdict(lambda: {"ok": {}, "skipped": 0})
    for s in store.scores(sae_id=sae_id, scorer="polysemanticity"):
        e = explanations.get(s.explanation_id)
        if e is None or (wanted is not None and e.feature not in wanted):
            continue
        if s.status is not Status.OK:
            cells[e.explainer]["skipped"] += 1
            continue
        base = s.metrics.get("random_baseline")
        cells[e.explainer]["ok"][e.feature] = (
            float(s.metrics["similarity"]),
            math.nan if base is None else float(base),
        )
    rows = []
    for explainer, cell in sorted(cells.items()):
        summary = summarise_polysemanticity(list(cell["ok"].values()))
        rows.append(
            PolysemanticityRow(
                explainer, summary.similarity, summary.random_baseline, summary.n_features, cell["skipped"]
            )
        )
    return rows


def _number(value: float | int | None) -> float:
    """A stored metric as a float (NaN when missing or null)."""
    return math.nan if value is None else float(value)


def cosy_rows(store: Store, sae_id: str, features: list[int] | None = None) -> list[CosyRow]:
    """Per explainer: PRISM (mean) and PRISM (max) of the CoSy scores of its descriptions (latest score per feature).

    A PRISM explanation's score holds one AUC/MAD per cluster description (metrics["descriptions"]); any other
    explanation is one description.
    """
    wanted = set(features) if features is not None else None
    explanations = {e.id: e for e in store.explanations(sae_id=sae_id)}
    latest: dict[str, dict[int, list[DescriptionScore]]] = defaultdict(dict)
    for s in store.scores(sae_id=sae_id, scorer="cosy"):
        e = explanations.get(s.explanation_id)
        if e is None or (wanted is not None and e.feature not in wanted) or s.status is not Status.OK:
            continue
        described = s.metrics.get("descriptions") or [s.metrics]
        latest[e.explainer][e.feature] = [
            DescriptionScore(e.feature, _number(d.get("auc")), _number(d.get("mad"))) for d in described
        ]
    return [
        CosyRow(explainer, summarise_cosy([d for ds in per_feature.values() for d in ds], rule))
        for explainer, per_feature in sorted(latest.items())
        for rule in RULES
    ]


def complexity_rows(store: Store, sae_id: str, features: list[int] | None = None) -> list[ComplexityRow]:
    """Per explainer and rating LLM: mean rule complexity over features (latest score per feature)."""
    wanted = set(features) if features is not None else None
    explanations = {e.id: e for e in store.explanations(sae_id=sae_id)}
    cells: dict[tuple[str, str], dict] = defaultdict(lambda: {"ok": {}, "failed": 0, "dead": 0})
    for s in store.scores(sae_id=sae_id, scorer="complexity"):
        e = explanations.get(s.explanation_id)
        if e is None or (wanted is not None and e.feature not in wanted):
            continue
        cell = cells[(e.explainer, str(s.provenance.get("backend", "")))]
        if s.status is Status.DEAD:
            cell["dead"] += 1
        elif s.status is not Status.OK:
            cell["failed"] += 1
        else:
            m = s.metrics
            cell["ok"][e.feature] = (float(m["mean"]), float(m["max"]), float(m["n_rules"]))
    rows = []
    for (explainer, rater), cell in sorted(cells.items()):
        vals = np.array(list(cell["ok"].values()), dtype=np.float64).reshape(-1, 3)
        means = vals.mean(axis=0) if len(vals) else np.full(3, math.nan)
        rows.append(
            ComplexityRow(
                explainer, rater, float(means[0]), float(means[1]), float(means[2]), len(vals),
                cell["failed"], cell["dead"],
            )
        )  # fmt: skip
    return rows


def _fmt(x: float, digits: int = 3) -> str:
    """A number for a table ('–' for NaN)."""
    return "–" if x is None or math.isnan(x) else f"{x:.{digits}f}"


SMOKE_TEST_PARAMS = 1e9
"""Below this many parameters a model's explanations are a smoke test of the pipeline, not a result (issue 32: a
135M model's answers parse under a schema but say little about a feature)."""


@dataclass(frozen=True)
class ModelRow:
    """Which LLM made an explainer's explanations, as their provenance records it."""

    explainer: str
    model: str
    structured_output: str
    explanations: int


def model_params(name: str) -> float | None:
    """Parameters a model's name states ("SmolLM2-135M-Instruct" → 135e6, "qwen2.5:1.5b" → 1.5e9); None when it
    states none."""
    found = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)([mMbB])(?![a-zA-Z])", name)
    if found is None:
        return None
    return float(found.group(1)) * (1e6 if found.group(2) in "mM" else 1e9)


def model_rows(store: Store, sae_id: str, features: list[int] | None = None) -> list[ModelRow]:
    """The LLM behind each explainer's explanations of these features (one row per explainer and model)."""
    wanted = None if features is None else set(features)
    counts: dict[tuple[str, str, str], int] = {}
    for e in store.explanations(sae_id=sae_id):
        if e.llm_model and (wanted is None or e.feature in wanted):
            form = str((e.llm_params or {}).get("structured_output") or "not recorded")
            key = (e.explainer, e.llm_model, form)
            counts[key] = counts.get(key, 0) + 1
    return [ModelRow(x, m, f, n) for (x, m, f), n in sorted(counts.items())]


def model_size(name: str) -> str:
    """The parameter count a model's name states, as text ("135M parameters", "1.5B parameters", "not stated")."""
    params = model_params(name)
    if params is None:
        return "not stated"
    return f"{params / 1e6:.0f}M parameters" if params < 1e9 else f"{params / 1e9:.1f}B parameters"


def smoke_test_warning(models: Iterable[str]) -> str:
    """The plain warning for the models whose names state fewer than SMOKE_TEST_PARAMS parameters ('' when none)."""
    small = sorted({m for m in models if (p := model_params(m)) is not None and p < SMOKE_TEST_PARAMS})
    if not small:
        return ""
    return (f"{', '.join(small)}: a model this small is a smoke test that the pipeline runs end to end on a real "
            "LLM, not a result. Its explanations and scores say little about the features.")  # fmt: skip


def render_models(models: list[ModelRow]) -> list[str]:
    """The Markdown lines naming each explainer's LLM, its size, and a plain warning for a small one."""
    if not models:
        return []
    lines = ["", "LLMs behind the explanations:", "", "| explainer | model | size | structured output | "
             "explanations |", "|---|---|---|---|---|"]  # fmt: skip
    for m in models:
        lines.append(
            f"| {m.explainer} | {m.model} | {model_size(m.model)} | {m.structured_output} | {m.explanations} |"
        )
    warning = smoke_test_warning(m.model for m in models)
    if warning:
        head, tail = warning.split(" Its ", 1)
        lines += ["", f"**{head}** Its {tail}"]
    return lines


def _scorer_label(scorer: str, by: str) -> str:
    """A scorer's name with the LLM that ran it in brackets (none for an offline scorer)."""
    return f"{scorer} [{by}]" if by else scorer


def render_markdown(
    rows: list[ReportRow],
    deltas: list[NegativeDelta],
    title: str = "",
    polysemanticity: list[PolysemanticityRow] | None = None,
    complexity: list[ComplexityRow] | None = None,
    cosy: list[CosyRow] | None = None,
    models: list[ModelRow] | None = None,
) -> str:
    """The tables as Markdown (the polysemanticity, complexity and CoSy ones when given; the LLMs behind the
    explanations first when given)."""
    lines = [f"# {title}", ""] if title else []
    lines += render_models(models or [])[1:] + ([""] if models else [])
    lines += [
        "Higher is better for every metric except false-positive tokens. CI = 95% Student-t interval over features. "
        "Seen = test windows per feature the explainer had been shown, replaced before scoring (0 = the split's "
        "own test third). Neg. fired = drawn negatives per feature on which the feature fires, scored as positives "
        "(labels follow activations). (circular) = the embedding scorer ranked with the model that picked its close "
        "negatives. A scorer named with a model in brackets was run by that LLM; without one, offline.",
        "",
        "| explainer | scorer | negatives | metric | mean | 95% CI | features | failed | FP tokens | dead | seen "
        "| neg. fired |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]"
        lines.append(
            f"| {r.explainer} | {_scorer_label(r.scorer, r.scored_by)}{' (circular)' if r.circular else ''} | "
            f"{r.negative_source or '–'} | {r.metric} | {_fmt(r.mean)} | {ci} | "
            f"{r.n_features} | {r.n_failed} | {_fmt(r.false_positive_tokens, 1)} | {r.n_dead} | "
            f"{_fmt(r.test_windows_seen, 1)} | {_fmt(r.negatives_fired, 1)} |"
        )
    lines += [
        "",
        "Close vs random negatives (paired over features; negative Δ = close negatives lower the score):",
        "",
        "| explainer | scorer | metric | close | random | close mean | random mean | Δ | features |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d in deltas:
        lines.append(
            f"| {d.explainer} | {_scorer_label(d.scorer, d.scored_by)} | {d.metric} | {d.close_source} | "
            f"{d.random_source} | {_fmt(d.close)} | "
            f"{_fmt(d.random)} | {_fmt(d.delta)} | {d.n_features} |"
        )
    if not deltas:
        lines.append("| – | – | – | – | – | – | – | – | 0 |")
    if polysemanticity:
        lines += [
            "",
            "PRISM polysemanticity (mean pairwise cosine of a feature's descriptions; lower = more distinct "
            "concepts), vs random descriptions of other features:",
            "",
            "| explainer | descriptions | random baseline | features | skipped |",
            "|---|---|---|---|---|",
        ]
        for p in polysemanticity:
            lines.append(
                f"| {p.explainer} | {_fmt(p.similarity)} | {_fmt(p.random_baseline)} | {p.n_features} | "
                f"{p.n_skipped} |"
            )
    if complexity:
        lines += [
            "",
            "Rule complexity (an LLM rates each rule 0..5; lower = simpler; mean over features):",
            "",
            "| explainer | rater | mean rating | mean max rating | rules | features | failed | dead |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for c in complexity:
            lines.append(
                f"| {c.explainer} | {c.rater} | {_fmt(c.mean_rating, 2)} | {_fmt(c.mean_max_rating, 2)} | "
                f"{_fmt(c.mean_rules, 1)} | {c.n_features} | {c.n_failed} | {c.n_dead} |"
            )
    if cosy:
        lines += [
            "",
            "CoSy description scores as PRISM's Table 1 prints them (Kopf et al. 2025): 'mean' averages all "
            "descriptions, 'max' each feature's best; AUC mean (95% t CI), MAD mean ± SD:",
            "",
            "| explainer | rule | AUC | MAD | averaged | features | descriptions |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in cosy:
            m = c.summary
            lines.append(
                f"| {c.explainer} | {m.rule} | {m.auc_text(3)} | {m.mad_text(2)} | {m.n} | {m.n_features} | "
                f"{m.n_descriptions} |"
            )
    return "\n".join(lines) + "\n"


def render_csv(
    rows: list[ReportRow],
    deltas: list[NegativeDelta],
    polysemanticity: list[PolysemanticityRow] | None = None,
    complexity: list[ComplexityRow] | None = None,
    cosy: list[CosyRow] | None = None,
) -> str:
    """One CSV: the cells, the deltas as rows whose negative_source is '<close>-<random>' (e.g.
    'SIMILAR_NEGATIVE-RANDOM_NEGATIVE'), then polysemanticity rows (scorer 'polysemanticity', metrics
    'mean_pairwise_cosine' and 'random_baseline_cosine'), then complexity rows (scorer 'complexity', negative_source
    = the rating LLM, metrics 'mean_rating' and 'mean_max_rating'), then CoSy summaries (scorer 'cosy',
    negative_source 'prism_mean' or 'prism_max', metrics 'auc' with its 95% t CI, 'mad' and 'mad_std')."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        [
            "explainer",
            "scorer",
            "negative_source",
            "metric",
            "mean",
            "ci_low",
            "ci_high",
            "n_features",
            "n_failed",
            "false_positive_tokens",
            "n_dead",
            "test_windows_seen",
            "negatives_fired",
            "circular",
            "scored_by",
        ]
    )
    for r in rows:
        w.writerow(
            [
                r.explainer,
                r.scorer,
                r.negative_source,
                r.metric,
                r.mean,
                r.ci_low,
                r.ci_high,
                r.n_features,
                r.n_failed,
                r.false_positive_tokens,
                r.n_dead,
                r.test_windows_seen,
                r.negatives_fired,
                r.circular,
                r.scored_by,
            ]
        )
    for d in deltas:
        w.writerow(
            [
                d.explainer,
                d.scorer,
                f"{d.close_source}-{d.random_source}",
                d.metric,
                d.delta,
                "",
                "",
                d.n_features,
                "",
                "",
                "",
                "",
                "",
                "",
                d.scored_by,
            ]
        )
    for p in polysemanticity or []:
        for metric, value in (
            ("mean_pairwise_cosine", p.similarity),
            ("random_baseline_cosine", p.random_baseline),
        ):
            w.writerow(
                [p.explainer, "polysemanticity", "", metric, value, "", "", p.n_features, p.n_skipped, "", ""]
            )
    for c in complexity or []:
        for metric, value in (("mean_rating", c.mean_rating), ("mean_max_rating", c.mean_max_rating)):
            w.writerow(
                [
                    c.explainer,
                    "complexity",
                    c.rater,
                    metric,
                    value,
                    "",
                    "",
                    c.n_features,
                    c.n_failed,
                    "",
                    c.n_dead,
                ]
            )
    for c in cosy or []:
        m, source = c.summary, f"prism_{c.summary.rule}"
        for metric, value, low, high in (
            ("auc", m.auc_mean, m.auc_ci_low, m.auc_ci_high),
            ("mad", m.mad_mean, "", ""),
            ("mad_std", m.mad_std, "", ""),
        ):
            w.writerow([c.explainer, "cosy", source, metric, value, low, high, m.n, "", "", ""])
    return buf.getvalue()
