"""Prompts that fit (issue 32 item 3), against the scripted server with a small stated context: records are dropped
from the end until the prompt plus the completion budget fits, what was dropped is reported, a prompt that cannot fit
raises LLMContextOverflowError; the simulator asks for records in chunks whose answers fit the completion budget."""

import asyncio

import numpy as np
import pytest

from sae_workbench.examples.records import Record
from sae_workbench.explainers.fit import answer_chunks, answer_tokens, fewer_records, first_that_fits
from sae_workbench.explainers.oneshot import structured_request
from sae_workbench.explainers.simulate import LLMSimulator
from sae_workbench.llm.client import LLMClient, LLMContextOverflowError
from sae_workbench.llm.config import LLMConfig
from tests.explainers.test_explain_llm import smart
from tests.fake_llm import FakeLLM

WORDS = [" the", " LORD", " said", " unto", " Moses", ",", " and", " he", " went", " out"]


def _record(i: int, n: int = 10) -> Record:
    tokens = tuple(WORDS[(i + j) % len(WORDS)] for j in range(n))
    return Record(i, tokens, np.array([4.0 if t == " LORD" else 0.0 for t in tokens], dtype=np.float32))


def _config(server: FakeLLM, **kw) -> LLMConfig:
    return LLMConfig(
        model="fake", base_url=server.base_url, backoff_base_s=0.01, structured_output="none", **kw
    )


def test_answer_chunks_fit_the_budget() -> None:
    lengths = [32] * 20
    chunks = answer_chunks(lengths, 400)
    assert [i for c in chunks for i in c] == list(range(20))  # every record once, in order
    assert all(answer_tokens([lengths[i] for i in c]) <= 400 for c in chunks)
    assert len(chunks) == 10  # 2 records of 32 tokens = 284 answer tokens; 3 would be 418
    assert answer_chunks([500], 100) == [range(0, 1)]  # alone even when too long: the answer decides


def test_records_dropped_until_the_prompt_fits() -> None:
    records = [_record(i) for i in range(8)]

    def request(kept):
        return structured_request(kept, 4.0, 5, tag="t", temperature=None, sample=0)

    async def go(context: int):
        with FakeLLM(responder=smart) as server:
            async with LLMClient(_config(server, context_length=context, max_tokens=100)) as client:
                full = await client.prompt_tokens(request(records).messages)
                req, trimmed = await first_that_fits(client, fewer_records(records, request))
                fit = await client.check_fit(req)
                return full[0], trimmed, fit

    full, trimmed, _ = asyncio.run(go(100_000))
    assert trimmed == {}
    _, trimmed, fit = asyncio.run(go(full + 100 - 60))  # 60 tokens short: a few records must go
    assert 1 <= trimmed["records_dropped"] < 8 and fit.fits
    with pytest.raises(LLMContextOverflowError):
        asyncio.run(go(120))  # not even one record fits


def test_simulator_asks_in_chunks_whose_answers_fit() -> None:
    records = [_record(i, 32) for i in range(12)]

    async def go(max_tokens: int):
        with FakeLLM(responder=smart) as server:
            async with LLMClient(_config(server, max_tokens=max_tokens)) as client:
                preds = await LLMSimulator(client).simulate('"lord"', records)
            return preds, server.calls

    one, calls_one = asyncio.run(go(4096))
    chunked, calls_chunked = asyncio.run(go(300))
    assert calls_one == 1 and calls_chunked == len(answer_chunks([32] * 12, 300)) > 1
    for a, b, r in zip(one, chunked, records, strict=True):  # same predictions, LORD at 5, the rest 0
        assert np.array_equal(a, b) and np.array_equal(a, np.where(np.array(r.tokens) == " LORD", 5.0, 0.0))
