"""Stored DePass attributions as circuit-tracer / Neuronpedia attribution-graph JSON, where the shape allows.

The format is what circuit-tracer writes (safety-research/circuit-tracer @ 21ab88aa,
circuit_tracer/frontend/graph_models.py and utils/create_graph_files.py): `metadata`, `qParams`, `nodes`, `links`, and
what Neuronpedia accepts on upload (hijohnnylin/neuronpedia @ ebb8426f, apps/webapp/app/api/graph/graph-schema.json,
checked with Ajv before a graph is saved; vendored in tests/data/neuronpedia/, and tests/evaluation/attribution/test_graph_export.py
validates every export against it and against circuit-tracer's own field rules). Node conventions taken from there:

- a feature node is `{layer}_{index}_{pos}`, jsNodeId `{layer}_{index}-0`, feature_type "cross layer transcoder", and
  its `feature` is the Cantor pairing of (layer, index), as circuit-tracer writes and Neuronpedia expects;
- an error node is `{layer}_-1_{pos}`, jsNodeId `{layer}_{pos}-0`, feature -1, feature_type "mlp reconstruction error";
- an embedding node is `E_{vocab id}_{pos}`, jsNodeId `E_{vocab id}-{pos}`, feature = pos, layer "E";
- a link `{source, target, weight}` is the source's direct contribution to the target;
- `influence` is circuit-tracer's cumulative influence: with the nodes sorted by |contribution|, largest first, the
  fraction of the total that this node and every larger one carry. The frontend hides a node whose influence exceeds
  its pruning threshold, so the smallest shares go first. `node_threshold` is omitted (the graph is not pruned; a null
  one fails Neuronpedia's schema).

A token-level DePass result maps onto this exactly: one embedding node per input token, the attributed feature as a
feature node at the last position, one error node holding the parts no token owns (model biases, the SAE's encoder
bias, the residual component), and a link from each to the feature whose weight is that part's share, so the weights
into the feature sum to its pre-activation (its activation when it fires). Heads and MLPs have no node type there and
are left out. An upstream-level result maps onto it too: each credited upstream SAE feature is a feature node at its
own layer (its share summed over positions, so placed at the target's position), and the error node holds the other
upstream features, the upstream SAE's decoder bias and error, the BOS state and the biases.

What is left out, and why:
- logit nodes: circuit-tracer's graphs end in the output logits; a DePass graph ends in the attributed feature, so
  there is no logit to draw. The format does not require one, but Neuronpedia's replacement and completeness scores
  weigh nodes by their logits' probabilities and read 0 here.
- `scan` is the model name as the workbench knows it; Neuronpedia's upload also wants an existing Neuronpedia model id
  and only [A-Za-z0-9_.-] in scan and slug (the slug always is). Set scan by hand before uploading elsewhere.
- Neuronpedia's graph page takes the largest numeric layer as the last one and refuses a graph whose largest is 0: a
  token graph of an SAE on block 0 renders in circuit-tracer's local server but not there (a warning is logged).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import sae_workbench
from sae_workbench.store import Store

SCHEMA_VERSION = 1
"""circuit-tracer's metadata.schema_version for this layout (graph_models.py Metadata)."""
_LAYER_RE = re.compile(r"^blocks\.(\d+)\.")
log = logging.getLogger(__name__)


def cantor_pair(layer: int, index: int) -> int:
    """The `feature` of a feature node: the Cantor pairing of (layer, index), one integer per feature of any layer."""
    return (layer + index) * (layer + index + 1) // 2 + index


def _layer(hook: str) -> int:
    """The block number in a `blocks.N.` hook name (0 for a hook outside the blocks, e.g. hook_embed)."""
    match = _LAYER_RE.match(hook)
    return int(match.group(1)) if match else 0


def _node(
    node_id: str,
    feature: int,
    layer: str,
    ctx: int,
    kind: str,
    js_id: str,
    clerp: str = "",
    activation: float | None = None,
) -> dict[str, Any]:
    """One node with every field circuit-tracer writes, in its order and with its defaults."""
    return {
        "node_id": node_id, "feature": feature, "layer": layer, "ctx_idx": ctx, "feature_type": kind,
        "token_prob": 0.0, "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0, "jsNodeId": js_id,
        "clerp": clerp, "influence": None, "activation": activation,
    }  # fmt: skip


def _feature_node(
    layer: int, index: int, pos: int, clerp: str, activation: float | None = None
) -> dict[str, Any]:
    """An SAE feature as circuit-tracer's transcoder-feature node."""
    return _node(
        f"{layer}_{index}_{pos}", cantor_pair(layer, index), str(layer), pos, "cross layer transcoder",
        f"{layer}_{index}-0", clerp, activation,
    )  # fmt: skip


def _error_node(layer: int, pos: int, clerp: str) -> dict[str, Any]:
    """The parts no token or listed feature owns, as circuit-tracer's error node of (layer, pos)."""
    return _node(
        f"{layer}_-1_{pos}", -1, str(layer), pos, "mlp reconstruction error", f"{layer}_{pos}-0", clerp
    )


def _set_influence(sources: list[dict[str, Any]], weights: list[float]) -> None:
    """circuit-tracer's cumulative influence on each source node: sorted by |weight| descending, the running share."""
    total = sum(abs(w) for w in weights)
    if total == 0:
        return  # nothing to rank: influence stays null, so the frontend shows every node
    running = 0.0
    for i in sorted(range(len(weights)), key=lambda i: -abs(weights[i])):
        running += abs(weights[i])
        sources[i]["influence"] = running / total


def _graph(
    result: dict[str, Any],
    token_strings: list[str],
    model: str,
    slug: str,
    target: dict[str, Any],
    sources: list[dict[str, Any]],
    weights: list[float],
    settings: dict[str, Any],
) -> dict[str, Any]:
    """Assemble one graph: `sources` each link into `target` with its weight."""
    _set_influence(sources, weights)
    t = int(result["position"])
    return {
        "metadata": {
            "slug": slug, "scan": model, "transcoder_list": [], "prompt_tokens": token_strings[: t + 1],
            "prompt": "".join(token_strings[: t + 1]), "schema_version": SCHEMA_VERSION,
            "info": {
                "description": f"DePass (arXiv 2510.18462) shares of {target['clerp']}; links sum to its pre-activation",
                "generator": {"name": "sae-workbench", "version": sae_workbench.__version__},
            },
            "generation_settings": {"method": "depass", "rule": result["rule"], "temperature": result["temperature"],
                                    **settings},
        },
        "qParams": {"pinnedIds": [target["node_id"]], "supernodes": [], "linkType": "both",
                    "clickedId": target["node_id"], "sg_pos": ""},
        "nodes": [target, *sources],
        "links": [{"source": s["node_id"], "target": target["node_id"], "weight": w}
                  for s, w in zip(sources, weights, strict=True)],
    }  # fmt: skip


def _target_node(result: dict[str, Any], layer: int, feature: int, t: int) -> dict[str, Any]:
    """The attributed feature's node at its position, labelled with its hook and MLP rule."""
    label = f"feature {feature} at {result['hook']} ({result['rule']} rule)"
    return _feature_node(layer, feature, t, label, result["activation"])


def graph_json(result: dict[str, Any], token_strings: list[str], model: str, slug: str) -> dict[str, Any]:
    """A token-level DePass result (`TokenAttribution.to_dict()`) as one attribution graph."""
    layer, t, feature = _layer(result["hook"]), int(result["position"]), int(result["feature"])
    if layer == 0:
        log.warning(
            "graph of %s: Neuronpedia's graph page refuses a graph whose last layer is 0", result["hook"]
        )
    target = _target_node(result, layer, feature, t)
    sources, weights = [], []
    for n, (vocab, share) in enumerate(zip(result["token_ids_N"], result["scores_N"], strict=True)):
        label = token_strings[n] if n < len(token_strings) else str(vocab)
        sources.append(_node(f"E_{vocab}_{n}", n, "E", n, "embedding", f"E_{vocab}-{n}", label))
        weights.append(share)
    sources.append(_error_node(layer, t, "biases (model and SAE encoder) and the residual component"))
    weights.append(result["model_bias"] + result["sae_bias"] + result["rest"])
    return _graph(result, token_strings, model, slug, target, sources, weights, {"hook": result["hook"]})


def upstream_graph_json(
    result: dict[str, Any], token_strings: list[str], model: str, slug: str
) -> dict[str, Any]:
    """An upstream-level DePass result (`UpstreamAttribution.to_dict()`) as one two-layer attribution graph."""
    layer, up_layer = _layer(result["hook"]), _layer(result["upstream_hook"])
    t, feature = int(result["position"]), int(result["feature"])
    target = _target_node(result, layer, feature, t)
    sources, weights = [], []
    for j, share in zip(result["upstream_features_K"], result["scores_K"], strict=True):
        sources.append(
            _feature_node(up_layer, int(j), t, f"upstream feature {j} at {result['upstream_hook']}")
        )
        weights.append(share)
    sources.append(
        _error_node(
            up_layer, t, "other upstream features, the upstream SAE's b_dec and error, BOS and the biases"
        )
    )
    weights.append(
        sum(result[k] for k in ("other_features", "b_dec", "bos", "sae_error", "model_bias", "sae_bias"))
    )
    settings = {"hook": result["hook"], "upstream_hook": result["upstream_hook"]}
    return _graph(result, token_strings, model, slug, target, sources, weights, settings)


def export_graphs(
    store: Store, sae_id: str, features: list[int], folder: Path, tokenizer: Any = None
) -> list[Path]:
    """Write one graph file per stored token- or upstream-level DePass result of `features`; return the paths."""
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
            # allow_nan=False: a NaN would be written as the bare word NaN, which is not JSON and which Neuronpedia rejects
            path.write_text(json.dumps(build(row.result, list(strings), record.model, slug), allow_nan=False))
            paths.append(path)
    return paths
