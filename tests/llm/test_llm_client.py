"""The LLM client end to end: real HTTP through the `openai` package against the local fake server."""

import asyncio
import json
import logging

import pytest

from sae_workbench.llm.cache import CachedResponse, MemoryCache, StoreCache, cache_key
from sae_workbench.llm.client import (
    REASK_TEMPLATE,
    LLMAuthError,
    LLMClient,
    LLMMalformedOutputError,
    LLMRequest,
    LLMRequestError,
    LLMUnavailableError,
    Parsed,
    SyncLLMClient,
    chat,
)
from sae_workbench.llm.config import LLMConfig, LLMNotConfiguredError
from sae_workbench.llm.jsonparse import as_int_list, parse_json_strict
from sae_workbench.llm.usage import Usage, UsageLedger
from sae_workbench.store import Store
from tests.fake_llm import BrokenBody, FakeLLM, Hang, HTTPFault, Reply, fake_llm, prompt_token_count  # noqa: F401


def build_cfg(server: FakeLLM, **overrides) -> LLMConfig:
    """A config for the fake server with tiny timeouts and backoff."""
    base = dict(
        model="fake-model", base_url=server.base_url, timeout_s=0.3, backoff_base_s=0.001, backoff_max_s=0.01
    )
    base.update(overrides)
    return LLMConfig(**base)  # type: ignore[arg-type]


def run(coro):
    """Run one coroutine on a fresh loop (no pytest-asyncio here)."""
    return asyncio.run(coro)


async def _one(cfg: LLMConfig, request: LLMRequest, **kw) -> Parsed:
    async with LLMClient(cfg, **kw) as llm:
        return await llm.complete_json(request)


def test_success_sends_the_request_and_counts_tokens(fake_llm):  # noqa: F811
    fake_llm.push('{"answer": 42}')
    cfg = build_cfg(fake_llm, temperature=0.5, max_tokens=77)
    req = LLMRequest(chat("What is six times seven?", system="Reply in JSON."), tag="feature:1")
    ledger = UsageLedger()
    out = run(_one(cfg, req, ledger=ledger))
    assert out.value == {"answer": 42} and out.reasks == 0 and not out.cached
    body = fake_llm.requests[0].body
    assert body["model"] == "fake-model" and body["temperature"] == 0.5 and body["max_tokens"] == 77
    assert body["messages"] == [
        {"role": "system", "content": "Reply in JSON."},
        {"role": "user", "content": "What is six times seven?"},
    ]
    # Fake tokenizer = words: 3 + 5 prompt words, 2 completion words.
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.calls) == (8, 2, 1)
    assert ledger.total.prompt_tokens == 8 and ledger.for_tag("feature:1").completion_tokens == 2


def test_rerun_with_cache_costs_zero_calls(fake_llm):  # noqa: F811
    fake_llm.push(
        "not json", '{"ok": 1}'
    )  # a re-ask: only the answer that parsed is cached, under the request's key
    cfg, cache = build_cfg(fake_llm), MemoryCache()
    req = LLMRequest(chat("hello"), tag="f")
    first = run(_one(cfg, req, cache=cache))
    assert fake_llm.calls == 2 and len(cache) == 1 and first.reasks == 1
    (entry,) = cache._entries.values()
    assert entry.response_text == '{"ok": 1}' and entry.prompt_tokens == first.usage.prompt_tokens
    ledger = UsageLedger()
    second = run(_one(cfg, req, cache=cache, ledger=ledger))
    assert fake_llm.calls == 2, "a cached rerun must not call the endpoint"
    assert second.value == {"ok": 1} and second.cached and second.reasks == 0
    assert ledger.total == Usage(cache_hits=1, seconds=ledger.total.seconds)


def test_an_answer_that_never_parses_is_not_cached_and_a_rerun_asks_again(fake_llm):  # noqa: F811
    fake_llm.default = "no json here"
    cfg, cache = build_cfg(fake_llm, max_reasks=1), MemoryCache()
    with pytest.raises(LLMMalformedOutputError):
        run(_one(cfg, LLMRequest(chat("q")), cache=cache))
    assert fake_llm.calls == 2 and len(cache) == 0
    fake_llm.default = '{"ok": 2}'
    out = run(_one(cfg, LLMRequest(chat("q")), cache=cache))
    assert out.value == {"ok": 2} and not out.cached and fake_llm.calls == 3 and len(cache) == 1


def test_cache_key_separates_model_params_and_samples():
    msgs = chat("x")
    base = cache_key("m", msgs, {"temperature": 1.2, "max_tokens": 10, "sample": 0})
    assert base == cache_key(
        "m", [dict(m) for m in msgs], {"sample": 0, "max_tokens": 10, "temperature": 1.2}
    )
    others = [
        cache_key("m2", msgs, {"temperature": 1.2, "max_tokens": 10, "sample": 0}),
        cache_key("m", chat("y"), {"temperature": 1.2, "max_tokens": 10, "sample": 0}),
        cache_key("m", msgs, {"temperature": 1.0, "max_tokens": 10, "sample": 0}),
        cache_key("m", msgs, {"temperature": 1.2, "max_tokens": 10, "sample": 1}),
    ]
    assert len({base, *others}) == 5


def test_sample_index_gives_distinct_cached_answers(fake_llm):  # noqa: F811
    fake_llm.push('"a"', '"b"')
    cfg, cache = build_cfg(fake_llm, temperature=1.2), MemoryCache()

    async def roots() -> list:
        async with LLMClient(cfg, cache=cache) as llm:
            return [(await llm.complete_json(LLMRequest(chat("root"), sample=i))).value for i in range(2)]

    assert run(roots()) == ["a", "b"]
    assert run(roots()) == ["a", "b"] and fake_llm.calls == 2


def test_429_honours_retry_after_then_succeeds(fake_llm):  # noqa: F811
    fake_llm.push(HTTPFault(429, retry_after="0.2"), '{"ok": true}')
    ledger = UsageLedger()
    out = run(_one(build_cfg(fake_llm), LLMRequest(chat("q")), ledger=ledger))
    assert out.value == {"ok": True} and out.usage.retries == 1 and ledger.total.retries == 1
    r1, r2 = fake_llm.requests
    assert (r1.outcome, r2.outcome) == ("http 429", "reply")
    assert r2.started - r1.finished >= 0.19, "the client must wait at least Retry-After"


def test_500_then_success(fake_llm):  # noqa: F811
    fake_llm.push(HTTPFault(500), HTTPFault(503), '{"ok": true}')
    out = run(_one(build_cfg(fake_llm), LLMRequest(chat("q"))))
    assert out.value == {"ok": True} and out.usage.retries == 2 and fake_llm.calls == 3


def test_a_body_that_is_no_completion_is_retried_then_typed(fake_llm):  # noqa: F811
    fake_llm.push(BrokenBody(), '{"ok": true}')
    out = run(_one(build_cfg(fake_llm), LLMRequest(chat("q"))))
    assert out.value == {"ok": True} and out.usage.retries == 1
    assert [r.outcome for r in fake_llm.requests] == ["broken body", "reply"]
    fake_llm.push(BrokenBody('{"choices": [{"message": {"content": 7}}]}'), BrokenBody("{truncated"))
    with pytest.raises(LLMUnavailableError, match="malformed completion body"):
        run(_one(build_cfg(fake_llm, max_retries=1), LLMRequest(chat("q"))))


def test_hang_times_out_and_retries(fake_llm):  # noqa: F811
    fake_llm.push(Hang(10), '{"ok": true}')
    out = run(_one(build_cfg(fake_llm, timeout_s=0.3), LLMRequest(chat("q"))))
    assert out.value == {"ok": True} and out.usage.retries == 1
    assert [r.outcome for r in fake_llm.requests] == ["hang", "reply"]
    assert 0.29 <= out.usage.seconds < 3.0


def test_persistent_500_raises_after_max_retries(fake_llm):  # noqa: F811
    fake_llm.default = HTTPFault(500)
    with pytest.raises(LLMUnavailableError, match="failed 3 time\\(s\\), last: HTTP 500"):
        run(_one(build_cfg(fake_llm, max_retries=2), LLMRequest(chat("q"))))
    assert fake_llm.calls == 3


def test_wrong_key_fails_at_once_without_retries(fake_llm):  # noqa: F811
    fake_llm.expected_key = "right-key"
    cfg = build_cfg(fake_llm, api_key_env="FAKE_KEY", max_retries=5)
    with pytest.raises(LLMAuthError, match="rejected the API key in \\$FAKE_KEY \\(HTTP 401\\)") as info:
        run(_one(cfg, LLMRequest(chat("q")), env={"FAKE_KEY": "wrong-key"}))
    assert fake_llm.calls == 1
    assert "wrong-key" not in str(info.value)


def test_other_4xx_is_a_request_error_without_retries(fake_llm):  # noqa: F811
    fake_llm.push(HTTPFault(404, message="model fake-model not found"))
    with pytest.raises(LLMRequestError, match=r"HTTP 404.*check the model name"):
        run(_one(build_cfg(fake_llm), LLMRequest(chat("q"))))
    assert fake_llm.calls == 1


def test_malformed_answer_is_reasked_with_the_parse_error(fake_llm):  # noqa: F811
    fake_llm.push("Sure! [1, 2", "[1, 2, 9]", "[1, 2, 3]")
    cfg = build_cfg(fake_llm, max_reasks=2)

    def parse(text: str) -> list[int]:
        return as_int_list(parse_json_strict(text), length=3, lo=0, hi=5)

    async def go() -> Parsed[list[int]]:
        async with LLMClient(cfg) as llm:
            return await llm.complete_parsed(LLMRequest(chat("digits please")), parse)

    out = run(go())
    assert out.value == [1, 2, 3] and out.reasks == 2 and out.usage.calls == 3 and out.usage.reasks == 2
    second = fake_llm.requests[1].body["messages"]
    assert second == [
        {"role": "user", "content": "digits please"},
        {"role": "assistant", "content": "Sure! [1, 2"},
        {
            "role": "user",
            "content": REASK_TEMPLATE.format(error="invalid JSON: Expecting value at line 1 column 1"),
        },
    ]
    # The conversation does not grow: the last bad answer and its correction replace the ones before.
    third = fake_llm.requests[2].body["messages"]
    assert third == [
        {"role": "user", "content": "digits please"},
        {"role": "assistant", "content": "[1, 2, 9]"},
        {
            "role": "user",
            "content": REASK_TEMPLATE.format(error="item 2 is 9, expected an integer in [0, 5]"),
        },
    ]


def test_reask_prompt_golden():
    assert REASK_TEMPLATE.format(error="E") == (
        "Your previous answer could not be parsed: E\n"
        "Reply again with the complete answer in the required format and nothing else."
    )


def test_malformed_forever_raises_typed_error(fake_llm):  # noqa: F811
    fake_llm.default = "no json here"
    with pytest.raises(LLMMalformedOutputError, match="after 2 attempt\\(s\\)") as info:
        run(_one(build_cfg(fake_llm, max_reasks=1), LLMRequest(chat("q"))))
    assert fake_llm.calls == 2
    assert info.value.last_text == "no json here" and len(info.value.errors) == 2


def test_concurrency_bound_and_order(fake_llm):  # noqa: F811
    # Later requests answer faster, so completion order differs from request order.
    fake_llm.responder = lambda body: Reply(
        json.dumps(body["messages"][0]["content"]), delay_s=0.02 * (12 - int(body["messages"][0]["content"]))
    )
    cfg = build_cfg(fake_llm, concurrency=3, initial_concurrency=3, timeout_s=2.0)

    async def go() -> list:
        async with LLMClient(cfg) as llm:
            outs = await llm.parse_many([LLMRequest(chat(str(i))) for i in range(12)], parse_json_strict)
            return [o.value for o in outs]

    assert run(go()) == [str(i) for i in range(12)]
    assert 2 <= fake_llm.peak_in_flight <= 3


def test_unbounded_concurrency_is_observable(fake_llm):  # noqa: F811
    # Guards the test above: with a high bound the server does see many requests at once.
    fake_llm.default = Reply('"x"', delay_s=0.2)
    cfg = build_cfg(fake_llm, concurrency=12, initial_concurrency=12, timeout_s=2.0)

    async def go() -> None:
        async with LLMClient(cfg) as llm:
            await llm.complete_many([LLMRequest(chat(str(i))) for i in range(12)])

    run(go())
    assert fake_llm.peak_in_flight >= 6


def test_settled_batch_keeps_going_but_fatal_errors_stop(fake_llm):  # noqa: F811
    fake_llm.responder = lambda body: "bad" if body["messages"][0]["content"] == "1" else '"good"'
    cfg = build_cfg(fake_llm, max_reasks=1)

    async def go() -> list:
        async with LLMClient(cfg) as llm:
            return await llm.parse_many_settled(
                [LLMRequest(chat(str(i))) for i in range(3)], parse_json_strict
            )

    a, b, c = run(go())
    assert isinstance(a, Parsed) and a.value == "good"
    assert isinstance(b, LLMMalformedOutputError)
    assert isinstance(c, Parsed) and c.value == "good"

    fake_llm.expected_key = "other"
    with pytest.raises(LLMAuthError):
        run(go())


def test_accounting_is_exact_per_call_tag_and_job(fake_llm):  # noqa: F811
    fake_llm.push(
        Reply('"a"', prompt_tokens=1000, completion_tokens=100),
        HTTPFault(429, retry_after="0"),
        Reply('"b"', prompt_tokens=2000, completion_tokens=300),
        Reply("oops", prompt_tokens=500, completion_tokens=50),
        Reply('"c"', prompt_tokens=700, completion_tokens=10),
    )
    cfg = build_cfg(fake_llm, price_in_per_1k=0.5, price_out_per_1k=2.0, concurrency=1)

    async def go(llm: LLMClient) -> None:
        await llm.complete_json(LLMRequest(chat("1"), tag="feature:1"))
        await llm.complete_json(LLMRequest(chat("2"), tag="feature:2"))
        await llm.complete_json(LLMRequest(chat("3"), tag="feature:2"))
        await llm.complete_json(LLMRequest(chat("1"), tag="feature:1"))  # cache hit

    async def main() -> UsageLedger:
        async with LLMClient(cfg, cache=MemoryCache()) as llm:
            await go(llm)
            return llm.ledger

    ledger = run(main())
    f1, f2, total = ledger.for_tag("feature:1"), ledger.for_tag("feature:2"), ledger.total
    # feature:1: 1000*0.5/1000 + 100*2/1000 = 0.7; feature:2: (2000+500+700)*0.5/1000 + (300+50+10)*2/1000 = 2.32
    assert (f1.prompt_tokens, f1.completion_tokens, f1.calls, f1.cache_hits) == (1000, 100, 1, 1)
    assert (f2.prompt_tokens, f2.completion_tokens, f2.calls, f2.retries, f2.reasks) == (3200, 360, 3, 1, 1)
    assert f1.cost_usd == pytest.approx(0.7, abs=1e-12) and f2.cost_usd == pytest.approx(2.32, abs=1e-12)
    assert (total.prompt_tokens, total.completion_tokens, total.calls, total.cache_hits) == (4200, 460, 4, 1)
    assert total.cost_usd == pytest.approx(3.02, abs=1e-12)
    assert set(ledger.by_tag()) == {"feature:1", "feature:2"}
    assert ledger.to_dict()["total"]["prompt_tokens"] == 4200


def test_store_cache_round_trip_in_the_duckdb_store(fake_llm, tmp_path):  # noqa: F811
    fake_llm.push(Reply('{"v": 1}', prompt_tokens=11, completion_tokens=4))
    path = tmp_path / "s.duckdb"
    cfg = build_cfg(fake_llm)
    first = run(_one(cfg, LLMRequest(chat("q")), cache=StoreCache(Store.open(path))))
    assert first.value == {"v": 1} and not first.cached
    # A new process would reopen the file: do the same, and expect zero calls.
    cache = StoreCache(Store.open(path))
    again = run(_one(cfg, LLMRequest(chat("q")), cache=cache))
    assert again.cached and again.value == {"v": 1} and fake_llm.calls == 1
    key = cache_key("fake-model", chat("q"), {"temperature": 0.0, "max_tokens": 1024, "sample": 0})
    assert cache.get(key) == CachedResponse("fake-model", '{"v": 1}', 11, 4)
    entry = Store.open(path).llm_cache_get(key)
    assert entry is not None and entry.tokens == 15


def test_api_key_never_reaches_store_logs_or_provenance(fake_llm, tmp_path, caplog, monkeypatch):  # noqa: F811
    secret = "sk-test-Sup3rSecretValue-0123456789"
    monkeypatch.setenv("WB_TEST_KEY", secret)
    for name in ("", "openai", "httpx", "httpx2", "httpcore", "explainers"):
        caplog.set_level(logging.DEBUG, logger=name or None)
    fake_llm.push(HTTPFault(429, retry_after="0"), HTTPFault(500), "not json", '{"ok": 1}')
    db = tmp_path / "store.duckdb"
    store = Store.open(db)
    cfg = build_cfg(fake_llm, api_key_env="WB_TEST_KEY")

    async def go() -> tuple[Parsed, UsageLedger, str]:
        async with LLMClient(cfg, cache=StoreCache(store)) as llm:
            return await llm.complete_json(LLMRequest(chat("q"), tag="feature:3")), llm.ledger, repr(llm)

    out, ledger, client_repr = run(go())
    # The key was really sent (so the checks below are meaningful) ...
    assert fake_llm.requests[0].headers["authorization"] == f"Bearer {secret}"
    # ... and appears nowhere we keep or print.
    assert caplog.records, "expected log records to search"
    stored = b"".join(f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())
    assert b'\\"ok\\": 1' in stored, "the answer must be in the store files searched below"
    haystacks = {
        "store files": "".join(f.read_bytes().decode("latin-1") for f in tmp_path.rglob("*") if f.is_file()),
        "logs": "\n".join(r.getMessage() + repr(r.args) for r in caplog.records),
        "ledger": json.dumps(ledger.to_dict()),
        "provenance": json.dumps(cfg.params()) + repr(cfg) + client_repr + repr(out),
    }
    for where, text in haystacks.items():
        assert secret not in text and "Sup3rSecret" not in text, f"API key leaked into {where}"


def test_missing_key_for_public_openai_is_a_typed_error():
    with pytest.raises(LLMNotConfiguredError, match="\\$NO_SUCH_KEY is not set"):
        LLMClient(LLMConfig(model="gpt-4o-mini", api_key_env="NO_SUCH_KEY"), env={})


def test_backoff_is_seeded_exponential_and_bounded():
    cfg = LLMConfig(model="m", base_url="http://x/v1", backoff_base_s=1.0, backoff_max_s=8.0, seed=3)
    a = [LLMClient(cfg)._backoff_s(i, None) for i in range(6)]
    b = [LLMClient(cfg)._backoff_s(i, None) for i in range(6)]
    c = [LLMClient(cfg.with_overrides(seed=4))._backoff_s(i, None) for i in range(6)]
    assert a == b and a != c
    for i, d in enumerate(a):
        cap = min(8.0, 2.0**i)
        assert cap / 2 <= d <= cap
    assert LLMClient(cfg)._backoff_s(0, 5.0) == 5.0


def test_sync_client_works_inside_and_outside_a_running_loop(fake_llm):  # noqa: F811
    fake_llm.default = '{"s": 1}'
    with SyncLLMClient(build_cfg(fake_llm)) as llm:
        assert llm.complete_json(LLMRequest(chat("a"))).value == {"s": 1}
        outs = llm.complete_many([LLMRequest(chat(str(i))) for i in range(4)])
        assert [o.text for o in outs] == ['{"s": 1}'] * 4

        async def inside() -> object:
            return llm.complete_json(LLMRequest(chat("b"))).value

        assert run(inside()) == {"s": 1}
        assert llm.ledger.total.calls == 6
    assert prompt_token_count(fake_llm.requests[0].body) == 1


def test_dead_endpoint_is_retried_then_unavailable():
    with FakeLLM() as server:
        cfg = build_cfg(server, max_retries=1)
    # The port is closed now: every attempt is a connection error.
    with pytest.raises(LLMUnavailableError, match=r"failed 2 time\(s\), last: connection error"):
        run(_one(cfg, LLMRequest(chat("q"))))


def test_unscripted_fake_server_fails_loudly(fake_llm):  # noqa: F811
    with pytest.raises(LLMRequestError, match="HTTP 418"):
        run(_one(build_cfg(fake_llm), LLMRequest(chat("q"))))
    assert fake_llm.calls == 1


def test_empty_batch():
    async def go() -> list:
        async with LLMClient(LLMConfig(model="m", base_url="http://127.0.0.1:9/v1")) as llm:
            return await llm.complete_many([])

    assert run(go()) == []


def test_write_behind_store_cache_holds_answers_until_flush(tmp_path):
    store = Store.open(tmp_path / "s.duckdb")
    cache = StoreCache(store, write_behind=True)
    cache.put("k1", "m", "answer", 3, 2)
    cache.put("k1", "m", "second answer", 9, 9)  # like INSERT OR IGNORE: the first put wins
    assert cache.get("k1") == CachedResponse("m", "answer", 3, 2)  # served from memory
    assert store.llm_cache_get("k1") is None  # nothing written yet
    cache.flush()
    entry = store.llm_cache_get("k1")
    assert entry is not None and entry.tokens == 5 and entry.response["text"] == "answer"
    assert StoreCache(store).get("k1") == CachedResponse("m", "answer", 3, 2)
    cache.flush()  # nothing held: a no-op


async def _samples(cfg: LLMConfig, n: int, rounds: int = 1, **kw) -> list[list]:
    """`rounds` times: n samples of one prompt through parse_samples_settled (JSON answers)."""
    out = []
    async with LLMClient(cfg, **kw) as llm:
        for _ in range(rounds):
            reqs = [LLMRequest(chat("three ideas"), tag="t", temperature=1.0, sample=i) for i in range(n)]
            out.append(await llm.parse_samples_settled(reqs, parse_json_strict))
    return out


def test_samples_of_one_prompt_come_from_one_request_with_n(fake_llm):  # noqa: F811
    fake_llm.push(Reply('{"i": 0}', prompt_tokens=100, completion_tokens=5), '{"i": 1}', '{"i": 2}')
    ledger, cache = UsageLedger(), MemoryCache()
    (results,) = run(_samples(build_cfg(fake_llm), 3, ledger=ledger, cache=cache))
    assert [r.value for r in results] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert fake_llm.calls == 1 and fake_llm.requests[0].body["n"] == 3
    assert ledger.total.calls == 1 and ledger.total.prompt_tokens == 100  # the prompt is billed once
    # Each sample is cached under its own key: a rerun costs nothing, and one sample alone hits the cache too.
    (again,) = run(_samples(build_cfg(fake_llm), 3, cache=cache))
    assert [r.value for r in again] == [{"i": 0}, {"i": 1}, {"i": 2}] and fake_llm.calls == 1
    one = run(_one(build_cfg(fake_llm), LLMRequest(chat("three ideas"), tag="t", temperature=1.0, sample=2),
                   cache=cache))  # fmt: skip
    assert one.value == {"i": 2} and fake_llm.calls == 1


def test_a_malformed_sample_is_reasked_alone(fake_llm):  # noqa: F811
    fake_llm.push('{"i": 0}', "not json", '{"i": 2}', '{"i": 1}')
    (results,) = run(_samples(build_cfg(fake_llm), 3))
    assert [r.value for r in results] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert [r.reasks for r in results] == [0, 1, 0]
    assert fake_llm.calls == 2 and "n" not in fake_llm.requests[1].body


def test_endpoint_ignoring_n_gets_the_other_samples_one_by_one():
    with FakeLLM(n_mode="ignore") as server:
        server.push('{"i": 0}', '{"i": 1}', '{"i": 2}')
        (results,) = run(_samples(build_cfg(server), 3))
        assert sorted(r.value["i"] for r in results) == [0, 1, 2] and server.calls == 3


def test_endpoint_refusing_n_is_asked_one_sample_per_request_from_then_on():
    with FakeLLM(n_mode="refuse") as server:
        server.push(*[f'{{"i": {i}}}' for i in range(6)])
        first, second = run(_samples(build_cfg(server), 3, rounds=2))
        assert sorted(r.value["i"] for r in first + second) == list(range(6))
        assert [r.outcome for r in server.requests].count("http 400") == 1 and server.calls == 7
    with FakeLLM(n_mode="refuse") as server:  # or never tries it when told so
        server.push(*[f'{{"i": {i}}}' for i in range(3)])
        run(_samples(build_cfg(server, samples_per_request=False), 3))
        assert server.calls == 3 and all("n" not in r.body for r in server.requests)
