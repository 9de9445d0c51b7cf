"""App benchmark: Feature-page server time at ≥4608 features and ≥10M activation rows, and explanation search over
10k explanations. Baselines measured in the same run: the store's raw dashboard calls (stats + top + quantile
examples) for the page, and a substring scan of all explanation texts for search.

    .venv/bin/python -m bench.app_bench                 # full: 10M rows, 10k explanations
    .venv/bin/python -m bench.app_bench --rows 1000000 --explanations 2000      # quick

The synthetic store comes from bench/store_bench.py (Zipf feature frequencies, log-normal values, TopK k=32).

Each page run is a fresh AppTest (a new session, caches cleared: cold). Streamlit's scan of every installed
distribution for custom components, which `streamlit run` does once at server start, is done once before the runs
and printed on its own line: AppTest would repeat it on every fresh instance, and with the `scale` and `interactions`
extras installed (~200 distributions) it costs more than the page (bench/NOTES.md, 2026-12-05). The page is timed
again after `add_attributions` stores what `workbench attribute` and `workbench interactions` write for the feature
(issue 21: the page stays under its budget with attribution precomputed).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

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
    from sae_workbench.store.rows import ExplanationRecord

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


def add_attributions(store: Store, sae_id: str, feature: int, seed: int = 0) -> None:
    """What `workbench attribute` + `workbench interactions` store for one feature with their defaults, sized for
    SmolLM2 at layer 3: DePass token and component rows for its 3 top examples (4 blocks × 9 heads, 4 MLPs), zero and
    mean ablation, steering at 3 alphas, and one ProxySPEX result with 10 terms (values random, shapes real)."""
    from sae_workbench.store.attributions import AttributionRecord, EffectRecord
    from sae_workbench.store.interactions import InteractionRecord

    rng = np.random.default_rng(seed)
    top = store.top_examples(sae_id, feature, 3)
    rows = []
    for ex in top:
        n = ex.max_position + 1
        tokens = {"token_ids_N": rng.integers(0, 49152, n).tolist(), "scores_N": rng.normal(0, 1, n).tolist(),
                  "bos_position": 0, "rule": "softmax", "activation": ex.max_value, "pre_activation": ex.max_value,
                  "completeness_error": 1e-7}  # fmt: skip
        components = {"head_scores_LH": rng.normal(0, 1, (4, 9)).tolist(), "mlp_scores_L": rng.normal(0, 1, 4).tolist(),
                      "activation": ex.max_value, "pre_activation": ex.max_value}  # fmt: skip
        for level, result in (("tokens", tokens), ("components", components)):
            rows.append(AttributionRecord(sae_id, feature, ex.window_id, ex.max_position, level, "depass", "softmax",
                                          result, f"bench/{feature}/{ex.window_id}/{level}"))  # fmt: skip
    store.add_attributions(rows)

    def shifts() -> list[dict[str, object]]:
        return [{"token_id": int(t), "token": f" tok{t}", "logit_change": float(v)}
                for t, v in zip(rng.integers(0, 49152, 10), rng.normal(0, 1, 10), strict=True)]  # fmt: skip

    ids = [e.window_id for e in top]
    ablation = {"mean_delta_loss": 0.12, "mean_delta_loss_fired": 0.5, "mean_kl": 0.02}
    steering = {"prompt_ids": [1, 2, 3], "baseline_continuation": "plain text " * 8, "effects": [
        {"alpha": a, "mean_delta_loss": 0.3, "mean_kl": 0.1, "promoted": shifts(), "suppressed": shifts(),
         "continuation": "steered text " * 8} for a in (-5.0, 5.0, 10.0)]}  # fmt: skip
    store.add_effects([
        EffectRecord(sae_id, feature, "zero_ablation", {**ablation, "promoted": shifts(), "suppressed": shifts()},
                     f"bench/{feature}/zero", ids),
        EffectRecord(sae_id, feature, "mean_ablation", {**ablation, "promoted": shifts(), "suppressed": shifts()},
                     f"bench/{feature}/mean", ids),
        EffectRecord(sae_id, feature, "steering", steering, f"bench/{feature}/steer", ids),
    ])  # fmt: skip
    terms = [{"players": [i, i + 1], "labels": [f" a{i}", f" b{i}"], "value": float(v), "singletons": [0.1, -0.2]}
             for i, v in enumerate(rng.normal(0, 1, 10))]  # fmt: skip
    result = {"top_terms": terms, "order2": [{k: t[k] for k in ("players", "labels", "value")} for t in terms],
              "index": "FBII", "r2": {"proxyspex": 0.9, "shapley": 0.4, "banzhaf": 0.5}, "full_value": 2.5,
              "empty_value": 0.0, "wall_s": 60.0}  # fmt: skip
    store.add_interactions([InteractionRecord(sae_id, feature, f"{feature:016x}", "tokens", 1000, 0, top[0].window_id,
                                              top[0].max_position, "ok", result, f"bench/{feature}/inter")])  # fmt: skip


def _n_distributions() -> int:
    """Installed distributions (what streamlit's component discovery scans)."""
    from importlib.metadata import distributions

    return sum(1 for _ in distributions())


def component_discovery() -> tuple[Any, float]:
    """Streamlit's scan of every installed distribution for custom components, done once (ms). `streamlit run` does it
    once at server start (Runtime.__init__); AppTest does it on the first run of every AppTest, where it costs more
    than the page itself once the venv holds a few hundred distributions (the `scale` and `interactions` extras)."""
    try:
        from streamlit.components.v2.component_manager import BidiComponentManager
    except ImportError:  # an older streamlit without custom components v2: nothing to share
        return None, 0.0
    t0 = time.perf_counter()
    manager = BidiComponentManager()
    manager.discover_and_register_components(start_file_watching=False)
    return manager, (time.perf_counter() - t0) * 1000


_DISCOVERED: list[Any] = []


def new_apptest() -> Any:
    """A fresh AppTest of the app (its own session: cold), given the once-per-server component registry."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=60)
    if _DISCOVERED and _DISCOVERED[0] is not None and hasattr(at, "_bidi_component_manager"):
        at._bidi_component_manager = _DISCOVERED[0]  # what a server shares between sessions
    return at


def main() -> None:
    """Build the store, time the Feature page and search, print a table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--explanations", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    from sae_workbench.app import queries

    manager, discovery_ms = component_discovery()
    _DISCOVERED.append(manager)
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
                at = new_apptest()
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

        # The same page once `workbench attribute` and `workbench interactions` have stored their results (issue 21:
        # the page stays under its budget with attribution precomputed).
        for label, feature in (("median-density feature", median_f), ("densest feature", dense_f)):
            add_attributions(store, "bench", feature)

            def apptest_attr(f: int = feature) -> None:
                queries._feature_dashboard.clear()
                queries._feature_attributions.clear()
                queries._feature_interactions.clear()
                at = new_apptest()
                at.query_params["sae"] = "bench"
                at.query_params["feature"] = str(f)
                at.switch_page("page_scripts/feature.py")
                at.run()
                assert not at.exception, [e.value for e in at.exception]
                assert any("Token shares" in str(m.value) for m in at.markdown), (
                    "the page shows no stored attribution"
                )

            attr_ms = timed(apptest_attr, max(3, args.repeat // 2))
            base = next(ms for name, ms, _ in results if name == f"{label}: store raw calls (baseline)")
            results.append((f"{label}, DePass + effects + interactions stored: AppTest full page run, cold cache",
                            attr_ms, attr_ms / base))  # fmt: skip

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

    print(f"streamlit component discovery (once per server start; done once here, outside the page runs): "
          f"{discovery_ms:.0f} ms over {_n_distributions()} installed distributions")  # fmt: skip
    print(f"store: {rows:,} activation rows, {D_SAE} features, {args.explanations:,} explanations, "
          f"built in {build_s:.0f}s ({info['mib_per_1m_rows']:.1f} MiB per 1M rows); "
          f"semantic index cold build {index_build_s:.1f}s")  # fmt: skip
    print("| measurement | ms (median) | ratio vs baseline |")
    print("|---|---|---|")
    for name, ms, ratio in results:
        print(f"| {name} | {ms:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
