"""App benchmark: Feature-page server time at ≥4608 features and ≥10M activation rows, and explanation search over
10k explanations. Baselines measured in the same run: the store's raw dashboard calls (stats + top + quantile
examples) for the page, and a substring scan of all explanation texts for search.

    .venv/bin/python -m bench.app_bench                 # full: 10M rows, 10k explanations
    .venv/bin/python -m bench.app_bench --rows 1000000 --explanations 2000      # quick

The synthetic store comes from bench/store_bench.py (Zipf feature frequencies, log-normal values, TopK k=32).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.store_bench import D_SAE, build_store, timed
from sae_workbench.examples.sampling import quantile_examples
from sae_workbench.store import Store

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
WORDS = (
    "plural nouns, references to God, Python keywords, closing brackets, numbers in dates, verbs of motion, "
    "legal language, negation, first names, colour words, file paths, French articles, the letter q, rhymes"
).split(", ")


def add_explanations(store: Store, n: int, seed: int = 0) -> None:
    """`n` explanations over random features, in one transaction."""
    from sae_workbench.store.records import ExplanationRecord

    rng = np.random.default_rng(seed)
    with store.session(), store.transaction():
        for i in range(n):
            a, b = rng.choice(len(WORDS), 2, replace=False)
            store.add_explanation(
                ExplanationRecord(
                    sae_id="bench", feature=int(rng.integers(D_SAE)), explainer="lexical", explainer_version="1",
                    prompt_version="", llm_model="", llm_params={}, sampling={}, example_ids=[], negative_ids=[],
                    text=f"{WORDS[a]} and {WORDS[b]} (variant {i})", config_key=f"bench/{i}",
                )
            )  # fmt: skip


def main() -> None:
    """Build the store, time the Feature page and search, print a table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--explanations", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    from streamlit.testing.v1 import AppTest

    from sae_workbench.app import queries

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        t0 = time.perf_counter()
        store, info, _ = build_store(path, args.rows)
        add_explanations(store, args.explanations)
        build_s = time.perf_counter() - t0
        rows = store.activation_count("bench")
        table = store.feature_table("bench")
        active = table.column("feature").to_numpy()
        # A median-density feature (most page views), and the densest (worst case: largest example scan).
        order = np.argsort(table.column("n_active").to_numpy())
        median_f, dense_f = int(active[order[len(order) // 2]]), int(active[order[-1]])
        spath = str(path)

        def raw_store(feature: int) -> None:
            with store.session():
                store.feature_stats("bench", feature)
                store.top_examples("bench", feature, 12)
                quantile_examples(store, "bench", feature, 5, 3)

        results: list[tuple[str, float, float]] = []
        for label, feature in (("median-density feature", median_f), ("densest feature", dense_f)):
            base = timed(lambda f=feature: raw_store(f), args.repeat)

            def cold(f: int = feature) -> None:
                queries._feature_dashboard.clear()
                queries.feature_dashboard(spath, "bench", f)

            cold_ms = timed(cold, args.repeat)
            warm_ms = timed(lambda f=feature: queries.feature_dashboard(spath, "bench", f), args.repeat)
            os.environ["WORKBENCH_STORE"] = spath

            def apptest(f: int = feature) -> None:
                queries._feature_dashboard.clear()
                at = AppTest.from_file(MAIN, default_timeout=60)
                at.query_params["sae"] = "bench"
                at.query_params["feature"] = str(f)
                at.switch_page("page_scripts/feature.py")
                at.run()
                assert not at.exception, [e.value for e in at.exception]

            app_ms = timed(apptest, max(3, args.repeat // 2))
            results += [
                (f"{label}: store raw calls (baseline)", base, 1.0),
                (f"{label}: query layer, cold cache", cold_ms, cold_ms / base),
                (f"{label}: query layer, warm cache", warm_ms, warm_ms / base),
                (f"{label}: AppTest full page run, cold cache", app_ms, app_ms / base),
            ]

        # Search: cold index build once, then warm queries; baseline = substring scan of all texts.
        t0 = time.perf_counter()
        queries.search_explanations(spath, "warm up")
        index_build_s = time.perf_counter() - t0
        texts = [e.text for e in store.explanations("bench")]
        queries_list = ["words about religion", "programming language syntax", "colours", "dates and years"]
        sub_ms = (
            timed(lambda: [[t for t in texts if q.split()[0] in t] for q in queries_list], args.repeat) / 4
        )
        sem_ms = (
            timed(lambda: [queries.search_explanations(spath, q, 20) for q in queries_list], args.repeat) / 4
        )
        results += [
            (f"search {len(texts):,} explanations: substring scan (baseline)", sub_ms, 1.0),
            (f"search {len(texts):,} explanations: MiniLM semantic, warm index", sem_ms, sem_ms / sub_ms),
        ]

    print(f"store: {rows:,} activation rows, {D_SAE} features, {args.explanations:,} explanations, "
          f"built in {build_s:.0f}s ({info['mib_per_1m_rows']:.1f} MiB per 1M rows); "
          f"semantic index cold build {index_build_s:.1f}s")  # fmt: skip
    print("| measurement | ms (median) | ratio vs baseline |")
    print("|---|---|---|")
    for name, ms, ratio in results:
        print(f"| {name} | {ms:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
