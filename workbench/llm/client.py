"""Async client for any OpenAI-compatible chat endpoint: bounded concurrency, retries, strict parsing, cache, accounting.

    cfg = LLMConfig(model="gpt-4o-mini")               # key read from $OPENAI_API_KEY when connecting
    async with LLMClient(cfg, cache=StoreCache(store)) as llm:
        out = await llm.complete_json(LLMRequest(chat("Reply with JSON: {\\"ok\\": true}"), tag="feature:7"))
        out.value, out.usage, llm.ledger.total

Callers that are not async use `SyncLLMClient` (same methods, blocking). Errors are typed: `LLMAuthError` (401/403,
never retried), `LLMUnavailableError` (retries on 429/5xx/timeouts exhausted), `LLMRequestError` (other 4xx),
`LLMMalformedOutputError` (re-asks exhausted). The API key never reaches a log line, an error message, a cache key
or provenance: only the name of its environment variable does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

import openai
from tqdm.auto import tqdm

from sae_workbench.errors import WorkbenchError
from sae_workbench.llm.cache import ResponseCache, cache_key, messages_sha256
from sae_workbench.llm.config import LLMConfig, LLMNotConfiguredError, read_api_key
from sae_workbench.llm.jsonparse import JSONValue, parse_json_strict
from sae_workbench.llm.usage import Usage, UsageLedger

__all__ = [
    "REASK_PROMPT_VERSION",
    "REASK_TEMPLATE",
    "LLMAuthError",
    "LLMClient",
    "LLMError",
    "LLMMalformedOutputError",
    "LLMNotConfiguredError",
    "LLMRequest",
    "LLMRequestError",
    "LLMResponse",
    "LLMUnavailableError",
    "Parsed",
    "SyncLLMClient",
    "chat",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
Message = Mapping[str, str]

REASK_PROMPT_VERSION = "reask-v1"
REASK_TEMPLATE = (
    "Your previous answer could not be parsed: {error}\n"
    "Reply again with the complete answer in the required format and nothing else."
)


class LLMError(WorkbenchError):
    """Base class of LLM client errors."""


class LLMAuthError(LLMError):
    """The endpoint rejected the API key (HTTP 401/403); retrying cannot help."""


class LLMUnavailableError(LLMError):
    """The endpoint kept failing (429, 5xx, timeouts, connection errors) after every retry."""


class LLMRequestError(LLMError):
    """The endpoint rejected the request itself (HTTP 4xx other than 401/403/429), e.g. an unknown model."""


class LLMMalformedOutputError(LLMError):
    """The model's answers could not be parsed, even after re-asking with the parse error."""

    def __init__(self, message: str, *, last_text: str, errors: Sequence[str]) -> None:
        """Keep the last raw answer and every parse error for inspection."""
        super().__init__(message)
        self.last_text = last_text
        self.errors = list(errors)


def chat(user: str, system: str | None = None) -> tuple[Message, ...]:
    """Messages for a one-turn chat: an optional system message, then the user message."""
    head: tuple[Message, ...] = ({"role": "system", "content": system},) if system else ()
    return (*head, {"role": "user", "content": user})


@dataclass(frozen=True)
class LLMRequest:
    """One chat completion to make."""

    messages: Sequence[Message]
    """Chat messages ({"role", "content"}), in order."""
    tag: str = ""
    """Accounting tag (e.g. "feature:123"); usage is totalled per tag in the ledger."""
    temperature: float | None = None
    """Overrides LLMConfig.temperature when set."""
    max_tokens: int | None = None
    """Overrides LLMConfig.max_tokens when set."""
    sample: int = 0
    """Sample index: distinct values give distinct cache entries for otherwise identical requests (e.g. 3 roots)."""


@dataclass(frozen=True)
class LLMResponse:
    """One answer and what it cost."""

    text: str
    """Assistant message content ("" when the endpoint returned none)."""
    model: str
    """Model that answered (the configured name)."""
    usage: Usage
    """Billed usage of this answer (zero tokens when it came from the cache)."""
    cached: bool
    """True when served from the response cache."""
    cache_key: str
    """Key of this call in the response cache (contains no secret)."""


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """A parsed answer, the raw text it came from, and the usage over all turns (re-asks included)."""

    value: T
    """What the parse function returned."""
    text: str
    """The raw answer that parsed."""
    usage: Usage
    """Usage summed over the first ask and every re-ask."""
    reasks: int
    """How many malformed answers were sent back before this one parsed."""
    cached: bool
    """True when every turn came from the response cache."""


@dataclass
class _LoopState:
    """Per-event-loop resources (an httpx client and a semaphore belong to one loop)."""

    loop: asyncio.AbstractEventLoop
    client: openai.AsyncOpenAI
    semaphore: asyncio.Semaphore
    closed: bool = field(default=False)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context per process: building one loads the whole CA bundle (30-60 ms here), which every job's new
    client would otherwise pay again, even for an http:// endpoint."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


class MalformedCompletionError(ValueError):
    """A 2xx answer whose body is not a chat completion (retried like a server error)."""


def _read_completion(body: str) -> tuple[list[str], int, int]:
    """(texts of the choices in index order, prompt_tokens, completion_tokens) of a chat-completion body; a body
    without choices reads as one empty answer."""
    no_message: dict[str, Any] = {}
    try:
        data: dict[str, Any] = json.loads(body)
        raw_choices: list[dict[str, Any]] = data.get("choices") or []
        choices = sorted(raw_choices, key=lambda c: int(c.get("index") or 0))
        messages = [c.get("message") or no_message for c in choices]
        contents: list[object] = [m.get("content") or "" for m in messages] or [""]
        usage: dict[str, Any] = data.get("usage") or {}
        pt, ct = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        raise MalformedCompletionError(f"malformed completion body ({body[:120]!r})") from None
    texts: list[str] = []
    for text in contents:
        if not isinstance(text, str):
            raise MalformedCompletionError(f"completion content is {type(text).__name__}, not text")
        texts.append(text)
    return texts, pt, ct


def _retry_after_s(err: openai.APIStatusError) -> float | None:
    """Seconds from a Retry-After / retry-after-ms header, when the server sent one."""
    headers = err.response.headers
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            return max(0.0, float(raw) * scale)
        except ValueError:
            continue  # an HTTP date; fall back to our own backoff
    return None


class LLMClient:
    """Async OpenAI-compatible chat client. Use one instance per event loop; `async with` closes it."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        cache: ResponseCache | None = None,
        ledger: UsageLedger | None = None,
        env: Mapping[str, str] | None = None,
        gate: Callable[[], contextlib.AbstractAsyncContextManager[object]] | None = None,
    ) -> None:
        """Check that a key is available (without keeping it) and set up accounting. `gate`, when given, is entered
        around every HTTP attempt (a rate limit shared by several processes, e.g. the Ray workers' limiter)."""
        self.config = config
        self.cache = cache
        self.ledger = ledger if ledger is not None else UsageLedger()
        self._env = env
        self._gate = gate or contextlib.nullcontext
        if read_api_key(config, env) is None:
            raise LLMNotConfiguredError(
                f"${config.api_key_env} is not set and {config.model!r} targets the public OpenAI API: "
                "export the key, or pass a base_url for a local OpenAI-compatible server"
            )
        self._rng = random.Random(config.seed)
        self._state: _LoopState | None = None
        self._n_refused = False  # the endpoint answered a request with `n` > 1 by refusing it

    def __repr__(self) -> str:
        """Show the model and endpoint, never the key."""
        return f"LLMClient(model={self.config.model!r}, base_url={self.config.base_url!r})"

    async def __aenter__(self) -> LLMClient:
        """Enter an async context; the HTTP client is created on first use."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the HTTP client."""
        await self.aclose()

    async def aclose(self) -> None:
        """Write held cache entries (write-behind caches) and close the underlying HTTP connections."""
        flush = getattr(self.cache, "flush", None)
        if flush is not None:
            flush()
        if self._state is not None and not self._state.closed:
            self._state.closed = True
            await self._state.client.close()
        self._state = None

    def _loop_state(self) -> _LoopState:
        """Return this loop's openai client and semaphore, creating them on first use."""
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            key = read_api_key(self.config, self._env)
            if key is None:
                raise LLMNotConfiguredError(f"${self.config.api_key_env} is no longer set")
            client = openai.AsyncOpenAI(
                api_key=key,
                base_url=self.config.base_url,
                timeout=self.config.timeout_s,
                max_retries=0,  # retries are ours: typed errors, seeded jitter, accounting
                http_client=openai.DefaultAsyncHttpxClient(verify=_tls_context()),
            )
            self._state = _LoopState(loop, client, asyncio.Semaphore(self.config.concurrency))
        return self._state

    def _backoff_s(self, retry: int, retry_after: float | None) -> float:
        """Exponential backoff with seeded 'equal jitter'; never shorter than the server's Retry-After."""
        cap = min(self.config.backoff_max_s, self.config.backoff_base_s * (2**retry))
        delay = cap / 2 + self._rng.uniform(0.0, cap / 2)
        return max(delay, retry_after) if retry_after is not None else delay

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """USD cost from the configured per-1k prices (0.0 when unpriced)."""
        cost = 0.0
        if self.config.price_in_per_1k is not None:
            cost += prompt_tokens / 1000 * self.config.price_in_per_1k
        if self.config.price_out_per_1k is not None:
            cost += completion_tokens / 1000 * self.config.price_out_per_1k
        return cost

    async def _http(
        self, messages: list[dict[str, str]], temperature: float, max_tokens: int, n: int = 1
    ) -> tuple[list[str], int, int, int]:
        """One completion request (`n` choices) with retries; returns (texts, prompt_tokens, completion_tokens,
        retries)."""
        cfg = self.config
        retries = 0
        while True:
            state = self._loop_state()
            retry_after: float | None = None
            try:
                async with state.semaphore, self._gate():
                    # The client's generic POST with a raw response: the same request, auth, timeouts and typed
                    # errors as `chat.completions.create`, without its per-call walk over the request's TypedDicts
                    # and the pydantic model of the answer (~2 ms per call; bench/NOTES.md).
                    resp = await state.client.post(
                        "/chat/completions",
                        body={
                            "model": cfg.model,
                            "messages": messages,
                            "temperature": temperature,
                            "max_tokens": max_tokens,
                            **({"n": n} if n > 1 else {}),
                        },
                        cast_to=str,  # the raw body (any openai version; its HTTP library has changed)
                    )
                answer = _read_completion(resp)
            except (openai.AuthenticationError, openai.PermissionDeniedError) as err:
                # No body in the message: some servers echo (part of) the key back.
                raise LLMAuthError(
                    f"{cfg.base_url or 'api.openai.com'} rejected the API key in ${cfg.api_key_env} "
                    f"(HTTP {err.status_code}): set a valid key in that variable"
                ) from None
            except openai.APIStatusError as err:
                if err.status_code != 429 and err.status_code < 500 and err.status_code != 408:
                    raise LLMRequestError(
                        f"{cfg.base_url or 'api.openai.com'} refused the request for model {cfg.model!r} "
                        f"(HTTP {err.status_code}: {str(err)[:300]}); check the model name and parameters"
                    ) from None
                reason = f"HTTP {err.status_code}"
                retry_after = _retry_after_s(err)
            except openai.APITimeoutError:
                reason = f"timeout after {cfg.timeout_s:g} s"
            except openai.APIConnectionError as err:
                reason = f"connection error ({type(err.__cause__).__name__ if err.__cause__ else 'unknown'})"
            except MalformedCompletionError as err:
                reason = str(err)
            else:
                return (*answer, retries)
            if retries >= cfg.max_retries:
                raise LLMUnavailableError(
                    f"{cfg.base_url or 'api.openai.com'} failed {retries + 1} time(s), last: {reason}; "
                    "check that the endpoint is up, or raise max_retries/timeout_s"
                )
            delay = self._backoff_s(retries, retry_after)
            log.warning(
                "LLM call failed (%s); retry %d/%d in %.2f s", reason, retries + 1, cfg.max_retries, delay
            )
            await asyncio.sleep(delay)
            retries += 1

    def _resolve(
        self, request: LLMRequest, digest: str | None = None
    ) -> tuple[list[dict[str, str]], float, int, str]:
        """(messages, temperature, max_tokens, cache key) of a request, config defaults filled in (`digest`: the
        messages' sha256 when already known)."""
        cfg = self.config
        temperature = cfg.temperature if request.temperature is None else request.temperature
        max_tokens = cfg.max_tokens if request.max_tokens is None else request.max_tokens
        messages = [{"role": m["role"], "content": m["content"]} for m in request.messages]
        key = cache_key(
            cfg.model,
            messages,
            {"temperature": temperature, "max_tokens": max_tokens, "sample": request.sample},
            digest,
        )
        return messages, temperature, max_tokens, key

    def _cached(self, key: str, tag: str) -> LLMResponse | None:
        """The cached answer under `key` (accounted as a cache hit), or None."""
        if self.cache is None:
            return None
        t0 = time.perf_counter()
        hit = self.cache.get(key)
        if hit is None:
            return None
        usage = Usage(cache_hits=1, seconds=time.perf_counter() - t0)
        self.ledger.record(tag, usage)
        return LLMResponse(hit.response_text, self.config.model, usage, True, key)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One answer: from the cache when present, otherwise from the endpoint (then cached)."""
        cfg = self.config
        messages, temperature, max_tokens, key = self._resolve(request)
        t0 = time.perf_counter()
        if (hit := self._cached(key, request.tag)) is not None:
            return hit
        texts, pt, ct, retries = await self._http(messages, temperature, max_tokens)
        text = texts[0]
        if self.cache is not None:
            self.cache.put(key, cfg.model, text, pt, ct)
        usage = Usage(pt, ct, self._cost(pt, ct), 1, 0, retries, 0, time.perf_counter() - t0)
        self.ledger.record(request.tag, usage)
        return LLMResponse(text, cfg.model, usage, False, key)

    async def complete_parsed(
        self, request: LLMRequest, parse: Callable[[str], T], first: LLMResponse | None = None
    ) -> Parsed[T]:
        """An answer run through `parse`; a ValueError from `parse` is sent back to the model (≤ max_reasks times).
        `first`: the answer to the request itself when it is already at hand (a sample of a multi-sample call)."""
        messages = list(request.messages)
        total = Usage()
        errors: list[str] = []
        all_cached = True
        text = ""
        for turn in range(self.config.max_reasks + 1):
            if turn == 0 and first is not None:
                resp = first
            else:
                resp = await self.complete(replace(request, messages=tuple(messages)))
            text = resp.text
            total = total + resp.usage
            all_cached = all_cached and resp.cached
            try:
                value = parse(text)
            except ValueError as err:
                errors.append(str(err))
                if turn == self.config.max_reasks:
                    break
                log.info("malformed LLM answer (tag %r): %s; re-asking", request.tag, err)
                messages += [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": REASK_TEMPLATE.format(error=err)},
                ]
                reask = Usage(reasks=1)
                total = total + reask
                self.ledger.record(request.tag, reask)
                continue
            return Parsed(value, text, total, turn, all_cached)
        raise LLMMalformedOutputError(
            f"the model's answer could not be parsed after {len(errors)} attempt(s) (tag {request.tag!r}); "
            f"last error: {errors[-1]}. Use a stronger model or raise max_reasks",
            last_text=text,
            errors=errors,
        )

    async def complete_json(self, request: LLMRequest) -> Parsed[JSONValue]:
        """An answer that must be exactly one JSON document (optionally fenced)."""
        return await self.complete_parsed(request, parse_json_strict)

    async def complete_many(
        self, requests: Sequence[LLMRequest], *, progress: bool = False
    ) -> list[LLMResponse]:
        """Many answers concurrently (bounded by config.concurrency), in request order; the first error cancels the rest."""
        return await _gather_ordered([self.complete(r) for r in requests], progress, "LLM calls")

    async def parse_many(
        self, requests: Sequence[LLMRequest], parse: Callable[[str], T], *, progress: bool = False
    ) -> list[Parsed[T]]:
        """Many parsed answers concurrently, in request order; the first error cancels the rest."""
        return await _gather_ordered(
            [self.complete_parsed(r, parse) for r in requests], progress, "LLM calls"
        )

    async def parse_many_settled(
        self, requests: Sequence[LLMRequest], parse: Callable[[str], T], *, progress: bool = False
    ) -> list[Parsed[T] | LLMMalformedOutputError]:
        """Like parse_many, but an unparseable answer becomes that item's result; other errors still stop the batch."""

        async def one(r: LLMRequest) -> Parsed[T] | LLMMalformedOutputError:
            try:
                return await self.complete_parsed(r, parse)
            except LLMMalformedOutputError as err:
                return err

        return await _gather_ordered([one(r) for r in requests], progress, "LLM calls")

    async def parse_samples_settled(
        self, requests: Sequence[LLMRequest], parse: Callable[[str], T]
    ) -> list[Parsed[T] | LLMMalformedOutputError]:
        """parse_many_settled for samples of one prompt (requests equal but for `sample`): the uncached samples come
        from one request with `n` choices where the endpoint allows it (LLMConfig.samples_per_request)."""
        first = await self._sample_answers(requests)

        async def one(i: int, r: LLMRequest) -> Parsed[T] | LLMMalformedOutputError:
            try:
                return await self.complete_parsed(r, parse, first.get(i))
            except LLMMalformedOutputError as err:
                return err

        return await _gather_ordered([one(i, r) for i, r in enumerate(requests)], False, "LLM calls")

    async def _sample_answers(self, requests: Sequence[LLMRequest]) -> dict[int, LLMResponse]:
        """Answers for samples among `requests` (by position): the cached ones from the cache, the others from ONE
        request with `n` choices; {} when that does not apply (one sample, setting off, endpoint known to refuse
        `n`, unequal requests)."""
        cfg = self.config
        if len(requests) < 2 or not cfg.samples_per_request or self._n_refused:
            return {}
        base = requests[0]
        if any(replace(r, sample=base.sample) != base for r in requests[1:]):
            return {}
        digest = messages_sha256(base.messages)  # the samples differ only in `sample`: hash the prompt once
        resolved = [self._resolve(r, digest) for r in requests]
        messages, temperature, max_tokens, _ = resolved[0]  # requests[0] is `base`
        keys = [key for *_, key in resolved]
        out: dict[int, LLMResponse] = {}
        for i, key in enumerate(keys):
            if (hit := self._cached(key, base.tag)) is not None:
                out[i] = hit
        missing = [i for i in range(len(requests)) if i not in out]
        if len(missing) < 2:
            return out
        t0 = time.perf_counter()
        try:
            texts, pt, ct, retries = await self._http(messages, temperature, max_tokens, n=len(missing))
        except LLMRequestError as err:
            self._n_refused = True
            log.warning("%s; asking for one sample per request from now on", err)
            return out
        usage = Usage(pt, ct, self._cost(pt, ct), 1, 0, retries, 0, time.perf_counter() - t0)
        self.ledger.record(base.tag, usage)
        if len(texts) < len(missing):
            log.info(
                "the endpoint returned %d of %d samples; asking for the rest one by one",
                len(texts),
                len(missing),
            )
        for j, (i, text) in enumerate(zip(missing, texts, strict=False)):
            if self.cache is not None:  # each sample under its own key; the call's tokens counted once
                self.cache.put(keys[i], cfg.model, text, pt if j == 0 else 0, ct if j == 0 else 0)
            out[i] = LLMResponse(text, cfg.model, usage if j == 0 else Usage(), False, keys[i])
        return out


async def _gather_ordered(coros: Sequence[Coroutine[Any, Any, R]], progress: bool, desc: str) -> list[R]:
    """Run coroutines concurrently; results in input order; on the first exception cancel the others and raise it."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    if not tasks:
        return []
    bar = tqdm(total=len(tasks), desc=desc, disable=not progress)
    for t in tasks:
        t.add_done_callback(lambda _t: bar.update(1))
    try:
        # gather raises the first exception as soon as it happens; the finally block cancels the rest.
        return list(await asyncio.gather(*tasks))
    finally:
        unfinished = [t for t in tasks if not t.done()]
        for t in unfinished:
            t.cancel()
        if unfinished:
            await asyncio.gather(*unfinished, return_exceptions=True)
        bar.close()


class SyncLLMClient:
    """Blocking facade over LLMClient for callers that are not async; runs its own event loop in a thread."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        cache: ResponseCache | None = None,
        ledger: UsageLedger | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Create the async client and start a private event loop (works even inside a running loop)."""
        self.client = LLMClient(config, cache=cache, ledger=ledger, env=env)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="llm-client-loop", daemon=True)
        self._thread.start()

    @property
    def ledger(self) -> UsageLedger:
        """The job's usage ledger."""
        return self.client.ledger

    @property
    def config(self) -> LLMConfig:
        """The endpoint configuration."""
        return self.client.config

    def _run(self, coro: Awaitable[R]) -> R:
        """Run a coroutine on the private loop and wait for it."""
        if self._loop.is_closed():
            raise LLMError("this SyncLLMClient is closed; create a new one")

        async def wrap() -> R:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self._loop).result()

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Blocking LLMClient.complete."""
        return self._run(self.client.complete(request))

    def complete_parsed(self, request: LLMRequest, parse: Callable[[str], T]) -> Parsed[T]:
        """Blocking LLMClient.complete_parsed."""
        return self._run(self.client.complete_parsed(request, parse))

    def complete_json(self, request: LLMRequest) -> Parsed[JSONValue]:
        """Blocking LLMClient.complete_json."""
        return self._run(self.client.complete_json(request))

    def complete_many(self, requests: Sequence[LLMRequest], *, progress: bool = False) -> list[LLMResponse]:
        """Blocking LLMClient.complete_many."""
        return self._run(self.client.complete_many(requests, progress=progress))

    def parse_many(
        self, requests: Sequence[LLMRequest], parse: Callable[[str], T], *, progress: bool = False
    ) -> list[Parsed[T]]:
        """Blocking LLMClient.parse_many."""
        return self._run(self.client.parse_many(requests, parse, progress=progress))

    def parse_many_settled(
        self, requests: Sequence[LLMRequest], parse: Callable[[str], T], *, progress: bool = False
    ) -> list[Parsed[T] | LLMMalformedOutputError]:
        """Blocking LLMClient.parse_many_settled."""
        return self._run(self.client.parse_many_settled(requests, parse, progress=progress))

    def close(self) -> None:
        """Close HTTP connections and stop the private loop."""
        if self._loop.is_closed():
            return
        self._run(self.client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> SyncLLMClient:
        """Use as a context manager."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close on exit."""
        self.close()
