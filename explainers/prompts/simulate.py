"""LLM simulator prompt: predict each token's activation 0..5 from an explanation, answered as strict JSON."""

from __future__ import annotations

from collections.abc import Sequence

from sae_workbench.examples.records import Record
from sae_workbench.llm.jsonparse import as_int_list, as_list, as_object, parse_json_strict

PROMPT_VERSION = "simulate-v1"

SYSTEM = (
    "You predict how strongly a feature of a language model activates on each token of a text, given an "
    "explanation of the feature. Activations are integers 0..5 (0 = not active, 5 = strongest). A token's "
    "activation depends only on that token and the tokens before it."
)


def simulate_prompt(explanation: str, records: Sequence[Record]) -> tuple[str, str]:
    """(system, user) asking for per-token predictions for every record."""
    texts = "\n".join(f"Text {i + 1} ({len(r)} tokens): {r.tokens_json}" for i, r in enumerate(records))
    user = (
        f"Explanation: {explanation}\n\n{texts}\n\n"
        'Reply with JSON only: {"predictions": [[...], ...]} with one list per text, in order, holding one '
        "integer 0..5 per token."
    )
    return SYSTEM, user


LEVELS = list(range(6))
"""The activation levels a prediction may take (0..5)."""


def predictions_schema(records: Sequence[Record]) -> dict[str, object]:
    """JSON schema of the answer for `records`: {"predictions": one list per record (in order), each exactly as long
    as its record, of integers 0..5}. The lengths are in the schema so a constrained endpoint cannot miscount."""
    rows = [
        {
            "type": "array",
            "items": {"type": "integer", "enum": LEVELS},
            "minItems": len(r),
            "maxItems": len(r),
        }
        for r in records
    ]
    predictions = {"type": "array", "prefixItems": rows, "items": False, "minItems": len(rows),
                   "maxItems": len(rows)}  # fmt: skip
    return {"type": "object", "properties": {"predictions": predictions}, "required": ["predictions"],
            "additionalProperties": False}  # fmt: skip


def parse_predictions(text: str, records: Sequence[Record]) -> list[list[int]]:
    """Strictly parse the predictions: one list per record, one integer 0..5 per token (ValueError otherwise)."""
    obj = as_object(parse_json_strict(text), required=("predictions",))
    rows = as_list(obj["predictions"], length=len(records))
    return [as_int_list(row, length=len(r), lo=0, hi=5) for row, r in zip(rows, records, strict=True)]
