"""Stored DePass attributions as circuit-tracer / Neuronpedia attribution-graph JSON, where the shape allows.

The graph format (circuit-tracer's frontend `graph_models.py`: metadata, qParams, nodes, links) has embedding,
feature, error and logit nodes. A token-level DePass result maps onto it exactly: one embedding node per input token,
the attributed feature as a feature node at the last position, one error node holding the parts no token owns
(model biases, the SAE's encoder bias, the residual component), and a link from each to the feature whose weight is
that part's share, so the weights into the feature sum to its activation. Heads and MLPs have no node type there and
are left out. An upstream-level result maps onto it too: each credited upstream SAE feature is a feature node at its
own layer (its share summed over positions, so placed at the target's position), and the error node holds the other
upstream features, the upstream SAE's decoder bias and error, the BOS state and the biases.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sae_workbench.store import Store

SCHEMA_VERSION = 1
_LAYER_RE = re.compile(r"^blocks\.(\d+)\.")


def _node(
    node_id: str, feature: int, layer: str, ctx: int, kind: str, js_id: str, **extra: Any
) -> dict[str, Any]:
    """One node in the frontend's field order and defaults."""
    return {
        "node_id": node_id, "feature": feature, "layer": layer, "ctx_idx": ctx, "feature_type": kind,
        "token_prob": 0.0, "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0, "jsNodeId": js_id,
        "clerp": extra.pop("clerp", ""), "influence": extra.pop("influence", None),
        "activation": extra.pop("activation", None),
    }  # fmt: skip


def graph_json(result: dict[str, Any], token_strings: list[str], model: str, slug: str) -> dict[str, Any]:
    """A token-level DePass result (`TokenAttribution.to_dict()`) as one attribution graph."""
    match = _LAYER_RE.match(result["hook"])
    layer = int(match.group(1)) if match else 0
    t, feature = int(result["position"]), int(result["feature"])
    ids = result["token_ids_N"]
    target_id = f"{layer}_{feature}_{t}"
    total = abs(result["pre_activation"]) or 1.0
    target = _node(
        target_id, feature, str(layer), t, "cross layer transcoder", f"{layer}_{feature}-0",
        activation=result["activation"], influence=1.0,
        clerp=f"feature {feature} at {result['hook']} ({result['rule']} rule)",
    )  # fmt: skip
    nodes = [target]
    links = []
    for n, (vocab, share) in enumerate(zip(ids, result["scores_N"], strict=True)):
        node_id = f"E_{vocab}_{n}"
        label = token_strings[n] if n < len(token_strings) else str(vocab)
        nodes.append(
            _node(
                node_id, n, "E", n, "embedding", f"E_{vocab}-{n}", clerp=label, influence=abs(share) / total
            )
        )
        links.append({"source": node_id, "target": target_id, "weight": share})
    rest = result["model_bias"] + result["sae_bias"] + result["rest"]
    error_id = f"{layer}_-1_{t}"
    nodes.append(
        _node(error_id, -1, str(layer), t, "mlp reconstruction error", f"{layer}_-1-{t}", influence=abs(rest) / total,
              clerp="biases (model and SAE encoder) and the residual component")
    )  # fmt: skip
    links.append({"source": error_id, "target": target_id, "weight": rest})
    return {
        "metadata": {
            "slug": slug, "scan": model, "transcoder_list": [], "prompt_tokens": token_strings[: t + 1],
            "prompt": "".join(token_strings[: t + 1]), "node_threshold": None, "schema_version": SCHEMA_VERSION,
            "info": {"method": "DePass (arXiv 2510.18462)", "rule": result["rule"], "temperature": result["temperature"]},
        },
        "qParams": {"pinnedIds": [target_id], "supernodes": [], "linkType": "both", "clickedId": target_id, "sg_pos": ""},
        "nodes": nodes,
        "links": links,
    }  # fmt: skip


def upstream_graph_json(
    result: dict[str, Any], token_strings: list[str], model: str, slug: str
) -> dict[str, Any]:
    """An upstream-level DePass result (`UpstreamAttribution.to_dict()`) as one two-layer attribution graph."""
    match = _LAYER_RE.match(result["hook"])
    layer = int(match.group(1)) if match else 0
    up_match = _LAYER_RE.match(result["upstream_hook"])
    up_layer = int(up_match.group(1)) if up_match else 0
    t, feature = int(result["position"]), int(result["feature"])
    target_id = f"{layer}_{feature}_{t}"
    total = abs(result["pre_activation"]) or 1.0
    nodes = [
        _node(
            target_id, feature, str(layer), t, "cross layer transcoder", f"{layer}_{feature}-0",
            activation=result["activation"], influence=1.0,
            clerp=f"feature {feature} at {result['hook']} ({result['rule']} rule)",
        )
    ]  # fmt: skip
    links = []
    for j, share in zip(result["upstream_features_K"], result["scores_K"], strict=True):
        node_id = f"{up_layer}_{j}_{t}"
        nodes.append(
            _node(
                node_id, int(j), str(up_layer), t, "cross layer transcoder", f"{up_layer}_{j}-0",
                influence=abs(share) / total, clerp=f"upstream feature {j} at {result['upstream_hook']}",
            )
        )  # fmt: skip
        links.append({"source": node_id, "target": target_id, "weight": share})
    rest = sum(result[k] for k in ("other_features", "b_dec", "bos", "sae_error", "model_bias", "sae_bias"))
    error_id = f"{up_layer}_-1_{t}"
    nodes.append(
        _node(error_id, -1, str(up_layer), t, "mlp reconstruction error", f"{up_layer}_-1-{t}",
              influence=abs(rest) / total,
              clerp="other upstream features, the upstream SAE's b_dec and error, BOS and the biases")
    )  # fmt: skip
    links.append({"source": error_id, "target": target_id, "weight": rest})
    graph = graph_json(
        {**result, "token_ids_N": [], "scores_N": [], "rest": 0.0, "model_bias": 0.0, "sae_bias": 0.0},
        token_strings, model, slug,
    )  # fmt: skip
    graph["metadata"]["info"]["upstream_hook"] = result["upstream_hook"]
    graph["nodes"], graph["links"] = nodes, links
    return graph


def export_graphs(
    store: Store, sae_id: str, features: list[int], folder: Path, tokenizer: Any = None
) -> list[Path]:
    """Write one graph file per stored token-level DePass result of `features`; return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    record = store.get_sae(sae_id)
    progress = store.index_progress(sae_id)
    paths = []
    for feature in features:
        rows = store.attributions(sae_id, feature, level="tokens", method="depass")
        rows += store.attributions(sae_id, feature, level="upstream", method="depass")
        for row in rows:
            if row.window_id is not None and progress is not None:
                strings = store.get_windows(progress.corpus, [row.window_id])[0].token_strings
            elif tokenizer is not None and "token_ids_N" in row.result:
                strings = [tokenizer.decode([i]) for i in row.result["token_ids_N"]]
            else:
                strings = [str(i) for i in row.result.get("token_ids_N", [])]
            upstream = row.level == "upstream"
            slug = f"{sae_id}-f{feature}-w{row.window_id}-p{row.position}-{row.rule}" + (
                "-upstream" if upstream else ""
            )
            path = folder / f"{slug}.json"
            build = upstream_graph_json if upstream else graph_json
            path.write_text(json.dumps(build(row.result, list(strings), record.model, slug)))
            paths.append(path)
    return paths
