"""Attribution-graph export (evaluation/attribution/export.py) against the format's own definitions, not its earlier output.

- Neuronpedia's JSON schema, vendored unchanged (tests/data/neuronpedia/graph-schema.json, hijohnnylin/neuronpedia @
  ebb8426f apps/webapp/app/api/graph/graph-schema.json): what Neuronpedia's upload checks with Ajv before it saves a graph.
- circuit-tracer's field rules, as a schema written from its pydantic models (tests/data/circuit_tracer_graph.schema.json,
  safety-research/circuit-tracer @ 21ab88aa circuit_tracer/frontend/graph_models.py), plus what a schema cannot say:
  Cantor-paired feature numbers, ids that agree with layer / position / feature, links between existing nodes, and
  circuit-tracer's cumulative influence (graph.py prune_graph).
- Identities: the links into the feature sum to the activation the SAE itself computes at that position.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import torch
from sae_lens import StandardSAE, StandardSAEConfig

from sae_workbench.evaluation.attribution.depass import depass_tokens, depass_upstream
from sae_workbench.evaluation.attribution.export import cantor_pair, graph_json, upstream_graph_json

DATA = Path(__file__).resolve().parents[2] / "data"
NEURONPEDIA = json.loads((DATA / "neuronpedia/graph-schema.json").read_text())
CIRCUIT_TRACER = json.loads((DATA / "circuit_tracer_graph.schema.json").read_text())
HOOK, UP_HOOK = "blocks.1.hook_resid_post", "blocks.0.hook_resid_post"


def format_errors(graph: dict[str, Any]) -> list[str]:
    """Every violation of either schema or of circuit-tracer's cross-field conventions, as 'where: what'."""
    text = json.dumps(graph, allow_nan=False)  # NaN / inf is not JSON, and Ajv would never see the file
    doc = json.loads(text)
    errors = [
        f"neuronpedia {'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft7Validator(NEURONPEDIA).iter_errors(
            doc
        )  # the schema's own $schema: draft-07
    ]
    errors += [
        f"circuit-tracer {'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(CIRCUIT_TRACER).iter_errors(doc)
    ]
    ids = [n["node_id"] for n in doc["nodes"]]
    if len(ids) != len(set(ids)):
        errors.append("node ids are not unique")
    for node in doc["nodes"]:
        kind, nid, layer, ctx, feat = (
            node[k] for k in ("feature_type", "node_id", "layer", "ctx_idx", "feature")
        )
        if kind == "cross layer transcoder":
            lay, index, pos = (int(x) for x in nid.split("_"))
            # circuit-tracer: feature = cantor_pairing(layer, feat_idx), (x + y)(x + y + 1)/2 + y
            if (str(lay), pos, feat) != (layer, ctx, (lay + index) * (lay + index + 1) // 2 + index):
                errors.append(f"{nid}: layer {layer!r}, ctx {ctx}, feature {feat} disagree with the id")
            if node["jsNodeId"] != f"{lay}_{index}-0":
                errors.append(f"{nid}: jsNodeId {node['jsNodeId']}")
        elif kind == "mlp reconstruction error":
            if nid != f"{layer}_-1_{ctx}" or node["jsNodeId"] != f"{layer}_{ctx}-0":
                errors.append(f"{nid}: error node ids {node['jsNodeId']} vs layer {layer}, ctx {ctx}")
        elif kind == "embedding":
            vocab = nid.split("_")[1]
            if nid != f"E_{vocab}_{ctx}" or feat != ctx or node["jsNodeId"] != f"E_{vocab}-{ctx}":
                errors.append(f"{nid}: embedding node fields disagree")
        if ctx >= len(doc["metadata"]["prompt_tokens"]):
            errors.append(f"{nid}: ctx_idx {ctx} past the prompt")
    for link in doc["links"]:
        if link["source"] not in ids or link["target"] not in ids:
            errors.append(f"link {link['source']} -> {link['target']}: unknown node")
    for pinned in doc["qParams"]["pinnedIds"]:
        if pinned not in ids:
            errors.append(f"pinned {pinned}: unknown node")
    if re.search(r"[^a-zA-Z0-9_.-]", doc["metadata"]["slug"]):
        errors.append("slug: Neuronpedia's upload allows only [a-zA-Z0-9_.-]")
    return errors


def cumulative_influence(weights: list[float]) -> list[float]:
    """circuit-tracer's node influence (graph.py prune_graph): sort descending, cumsum / sum, back to node order."""
    w = np.abs(np.asarray(weights, dtype=float))
    order = np.argsort(-w, kind="stable")
    out = np.empty_like(w)
    out[order] = np.cumsum(w[order]) / w.sum()
    return out.tolist()


def test_a_planted_token_result_has_the_reference_ids_and_influence():
    """Hand-made shares for feature 5 at block 3, position 2: every id and number written out from the reference."""
    result = {
        "hook": "blocks.3.hook_resid_post", "position": 2, "feature": 5, "rule": "up_linear", "temperature": 0.1,
        "token_ids_N": [1, 40, 7], "scores_N": [0.5, -2.0, 1.0], "rest": 0.0, "model_bias": 0.25,
        "sae_bias": 0.25, "pre_activation": 0.0, "activation": 0.0,
    }  # fmt: skip
    result["pre_activation"] = result["activation"] = 0.5 - 2.0 + 1.0 + 0.5
    graph = graph_json(result, ["<s>", " river", " bank"], "tiny-0", "sae-f5-w1-p2-up_linear")
    assert format_errors(graph) == []
    by_id = {n["node_id"]: n for n in graph["nodes"]}
    assert list(by_id) == ["3_5_2", "E_1_0", "E_40_1", "E_7_2", "3_-1_2"]
    assert by_id["3_5_2"]["feature"] == cantor_pair(3, 5) == 41 and by_id["3_5_2"]["jsNodeId"] == "3_5-0"
    assert by_id["3_-1_2"]["jsNodeId"] == "3_2-0" and by_id["3_-1_2"]["feature"] == -1
    # |shares| 0.5, 2, 1 and 0.5 (the biases) of 4: largest first, running sums 2, 3, 3.5, 4
    assert [by_id[i]["influence"] for i in ("E_40_1", "E_7_2", "E_1_0", "3_-1_2")] == [0.5, 0.75, 0.875, 1.0]
    assert by_id["3_5_2"]["influence"] is None  # the root: pinned, shown at any threshold
    assert graph["metadata"]["prompt"] == "<s> river bank" and "node_threshold" not in graph["metadata"]
    assert sum(link["weight"] for link in graph["links"]) == pytest.approx(result["pre_activation"])


def test_the_old_export_shape_fails_the_format():
    """The checks can fail: a null node_threshold (Neuronpedia's schema wants a number), a raw feature index where
    circuit-tracer writes the Cantor pair, the error node's old jsNodeId, and a link to a node that does not exist."""
    result = {
        "hook": "blocks.3.hook_resid_post", "position": 1, "feature": 5, "rule": "softmax", "temperature": 0.1,
        "token_ids_N": [1, 40], "scores_N": [0.5, 1.0], "rest": 0.0, "model_bias": 0.0, "sae_bias": 0.0,
        "pre_activation": 1.5, "activation": 1.5,
    }  # fmt: skip
    graph = graph_json(result, ["<s>", " bank"], "tiny-0", "slug")
    graph["metadata"]["node_threshold"] = None
    graph["nodes"][0]["feature"] = 5
    graph["nodes"][-1]["jsNodeId"] = "3_-1-1"
    graph["links"].append({"source": "E_9_0", "target": "3_5_1", "weight": 0.0})
    errors = format_errors(graph)
    assert any(e.startswith("neuronpedia metadata/node_threshold") for e in errors)
    assert any("3_5_1: layer" in e for e in errors) and any("3_-1_1: error node" in e for e in errors)
    assert any("E_9_0 -> 3_5_1: unknown node" in e for e in errors)


@pytest.fixture(scope="module")
def attributed(tiny_model):
    """Token- and upstream-level DePass results of the most active feature of a random SAE on the tiny model."""
    torch.manual_seed(0)
    sae = StandardSAE(StandardSAEConfig(d_in=tiny_model.cfg.d_model, d_sae=64))
    upstream = StandardSAE(StandardSAEConfig(d_in=tiny_model.cfg.d_model, d_sae=64))
    tokens_N = tiny_model.to_tokens("The fisherman cast his line from the river bank")[0]
    with torch.no_grad():
        _, cache = tiny_model.run_with_cache(tokens_N[None], names_filter=[HOOK])
        acts = sae.encode(cache[HOOK][0, -1][None])[0]  # the SAE's own activation at the last position
    feature = int(acts.argmax())
    assert float(acts[feature]) > 0
    strings = [tiny_model.tokenizer.decode([int(i)]) for i in tokens_N]
    return {
        "tokens": depass_tokens(tiny_model, sae, HOOK, tokens_N, feature, rule="up_linear").to_dict(),
        "upstream": depass_upstream(tiny_model, sae, HOOK, tokens_N, feature, upstream, UP_HOOK).to_dict(),
        "strings": strings,
        "activation": float(acts[feature]),
        "feature": feature,
        "t": len(tokens_N) - 1,
    }


def test_token_graph_from_depass_passes_both_schemas_and_sums_to_the_sae_activation(attributed):
    result, t, feature = attributed["tokens"], attributed["t"], attributed["feature"]
    graph = graph_json(result, attributed["strings"], "tiny-0", f"abc123-f{feature}-w0-p{t}-up_linear")
    assert format_errors(graph) == []
    target = f"1_{feature}_{t}"
    assert graph["qParams"]["pinnedIds"] == [target] and all(
        link["target"] == target for link in graph["links"]
    )
    kinds = [n["feature_type"] for n in graph["nodes"]]
    assert kinds == ["cross layer transcoder"] + ["embedding"] * (t + 1) + ["mlp reconstruction error"]
    weights = [link["weight"] for link in graph["links"]]
    assert sum(weights) == pytest.approx(attributed["activation"], rel=1e-4, abs=1e-5)
    assert [n["influence"] for n in graph["nodes"][1:]] == pytest.approx(cumulative_influence(weights))
    assert graph["metadata"]["prompt_tokens"] == attributed["strings"]


def test_upstream_graph_from_depass_passes_both_schemas_and_sums_to_the_sae_activation(attributed):
    result, t, feature = attributed["upstream"], attributed["t"], attributed["feature"]
    graph = upstream_graph_json(result, attributed["strings"], "tiny-0", f"abc123-f{feature}-upstream")
    assert format_errors(graph) == []
    upstream = [n for n in graph["nodes"][1:] if n["feature_type"] == "cross layer transcoder"]
    assert [n["node_id"] for n in upstream] == [f"0_{j}_{t}" for j in result["upstream_features_K"]]
    assert {n["layer"] for n in graph["nodes"]} == {"0", "1"}
    weights = [link["weight"] for link in graph["links"]]
    assert sum(weights) == pytest.approx(attributed["activation"], rel=1e-4, abs=1e-5)
    assert [n["influence"] for n in graph["nodes"][1:]] == pytest.approx(cumulative_influence(weights))
