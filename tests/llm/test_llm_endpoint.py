"""What the client learns about an endpoint (structured-output form, context length, token counter) and how it treats
a slow, refusing or dead one: through real HTTP against the scripted server (tests/fake_llm.py)."""

import asyncio
from typing import Any

import pytest

from sae_workbench.llm.cache import MemoryCache
from sae_workbench.llm.client import (
    FEATURE_ERRORS,
    JOB_FATAL_ERRORS,
    LLMClient,
    LLMContextOverflowError,
    LLMEndpointDownError,
    LLMFormatRefusedError,
    LLMRequest,
    LLMTimeoutError,
    LLMUnavailableError,
    chat,
)
from sae_workbench.llm.config import LLMConfig, endpoint_status
from sae_workbench.llm.endpoint import (
    context_length_in,
    estimate_tokens,
    is_context_overflow,
    is_format_refusal,
    is_local_url,
    schema_fields,
)
from sae_workbench.llm.jsonparse import parse_json_strict
from tests.fake_llm import FakeLLM, Hang, HTTPFault, Reply, fake_llm  # noqa: F401

SCHEMA = {
    "type": "object",
    "properties": {"explanation": {"type": "string"}},
    "required": ["explanation"],
    "additionalProperties": False,
}
# What llama-cpp-python 0.3.36's server answers to the OpenAI json_schema form (HTTP 500, a pydantic error).
LLAMA_CPP_PYTHON_REFUSAL = (
    "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
    "  Input should be 'text' or 'json_object' [type=literal_error, input_value='json_schema']"
)


def build_cfg(server: FakeLLM, **overrides: Any) -> LLMConfig:
    """A config for the fake server with tiny timeouts and backoff."""
    base: dict[str, Any] = dict(
        model="fake-model", base_url=server.base_url, timeout_s=0.3, backoff_base_s=0.001, backoff_max_s=0.01
    )
    base.update(overrides)
    return LLMConfig(**base)


def llama_cpp_python_like(body: dict[str, Any]) -> Any:
    """Answer like llama-cpp-python: refuse the json_schema form with a 500, follow the json_object form."""
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return HTTPFault(500, message=LLAMA_CPP_PYTHON_REFUSAL)
    if fmt.get("type") == "json_object" and fmt.get("schema") == SCHEMA:
        return Reply('{"explanation": "dogs"}')
    return Reply("Sure! The feature is about dogs.")


def ask(cfg: LLMConfig, *requests: LLMRequest, **kw: Any) -> tuple[list[Any], dict[str, Any], int]:
    """Parse each request's JSON answer with one client; (values, provenance, final window size)."""

    async def go() -> tuple[list[Any], dict[str, Any], int]:
        async with LLMClient(cfg, **kw) as llm:
            outs = [await llm.complete_json(r) for r in requests]
            return [o.value for o in outs], llm.provenance(), llm.concurrency_limit

    return asyncio.run(go())


def test_schema_form_is_detected_once_per_endpoint_and_recorded(fake_llm):  # noqa: F811
    fake_llm.responder = llama_cpp_python_like
    req = LLMRequest(chat("Explain feature 7."), schema=SCHEMA)
    values, prov, _ = ask(build_cfg(fake_llm, max_retries=5), req)
    assert values == [{"explanation": "dogs"}]
    # One refusal (a 500 that names the form: not retried as an outage), then the llama-cpp-python form.
    assert [r.outcome for r in fake_llm.requests] == ["http 500", "reply"]
    assert (
        fake_llm.requests[0].body["response_format"]
        == schema_fields("json_schema", SCHEMA, "answer")["response_format"]
    )
    assert fake_llm.requests[1].body["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert prov["structured_output"] == "json_object" and prov["model"] == "fake-model"
    # A second client (a later job) on the same endpoint sends the learned form straight away.
    values, prov, _ = ask(build_cfg(fake_llm), LLMRequest(chat("Explain feature 8."), schema=SCHEMA))
    assert values == [{"explanation": "dogs"}] and fake_llm.calls == 3
    assert fake_llm.requests[2].body["response_format"]["type"] == "json_object"


def test_an_endpoint_refusing_every_form_gets_free_form_requests(fake_llm):  # noqa: F811
    def responder(body: dict[str, Any]) -> Any:
        if "response_format" in body:
            return HTTPFault(400, message="response_format is not supported by this server")
        return Reply('{"explanation": "free"}')

    fake_llm.responder = responder
    values, prov, _ = ask(build_cfg(fake_llm), LLMRequest(chat("q"), schema=SCHEMA))
    assert values == [{"explanation": "free"}] and prov["structured_output"] == "none"
    assert [r.outcome for r in fake_llm.requests] == ["http 400", "http 400", "reply"]


def test_a_forced_form_that_is_refused_fails_at_once_without_retries(fake_llm):  # noqa: F811
    fake_llm.responder = llama_cpp_python_like
    with pytest.raises(LLMFormatRefusedError, match="HTTP 500"):
        ask(
            build_cfg(fake_llm, structured_output="json_schema", max_retries=5),
            LLMRequest(chat("q"), schema=SCHEMA),
        )
    assert fake_llm.calls == 1
    assert issubclass(LLMFormatRefusedError, FEATURE_ERRORS)


def test_a_plain_500_is_still_retried_as_an_outage(fake_llm):  # noqa: F811
    fake_llm.push(HTTPFault(500, message="Internal Server Error"), Reply('{"explanation": "x"}'))
    values, _, _ = ask(
        build_cfg(fake_llm, structured_output="json_object"), LLMRequest(chat("q"), schema=SCHEMA)
    )
    assert values == [{"explanation": "x"}] and fake_llm.calls == 2


def test_schema_is_part_of_the_cache_key(fake_llm):  # noqa: F811
    fake_llm.push('{"explanation": "constrained"}', '{"explanation": "free"}')
    cache = MemoryCache()
    cfg = build_cfg(fake_llm, structured_output="json_object")
    constrained, free = LLMRequest(chat("q"), schema=SCHEMA), LLMRequest(chat("q"))
    values, _, _ = ask(cfg, constrained, free, cache=cache)
    assert values == [{"explanation": "constrained"}, {"explanation": "free"}] and len(cache) == 2
    assert "response_format" not in fake_llm.requests[1].body


def test_server_overflow_refusal_is_typed_not_retried_and_teaches_the_context(fake_llm):  # noqa: F811
    message = (
        "This model's maximum context length is 512 tokens. However, you requested 900 tokens "
        "(800 in the messages, 100 in the completion). Please reduce the length of the messages or completion."
    )
    fake_llm.push(HTTPFault(400, message=message))
    long_prompt = LLMRequest(chat("word " * 800), max_tokens=100)

    async def go() -> LLMClient:
        async with LLMClient(build_cfg(fake_llm, max_retries=5)) as llm:
            with pytest.raises(LLMContextOverflowError, match="too long for the context") as info:
                await llm.complete(long_prompt)
            assert info.value.context_length == 512
            # Learned: the next oversized prompt fails before it is sent (counted by estimate: no tokenizer route).
            with pytest.raises(LLMContextOverflowError, match="exceeds the 512-token context") as info:
                await llm.complete(long_prompt)
            assert info.value.excess_tokens is not None and info.value.excess_tokens > 0
            return llm

    llm = asyncio.run(go())
    assert fake_llm.calls == 1
    assert (
        llm.provenance()["context_length"] == 512 and llm.provenance()["context_source"] == "overflow error"
    )


def test_context_length_and_token_count_come_from_the_server():
    with FakeLLM(n_ctx=100, default='{"explanation": "ok"}') as server:

        async def go() -> tuple[Any, ...]:
            async with LLMClient(build_cfg(server, max_tokens=20)) as llm:
                fit = await llm.check_fit(LLMRequest(chat("one two three")))
                with pytest.raises(LLMContextOverflowError) as info:
                    await llm.complete(LLMRequest(chat("word " * 90)))
                out = await llm.complete_json(LLMRequest(chat("short")))
                return fit, info.value, out.value, llm.provenance()

        fit, err, value, prov = asyncio.run(go())
        # 3 words + role word "user:" counted by the server's /tokenize, plus the template allowance.
        assert fit.counted_by == "/tokenize" and fit.context_length == 100 and fit.fits
        assert fit.prompt_tokens == 4 + 6 * 2 and fit.room == 100 - 20 - 16
        assert err.prompt_tokens == 91 + 12 and err.context_length == 100 and err.max_tokens == 20
        assert value == {"explanation": "ok"} and server.calls == 1  # the overflowing prompt was never sent
        assert prov["context_source"] == "/props n_ctx" and prov["token_counter"] == "/tokenize"


def test_explicit_context_wins_and_estimate_counts_without_a_tokenizer(fake_llm):  # noqa: F811
    async def go() -> Any:
        async with LLMClient(build_cfg(fake_llm, context_length=64, max_tokens=8)) as llm:
            return await llm.check_fit(LLMRequest(chat("x" * 30)))

    fit = asyncio.run(go())
    assert fit.context_length == 64 and fit.counted_by == "estimate"
    assert fit.prompt_tokens == estimate_tokens("user: " + "x" * 30) + 12


def test_window_starts_small_for_a_local_server_grows_on_fast_answers_and_halves_on_a_timeout(fake_llm):  # noqa: F811
    fake_llm.default = Reply('"ok"', delay_s=0.02)
    cfg = build_cfg(fake_llm, concurrency=8, timeout_s=1.0)
    assert cfg.start_concurrency == 2

    async def go() -> tuple[int, int, int]:
        async with LLMClient(cfg) as llm:
            start = llm.concurrency_limit
            await llm.complete_many([LLMRequest(chat(str(i))) for i in range(40)])
            grown = llm.concurrency_limit
            fake_llm.push(Hang(3.0))
            await llm.complete(LLMRequest(chat("slow one")))
            return start, grown, llm.concurrency_limit

    start, grown, after = asyncio.run(go())
    assert start == 2 and grown == 8 and after == 4
    assert fake_llm.peak_in_flight <= 8
    # The first requests went out two at a time: none of the first four started before one of the first two ended.
    first = sorted(fake_llm.requests[:40], key=lambda r: r.started)
    assert min(r.finished for r in first[:2]) <= first[2].started + 0.005


def test_hosted_endpoint_starts_at_the_configured_concurrency():
    assert LLMConfig(model="m", base_url="https://api.example.com/v1", concurrency=16).start_concurrency == 16
    assert LLMConfig(model="m", base_url="http://localhost:8000/v1", concurrency=16).start_concurrency == 2
    assert (
        LLMConfig(model="m", base_url="http://127.0.0.1:8/v1", initial_concurrency=5).start_concurrency == 5
    )


def test_timeouts_exhausted_raise_the_timeout_error(fake_llm):  # noqa: F811
    fake_llm.push(Hang(2.0), Hang(2.0))
    with pytest.raises(LLMTimeoutError, match=r"timeout after 0\.6 s"):
        ask(build_cfg(fake_llm, timeout_s=0.3, max_retries=1), LLMRequest(chat("q")))
    assert fake_llm.calls == 2 and issubclass(LLMTimeoutError, LLMUnavailableError)


def test_consecutive_connection_failures_mean_the_endpoint_is_down():
    with FakeLLM() as server:
        cfg = build_cfg(server, max_retries=10, down_after=3)
    with pytest.raises(LLMEndpointDownError, match="3 consecutive attempts"):
        ask(cfg, LLMRequest(chat("q")))
    assert issubclass(LLMEndpointDownError, JOB_FATAL_ERRORS)
    assert not issubclass(LLMEndpointDownError, FEATURE_ERRORS)


def test_parse_failures_and_refusals_are_not_cached(fake_llm):  # noqa: F811
    fake_llm.push("nope", "still nope", HTTPFault(400, message="bad request"))
    cache = MemoryCache()

    async def go() -> None:
        async with LLMClient(build_cfg(fake_llm, max_reasks=1), cache=cache) as llm:
            results = await llm.parse_many_settled([LLMRequest(chat("a"))], parse_json_strict)
            assert type(results[0]).__name__ == "LLMMalformedOutputError"
            with pytest.raises(FEATURE_ERRORS):
                await llm.complete(LLMRequest(chat("b")))

    asyncio.run(go())
    assert len(cache) == 0


def test_classifiers_on_real_server_messages():
    assert is_format_refusal(500, LLAMA_CPP_PYTHON_REFUSAL)
    assert not is_format_refusal(500, "Internal Server Error")
    assert is_context_overflow(400, "Requested tokens (8227) exceed context window of 8192")
    assert is_context_overflow(400, "the request exceeds the available context size, try increasing it")
    assert context_length_in("Requested tokens (8227) exceed context window of 8192") == 8192
    assert context_length_in("This model's maximum context length is 4096 tokens.") == 4096
    assert not is_context_overflow(400, "n must be 1")
    assert is_local_url("http://127.0.0.1:8080/v1") and is_local_url("http://localhost/v1")
    assert is_local_url("http://[::1]:8000/v1") and not is_local_url("https://api.openai.com/v1")
    assert (
        schema_fields("format", SCHEMA, "x") == {"format": SCHEMA}
        and schema_fields("none", SCHEMA, "x") == {}
    )


def test_endpoint_status_reads_every_llm_variable():
    env = {
        "WORKBENCH_LLM_MODEL": "m",
        "WORKBENCH_LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "WORKBENCH_LLM_API_KEY_ENV": "MY_KEY",
        "WORKBENCH_LLM_CONCURRENCY": "3",
        "WORKBENCH_LLM_TIMEOUT": "120",
        "WORKBENCH_LLM_MAX_TOKENS": "256",
        "WORKBENCH_LLM_CONTEXT": "8192",
        "WORKBENCH_LLM_STRUCTURED_OUTPUT": "json_object",
    }
    cfg = endpoint_status(env=env).config
    assert cfg is not None
    assert (cfg.api_key_env, cfg.concurrency, cfg.timeout_s, cfg.max_tokens) == ("MY_KEY", 3, 120.0, 256)
    assert (cfg.context_length, cfg.structured_output) == (8192, "json_object")
    # An explicit setting wins over the variable; None means "not given".
    cfg = endpoint_status(env=env, concurrency=5, timeout_s=None).config
    assert cfg is not None and cfg.concurrency == 5 and cfg.timeout_s == 120.0
    with pytest.raises(ValueError, match="WORKBENCH_LLM_CONTEXT"):
        endpoint_status(env={**env, "WORKBENCH_LLM_CONTEXT": "big"})


def test_adaptive_window_by_hand():
    from sae_workbench.llm.window import AdaptiveWindow

    w = AdaptiveWindow(2, 8)
    for expected in (3, 4, 5, 6, 7, 8, 8):  # slow start: +1 per fast answer, capped at the maximum
        w.grow()
        assert w.size == expected
    w.shrink()
    assert (w.size, w.threshold) == (4, 4.0)
    w.grow()  # past the threshold: +1/window per answer
    assert w.limit == 4.25 and w.size == 4
    for _ in range(4):
        w.shrink()
    assert w.size == 1 and w.limit == 1.0  # never below one request
