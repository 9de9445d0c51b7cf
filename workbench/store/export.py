"""Neuronpedia-style export: one gzipped JSON line per feature with statistics, top examples and explanations.

    export_neuronpedia(store, sae_id, "runs/features.jsonl.gz", set_name="res-wb")

Feature ids follow Neuronpedia's "<model>/<layer>-<set>/<index>" (e.g. "smollm2-135m/3-res-wb/42").
Parquet export of every table is `Store.export_parquet(folder)`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from sae_workbench.models import hook_layer
from sae_workbench.store.store import Store


def neuronpedia_feature_id(model: str, layer: int, set_name: str, feature: int) -> str:
    """Neuronpedia feature id "<model>/<layer>-<set>/<index>"."""
    return f"{model}/{layer}-{set_name}/{feature}"


def export_neuronpedia(
    store: Store,
    sae_id: str,
    path: str | Path,
    set_name: str = "res-wb",
    n_examples: int = 20,
    features: list[int] | None = None,
) -> int:
    """Write active features of `sae_id` (or `features`) as gzipped JSONL; return the number written."""
    sae = store.get_sae(sae_id)
    progress = store.index_progress(sae_id)
    assert progress is not None
    layer = hook_layer(sae.hook)
    wanted = features if features is not None else store.feature_table(sae_id).column("feature").to_pylist()
    explanations: dict[int, list[dict[str, Any]]] = {}
    with store.session():
        for exp in store.explanations(sae_id):
            scores = [
                {"scorer": s.scorer, "negative_source": s.negative_source, "metrics": s.metrics}
                for s in store.scores(explanation_id=exp.id)
            ]
            explanations.setdefault(exp.feature, []).append(
                {
                    "description": exp.text,
                    "typeName": exp.explainer,
                    "explanationModelName": exp.llm_model,
                    "scores": scores,
                }
            )
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(out, "wt", encoding="utf-8") as fh:
            for feature in wanted:
                stats = store.feature_stats(sae_id, feature)
                top = store.top_examples(sae_id, feature, n_examples)
                ids = [e.window_id for e in top]
                windows = store.get_windows(progress.corpus, ids)
                values = store.window_activations(sae_id, feature, ids)
                record = {
                    "id": neuronpedia_feature_id(sae.model, layer, set_name, feature),
                    "modelId": sae.model,
                    "layer": f"{layer}-{set_name}",
                    "index": feature,
                    "hookName": sae.hook,
                    "frac_nonzero": stats.density,
                    "maxActApprox": stats.max_value,
                    "freq_hist_data_bar_heights": stats.hist_counts,
                    "freq_hist_data_bar_values": stats.hist_edges[:-1],
                    "pos_str": stats.logit_top_tokens,
                    "pos_values": stats.logit_top_values,
                    "neg_str": stats.logit_bottom_tokens,
                    "neg_values": stats.logit_bottom_values,
                    "topkCosSimIndices": stats.decoder_neighbours,
                    "topkCosSimValues": stats.decoder_cosines,
                    "activations": [
                        {
                            "tokens": w.token_strings,
                            "values": v.tolist(),
                            "maxValue": e.max_value,
                            "maxValueTokenIndex": e.max_position,
                            "windowId": e.window_id,
                        }
                        for e, w, v in zip(top, windows, values, strict=True)
                    ],
                    "explanations": explanations.get(feature, []),
                }
                fh.write(json.dumps(record) + "\n")
    return len(wanted)
