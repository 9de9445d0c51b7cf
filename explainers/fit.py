"""Prompts that fit the model's context (issue 32 item 3): before a request is sent, its prompt tokens plus the
completion budget are checked against the context length (`LLMClient.check_fit`); a prompt too long is rebuilt with
less in it, in a documented order per prompt, and what was left out is recorded with the result.

Trim order (each step only while the prompt still does not fit):
- tree revision (`explainers.prompts.tree`): first the branch's middle turns, oldest first (the root's turn, which
  carries the records, and the latest turn are kept), then train records from the end of the list shown, down to
  one record;
- one-shot (structured and free-text) and the tree's roots: records from the end, down to one;
- simulation (`explainers.simulate.LLMSimulator`): records go out in chunks whose answer fits the completion budget
  (sized at 4 answer tokens per predicted token),
  and a chunk whose prompt does not fit is halved, down to one record.
A request that still does not fit raises `LLMContextOverflowError`, which fails that feature (not the job).

    req, trimmed = await first_that_fits(client, candidates)   # candidates: (request, what it leaves out), fullest first
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from sae_workbench.llm.errors import LLMContextOverflowError
from sae_workbench.llm.request import LLMRequest

T = TypeVar("T")

# A prediction is an integer and a separator ("3, "): 2 tokens when written tightly (SmolLM2 counts "0, 0, 0" as 5),
# but JSON grammars allow whitespace between items and a small model uses it: SmolLM2-135M under llama.cpp's
# json_object grammar filled a 511-token budget with 160 predictions (3.2 tokens each; real-LLM test, 2026-12-07).
# So the chunks are sized at 4 tokens per prediction; the brackets of each row add a few.
ANSWER_TOKENS_PER_TOKEN = 4
ANSWER_TOKENS_PER_RECORD = 6
ANSWER_TOKENS_BASE = 16


async def first_that_fits(
    client: Any, candidates: Iterable[tuple[LLMRequest, dict[str, int]]]
) -> tuple[LLMRequest, dict[str, int]]:
    """The first (request, trimmed) whose prompt fits the context (`client.check_fit`); the last overflow when none
    does. `trimmed` says what the request leaves out ({} for the full prompt)."""
    last: LLMContextOverflowError | None = None
    for request, trimmed in candidates:
        try:
            await client.check_fit(request)
        except LLMContextOverflowError as err:
            last = err
            continue
        return request, trimmed
    if last is None:
        raise ValueError("no candidate request to fit")
    raise last


def fewer_records(
    records: Sequence[T], build: Callable[[Sequence[T]], LLMRequest]
) -> Iterable[tuple[LLMRequest, dict[str, int]]]:
    """Requests over all records, then with records dropped from the end, down to one."""
    for keep in range(len(records), 0, -1):
        dropped = len(records) - keep
        yield build(records[:keep]), ({"records_dropped": dropped} if dropped else {})


def answer_tokens(record_lengths: Sequence[int]) -> int:
    """Completion tokens an answer of per-token predictions for records of these lengths needs (an upper estimate)."""
    return ANSWER_TOKENS_BASE + sum(
        ANSWER_TOKENS_PER_TOKEN * n + ANSWER_TOKENS_PER_RECORD for n in record_lengths
    )


def answer_chunks(record_lengths: Sequence[int], budget: int) -> list[range]:
    """Consecutive chunks of record positions whose predictions fit `budget` completion tokens (a record too long
    for the budget alone is a chunk of its own: its answer may then be cut, which fails that feature)."""
    chunks: list[range] = []
    start = 0
    for i in range(1, len(record_lengths) + 1):
        if i - start > 1 and answer_tokens(record_lengths[start:i]) > budget:
            chunks.append(range(start, i - 1))
            start = i - 1
    if start < len(record_lengths):
        chunks.append(range(start, len(record_lengths)))
    return chunks
