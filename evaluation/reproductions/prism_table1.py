"""PRISM's Table 1 (and its k-ablation, sanity-check and polysemanticity figures) from the paper's released results.

Kopf et al., NeurIPS 2025 (arXiv 2506.15538) released one CSV per run in lkopf/prism `results/`: per-description
CoSy scores (`layer,unit,AUC,...,MAD`) and per-feature polysemanticity (`layer,unit,cosine_similarity,
cosine_similarity_random,...`). This module reads a folder of those CSVs (only the numeric columns are needed) and
summarises them with `evaluation.scorers.cosy_summary`, the same functions the project's own report uses for its CoSy
scores, so that reproducing the paper's printed values checks our aggregation rules.

    workbench prism-table1 --data ../shared/data/prism-table1
    tables = reference_tables(Path("../shared/data/prism-table1")); print(render_markdown(tables))
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.scorers.cosy_summary import (
    CosySummary,
    DescriptionScore,
    PolysemanticitySummary,
    summarise_cosy,
    summarise_polysemanticity,
)

# Table 1's columns: (name printed in the paper, the model's tag in the result file names).
MODELS: tuple[tuple[str, str], ...] = (
    ("GPT-2 XL", "gpt2-xl"),
    ("Llama 3.1 8B Instruct", "Llama-3.1-8B-Instruct"),
    ("GPT-2 Small", "gpt2-small-sae"),
    ("Gemma Scope", "gemma-scope-2b"),
)
# Table 1's rows: (method, file-name prefix of its CoSy results, rule). The two baselines give one description per
# feature, which the notebook summarises with the "mean" rule; PRISM's five are summarised both ways.
METHODS: tuple[tuple[str, str, str], ...] = (
    ("GPT-Explain", "GPT-explain_", "mean"),
    ("Output-Centric", "output-centric_", "mean"),
    ("PRISM (mean)", "", "mean"),
    ("PRISM (max)", "", "max"),
)
# The paper's run settings as they appear in every file name: Gemini 1.5 Pro writes the descriptions and the CoSy
# texts; activations are averaged over tokens; 1,000 cosmopedia control texts.
RUN = "textgen-gemini-1-5-pro_mean_evalgen-gemini-1-5-pro_cosmopedia_1000"
# The k ablation (GPT-2 XL): k = 5 is the main run, the others carry a "_clusters-k" suffix.
K_VALUES = (1, 3, 5, 10)
MAIN_K = 5
ABLATION_MODEL = "gpt2-xl"


class PrismReferenceDataError(WorkbenchError):
    """The folder holds no PRISM result CSV, or a CSV lacks a needed column."""


def cosy_file(model_tag: str, prefix: str = "", suffix: str = "") -> str:
    """The released CoSy result file name of a model (prefix: method; suffix: e.g. '_clusters-3')."""
    return f"cosy-evaluation_{prefix}target-{model_tag}_{RUN}{suffix}.csv"


def polysemanticity_file(model_tag: str) -> str:
    """The released polysemanticity (meta-evaluation) file name of a model."""
    return f"meta-evaluation_cosine-similarity_target-{model_tag}_{RUN}.csv"


def _float(value: str | None) -> float:
    """A CSV cell as a float (NaN when empty)."""
    return float(value) if value not in (None, "") else math.nan


def _rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """The CSV's rows, after checking it has `columns`."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise PrismReferenceDataError(f"{path} lacks column(s) {missing}; it has {reader.fieldnames}")
        return list(reader)


def load_cosy_csv(path: Path) -> list[DescriptionScore]:
    """One DescriptionScore per row of a released CoSy result CSV; the feature is (layer, unit)."""
    return [
        DescriptionScore((int(r["layer"]), int(r["unit"])), _float(r["AUC"]), _float(r["MAD"]))
        for r in _rows(path, ("layer", "unit", "AUC", "MAD"))
    ]


def load_polysemanticity_csv(path: Path) -> list[tuple[float, float]]:
    """(description cosine, random-description cosine) per feature of a released meta-evaluation CSV."""
    return [
        (_float(r["cosine_similarity"]), _float(r["cosine_similarity_random"]))
        for r in _rows(path, ("layer", "unit", "cosine_similarity", "cosine_similarity_random"))
    ]


@dataclass(frozen=True)
class Table1Cell:
    """One model × method cell of Table 1."""

    model: str
    """Model as the paper names it."""
    method: str
    """GPT-Explain, Output-Centric, PRISM (mean) or PRISM (max)."""
    summary: CosySummary
    """AUC (95% t CI) and MAD (± SD)."""
    source: str
    """The CSV it was computed from."""


@dataclass(frozen=True)
class MaxMeanRow:
    """One row of the k-ablation or sanity-check tables: PRISM (max) and PRISM (mean) of one run."""

    label: str
    """'k=3', 'Baseline', 'Random Descriptions', ..."""
    max: CosySummary
    """The "max" rule."""
    mean: CosySummary
    """The "mean" rule."""
    source: str
    """The CSV it was computed from."""


@dataclass(frozen=True)
class PolysemanticityCell:
    """The polysemanticity pair of one model."""

    model: str
    """Model as the paper names it."""
    summary: PolysemanticitySummary
    """Mean cosine of descriptions vs random descriptions, over features."""
    source: str
    """The CSV it was computed from."""


@dataclass(frozen=True)
class ReferenceTables:
    """Everything found in a folder of PRISM result CSVs (cells whose file is absent are left out)."""

    table1: list[Table1Cell]
    """Table 1 cells, in the paper's method-then-model order."""
    k_ablation: list[MaxMeanRow]
    """The number-of-clusters ablation (GPT-2 XL), k ascending."""
    sanity: list[MaxMeanRow]
    """The sanity check (GPT-2 XL): Baseline (= the main PRISM run) and Random Descriptions."""
    polysemanticity: list[PolysemanticityCell]
    """Polysemanticity pairs, per model."""

    def cell(self, model: str, method: str) -> CosySummary:
        """The Table 1 cell of a model and method (KeyError when its file was absent)."""
        for c in self.table1:
            if c.model == model and c.method == method:
                return c.summary
        raise KeyError((model, method))


def _max_mean(label: str, path: Path) -> MaxMeanRow:
    """Both rules over one CoSy CSV."""
    rows = load_cosy_csv(path)
    return MaxMeanRow(label, summarise_cosy(rows, "max"), summarise_cosy(rows, "mean"), path.name)


def reference_tables(folder: Path) -> ReferenceTables:
    """Summarise every known PRISM result CSV in `folder` with the project's CoSy aggregation."""
    if not folder.is_dir():
        raise PrismReferenceDataError(f"{folder} is not a folder of PRISM result CSVs")
    table1 = []
    for method, prefix, rule in METHODS:
        for model, tag in MODELS:
            path = folder / cosy_file(tag, prefix)
            if path.is_file():
                summary = summarise_cosy(load_cosy_csv(path), "max" if rule == "max" else "mean")
                table1.append(Table1Cell(model, method, summary, path.name))
    k_ablation = []
    for k in K_VALUES:
        path = folder / cosy_file(ABLATION_MODEL, suffix="" if k == MAIN_K else f"_clusters-{k}")
        if path.is_file():
            k_ablation.append(_max_mean(f"k={k}", path))
    sanity = []
    for label, name in (
        ("Baseline", cosy_file(ABLATION_MODEL)),
        ("Random Descriptions", "random_descriptions_" + cosy_file(ABLATION_MODEL)),
    ):
        if (folder / name).is_file():
            sanity.append(_max_mean(label, folder / name))
    poly = []
    for model, tag in MODELS:
        path = folder / polysemanticity_file(tag)
        if path.is_file():
            poly.append(
                PolysemanticityCell(
                    model, summarise_polysemanticity(load_polysemanticity_csv(path)), path.name
                )
            )
    if not (table1 or k_ablation or sanity or poly):
        raise PrismReferenceDataError(
            f"{folder} holds none of the PRISM result CSVs (e.g. {cosy_file(ABLATION_MODEL)}); "
            "copy them from lkopf/prism results/"
        )
    return ReferenceTables(table1, k_ablation, sanity, poly)


def render_markdown(tables: ReferenceTables) -> str:
    """The tables as Markdown, numbers printed as the paper prints them."""
    models = [m for m, _ in MODELS if any(c.model == m for c in tables.table1)]
    lines = [
        "PRISM Table 1 (Kopf et al. 2025) from the released per-description CoSy scores. AUC: mean (95% t CI); "
        "MAD: mean ± SD. PRISM (mean) and the baselines average over description rows, PRISM (max) over each "
        "feature's best description.",
        "",
        "| method | " + " | ".join(f"{m} AUC | {m} MAD" for m in models) + " |",
        "|---|" + "---|---|" * len(models),
    ]
    for method, _, _ in METHODS:
        cells = []
        for m in models:
            try:
                s = tables.cell(m, method)
                cells += [s.auc_text(), s.mad_text()]
            except KeyError:
                cells += ["–", "–"]
        if any(c != "–" for c in cells):
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    for title, rows in (
        ("Number of clusters k (GPT-2 XL)", tables.k_ablation),
        ("Sanity check (GPT-2 XL)", tables.sanity),
    ):
        if rows:
            lines += [
                "",
                f"{title}:",
                "",
                "| run | PRISM (max) AUC | PRISM (max) MAD | PRISM (mean) AUC | PRISM (mean) MAD |",
                "|---|---|---|---|---|",
            ]
            lines += [
                f"| {r.label} | {r.max.auc_text()} | {r.max.mad_text()} | {r.mean.auc_text()} | "
                f"{r.mean.mad_text()} |"
                for r in rows
            ]
    if tables.polysemanticity:
        lines += [
            "",
            "Polysemanticity (mean pairwise cosine of a feature's descriptions vs random descriptions; lower = "
            "more distinct concepts):",
            "",
            "| model | descriptions | random descriptions | features |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {p.model} | {p.summary.similarity:.3f} | {p.summary.random_baseline:.3f} | {p.summary.n_features} |"
            for p in tables.polysemanticity
        ]
    return "\n".join(lines) + "\n"
