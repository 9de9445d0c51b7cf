"""The LLM client against the REAL local server (llama-cpp-python + SmolLM2-135M-Instruct), started through
`sae_workbench.llm.server`: constrained answers parse, the structured-output form is detected, an oversized prompt is a
typed error (before sending, and as the server's own refusal), a killed server is a typed error and a restarted one
answers again. Also measures the parse rate of a fixed explanation prompt with and without a schema.

    .venv/bin/python -m pytest -q -s -m slow tests/llm/test_llm_real_server.py
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sae_workbench.llm.client import (
    LLMClient,
    LLMContextOverflowError,
    LLMEndpointDownError,
    LLMMalformedOutputError,
    LLMRequest,
    LLMUnavailableError,
    chat,
)
from sae_workbench.llm.config import LLMConfig
from sae_workbench.llm.endpoint import forget_endpoint
from sae_workbench.llm.jsonparse import as_object, parse_json_strict
from sae_workbench.llm.server import LocalLLMServer
from tests.llm.conftest import start_local_server

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "object",
    "properties": {"explanation": {"type": "string", "maxLength": 80}},
    "required": ["explanation"],
    "additionalProperties": False,
}
# Ten features' top activations (the token in << >> is where the feature fires most): a fixed, simple prompt.
FEATURE_WORDS = [
    ["Monday", "Tuesday", "Friday"], ["red", "blue", "green"], ["dog", "cat", "horse"], ["1984", "2001", "1776"],
    ["Paris", "London", "Rome"], ["happy", "glad", "joyful"], ["run", "walk", "swim"], ["def", "class", "import"],
    ["Lord", "God", "heaven"], ["apple", "bread", "cheese"],
]  # fmt: skip


def explanation_prompt(words: list[str]) -> LLMRequest:
    """The fixed explanation prompt for one feature."""
    examples = "\n".join(f"- I saw it on <<{w}>> last year." for w in words)
    text = (
        "A feature of a language model fires on the marked token in these texts:\n"
        f"{examples}\n"
        'Explain in a few words what the feature detects. Reply with JSON only: {"explanation": "<a few words>"}'
    )
    return LLMRequest(chat(text), tag=f"feature:{words[0]}", max_tokens=96)


def parse_explanation(text: str) -> str:
    """The explanation string of an answer (ValueError when it is not the JSON asked for)."""
    value = as_object(parse_json_strict(text), ("explanation",))["explanation"]
    if not isinstance(value, str) or not value.strip():
        raise ValueError("explanation must be a non-empty string")
    return value


def run(coro: Any) -> Any:
    """Run one coroutine on a fresh loop."""
    return asyncio.run(coro)


def test_constrained_answers_parse_and_the_form_is_detected_as_json_object(real_llm: LocalLLMServer) -> None:
    forget_endpoint(real_llm.base_url)
    cfg = real_llm.llm_config(structured_output="auto", max_reasks=0)

    async def go() -> tuple[str, dict[str, Any]]:
        async with LLMClient(cfg) as llm:
            req = explanation_prompt(FEATURE_WORDS[0])
            out = await llm.complete_parsed(
                LLMRequest(req.messages, max_tokens=96, schema=SCHEMA), parse_explanation
            )
            return out.value, llm.provenance()

    value, prov = run(go())
    assert value.strip() and prov["structured_output"] == "json_object"
    assert prov["model"] == real_llm.model and prov["context_length"] == 8192


def test_parse_rate_with_and_without_schema(real_llm: LocalLLMServer, tmp_path: Path) -> None:
    cfg = real_llm.llm_config(max_reasks=0)

    async def rate(schema: dict[str, Any] | None) -> tuple[int, float]:
        ok = 0
        async with LLMClient(cfg) as llm:
            t0 = asyncio.get_running_loop().time()
            for words in FEATURE_WORDS:
                req = explanation_prompt(words)
                try:
                    await llm.complete_parsed(
                        LLMRequest(req.messages, max_tokens=96, schema=schema), parse_explanation
                    )
                    ok += 1
                except LLMMalformedOutputError:
                    pass
            return ok, asyncio.get_running_loop().time() - t0

    free, free_s = run(rate(None))
    constrained, constrained_s = run(rate(SCHEMA))
    result = {
        "free_form": f"{free}/10",
        "schema": f"{constrained}/10",
        "free_s": free_s,
        "schema_s": constrained_s,
    }
    print(f"\nparse rate on {real_llm.model}: {json.dumps(result)}")
    assert constrained == 10, result


def test_an_oversized_prompt_is_a_typed_error_before_sending_and_from_the_server(
    real_llm: LocalLLMServer,
) -> None:
    long_text = "The cat sat on the mat and looked at the dog. " * 900  # ~10k tokens > 8192
    request = LLMRequest(chat(long_text), max_tokens=256)

    async def checked() -> LLMContextOverflowError:
        async with LLMClient(real_llm.llm_config()) as llm:
            fit = await llm.check_fit(LLMRequest(chat("short"), max_tokens=256))
            assert fit.fits and fit.counted_by == "gguf vocabulary"
            with pytest.raises(LLMContextOverflowError) as info:
                await llm.complete(request)
            return info.value

    err = run(checked())
    assert err.context_length == 8192 and err.prompt_tokens is not None and err.prompt_tokens > 8192 - 256

    # A client that does not know the context sends it; the server's 400 is the same typed error, and teaches it.
    forget_endpoint(real_llm.base_url)
    blind = LLMConfig(model=real_llm.model, base_url=real_llm.base_url, timeout_s=300, max_retries=3)

    async def refused() -> tuple[LLMContextOverflowError, int | None]:
        async with LLMClient(blind) as llm:
            with pytest.raises(LLMContextOverflowError, match="too long for the context") as info:
                await llm.complete(request)
            return info.value, await llm.context_length()

    err, learned = run(refused())
    assert err.context_length == 8192 and learned == 8192
    forget_endpoint(real_llm.base_url)


def test_tokens_are_counted_without_waiting_for_the_running_answer(real_llm: LocalLLMServer) -> None:
    forget_endpoint(real_llm.base_url)
    blind = LLMConfig(model=real_llm.model, base_url=real_llm.base_url, timeout_s=300)

    async def go() -> tuple[str, str, float, float]:
        async with LLMClient(blind) as by_server, LLMClient(real_llm.llm_config()) as local:
            _, route = await by_server.count_tokens("hello world")  # the server is idle: its route answers
            story = asyncio.create_task(
                by_server.complete(LLMRequest(chat("Write a long story about a dragon."), max_tokens=300))
            )
            await asyncio.sleep(1.0)
            t0 = asyncio.get_running_loop().time()
            _, how = await local.count_tokens("hello world")  # the GGUF vocabulary: no wait for the story
            waited = asyncio.get_running_loop().time() - t0
            await story
            return route, how, waited, 0.0

    route, how, waited, _ = run(go())
    assert route == "/extras/tokenize/count" and how == "gguf vocabulary" and waited < 5.0
    forget_endpoint(real_llm.base_url)


def test_token_count_covers_what_the_server_bills(real_llm: LocalLLMServer) -> None:
    forget_endpoint(real_llm.base_url)

    async def go() -> list[tuple[int, int]]:
        pairs = []
        async with LLMClient(real_llm.llm_config(max_tokens=8)) as llm:
            for words in FEATURE_WORDS[:3]:
                req = LLMRequest(explanation_prompt(words).messages, max_tokens=8)
                fit = await llm.check_fit(req)
                resp = await llm.complete(req)
                pairs.append((fit.prompt_tokens, resp.usage.prompt_tokens))
        return pairs

    pairs = run(go())
    # After the first answer the client knows the template's extra tokens: its counts cover the bill from then on.
    assert all(counted >= billed for counted, billed in pairs[1:]), pairs
    assert all(counted - billed <= 40 for counted, billed in pairs[1:]), pairs


def test_killed_server_is_a_typed_error_and_a_restarted_one_answers(tmp_path: Path) -> None:
    server = start_local_server(tmp_path)
    try:
        cfg = server.llm_config(max_retries=3, backoff_base_s=0.2, backoff_max_s=0.5, down_after=3)

        async def go() -> tuple[BaseException, str]:
            async with LLMClient(cfg) as llm:
                story = LLMRequest(chat("Write a long story about a dragon and a knight."), max_tokens=600)
                task = asyncio.create_task(llm.complete(story))
                await asyncio.sleep(1.5)
                assert not task.done(), "the answer came before the kill: make it longer"
                server.kill()
                with pytest.raises((LLMEndpointDownError, LLMUnavailableError)) as info:
                    await task
                await asyncio.to_thread(server.start)  # same port
                out = await llm.complete_parsed(
                    LLMRequest(explanation_prompt(FEATURE_WORDS[2]).messages, max_tokens=96, schema=SCHEMA),
                    parse_explanation,
                )
                return info.value, out.value

        err, value = run(go())
        assert "could not be reached" in str(err) or "failed" in str(err)
        assert value.strip()
    finally:
        server.stop()
