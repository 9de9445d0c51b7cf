"""Async client for any OpenAI-compatible chat endpoint: schema-constrained answers, context checks, an adaptive
number of requests in flight, bounded retries, strict parsing, a cache of parsed answers, accounting.

    cfg = LLMConfig(model="gpt-4o-mini")               # key read from $OPENAI_API_KEY when connecting
    async with LLMClient(cfg, cache=StoreCache(store)) as llm:
        req = LLMRequest(chat("Explain ..."), tag="feature:7", schema=EXPLANATION_SCHEMA)
        fit = await llm.check_fit(req)                 # PromptFit; raises LLMContextOverflowError when too long
        out = await llm.complete_json(req)             # Parsed: .value, .usage, .reasks
        llm.provenance()                               # model, base URL, structured-output form, context length

Callers that are not async use `SyncLLMClient` (same methods, blocking). Errors are typed (`errors.py`):
`LLMAuthError` and `LLMEndpointDownError` stop a job (`JOB_FATAL_ERRORS`); `LLMUnavailableError` (`LLMTimeoutError`),
`LLMRequestError` (`LLMFormatRefusedError`, `LLMContextOverflowError`) and `LLMMalformedOutputError` fail one feature
(`FEATURE_ERRORS`). Only answers that parsed are cached, so a rerun asks again for what failed. The API key never
reaches a log line, an error message, a cache key or provenance: only the name of its environment variable does.
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
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

import openai
from tqdm.auto import tqdm

from sae_workbench.llm.cache import ResponseCache, cache_key, messages_sha256
from sae_workbench.llm.config import LLMConfig, LLMNotConfiguredError, read_api_key
from sae_workbench.llm.endpoint import (
    DETECTION_ORDER,
    GGUF_COUNTER,
    TOKENS_PER_MESSAGE,
    EndpointFacts,
    SchemaForm,
    context_length_in,
    endpoint_facts,
    estimate_tokens,
    gguf_token_count,
    is_context_overflow,
    is_format_refusal,
    schema_fields,
    schema_sha256,
    server_root,
)
from sae_workbench.llm.errors import (
    FEATURE_ERRORS,
    JOB_FATAL_ERRORS,
    LLMAuthError,
    LLMContextOverflowError,
    LLMEndpointDownError,
    LLMError,
    LLMFormatRefusedError,
    LLMMalformedOutputError,
    LLMRequestError,
    LLMTimeoutError,
    LLMUnavailableError,
)
from sae_workbench.llm.jsonparse import JSONValue, parse_json_strict
from sae_workbench.llm.request import LLMRequest, LLMResponse, Message, Parsed, PromptFit, chat
from sae_workbench.llm.usage import Usage, UsageLedger
from sae_workbench.llm.window import AdaptiveWindow

__all__ = [
    "FEATURE_ERRORS",
    "JOB_FATAL_ERRORS",
    "REASK_PROMPT_VERSION",
    "REASK_TEMPLATE",
    "LLMAuthError",
    "LLMClient",
    "LLMContextOverflowError",
    "LLMEndpointDownError",
    "LLMError",
    "LLMFormatRefusedError",
    "LLMMalformedOutputError",
    "LLMNotConfiguredError",
    "LLMRequest",
    "LLMRequestError",
    "LLMResponse",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "Parsed",
    "PromptFit",
    "SyncLLMClient",
    "chat",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

REASK_PROMPT_VERSION = "reask-v1"
REASK_TEMPLATE = (
    "Your previous answer could not be parsed: {error}\n"
    "Reply again with the complete answer in the required format and nothing else."
)
TRUNCATED_NOTE = " (your answer was cut off at the length limit: answer more briefly)"

# An answer slower than this share of the timeout does not widen the window: the server is near its limit.
_FAST_SHARE = 0.5
# A retried timeout gets twice the time of the attempt before it, up to this multiple of LLMConfig.timeout_s.
_MAX_TIMEOUT_FACTOR = 4.0
_PROBE_TIMEOUT_S = 10.0
_COUNT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class _Completion:
    """One HTTP answer: the choices' texts, the billed tokens, whether a choice hit the length limit."""

    texts: list[str]
    prompt_tokens: int
    completion_tokens: int
    truncated: list[bool]
    retries: int = 0


@dataclass
class _LoopState:
    """Per-event-loop resources (an httpx client, a condition and a lock belong to one loop)."""

    loop: asyncio.AbstractEventLoop
    client: openai.AsyncOpenAI
    slots: asyncio.Condition
    form_lock: asyncio.Lock
    probe_lock: asyncio.Lock
    closed: bool = field(default=False)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context per process: building one loads the whole CA bundle (30-60 ms here), which every job's new
    client would otherwise pay again, even for an http:// endpoint."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


class MalformedCompletionError(ValueError):
    """A 2xx answer whose body is not a chat completion (retried like a server error)."""


def _read_completion(body: str) -> _Completion:
    """The choices (texts in index order, whether each was cut at the length limit) and billed tokens of a
    chat-completion body; a body without choices reads as one empty answer."""
    no_message: dict[str, Any] = {}
    try:
        data: dict[str, Any] = json.loads(body)
        raw_choices: list[dict[str, Any]] = data.get("choices") or []
        choices = sorted(raw_choices, key=lambda c: int(c.get("index") or 0))
        messages = [c.get("message") or no_message for c in choices]
        contents: list[object] = [m.get("content") or "" for m in messages] or [""]
        truncated = [c.get("finish_reason") == "length" for c in choices] or [False]
        usage: dict[str, Any] = data.get("usage") or {}
        pt, ct = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        raise MalformedCompletionError(f"malformed completion body ({body[:120]!r})") from None
    texts: list[str] = []
    for text in contents:
        if not isinstance(text, str):
            raise MalformedCompletionError(f"completion content is {type(text).__name__}, not text")
        texts.append(text)
    return _Completion(texts, pt, ct, truncated)


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


def _error_text(err: openai.APIStatusError) -> str:
    """The error's message and body as one string (what the classifiers read; servers put the reason in either)."""
    body = err.body
    try:
        body_text = json.dumps(body) if not isinstance(body, str) else body
    except (TypeError, ValueError):
        body_text = str(body)
    return f"{err} {body_text}"


def _messages_text(messages: Sequence[Message]) -> str:
    """The messages as one text to count (role names included)."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


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
        self._window = AdaptiveWindow(config.start_concurrency, config.concurrency)
        self._connect_failures = 0  # consecutive attempts that could not connect (reset by any HTTP answer)
        self.facts: EndpointFacts = endpoint_facts(config.base_url, config.model)
        self._gguf_failed = False  # config.tokenizer_gguf could not be loaded: count as if it were not set
        self._counted_by: str | None = None  # how the last prompt was counted (provenance)
        if config.context_length is not None:
            self.facts.context_length, self.facts.context_source = config.context_length, "config"

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

    # ---- what the client knows about the endpoint ------------------------------------------------------------
    @property
    def concurrency_limit(self) -> int:
        """Requests allowed in flight now (the adaptive window; at most LLMConfig.concurrency)."""
        return self._window.size

    @property
    def structured_output_form(self) -> SchemaForm | None:
        """The form schemas are sent in: the configured one, else the one detected for this endpoint (None = not
        detected yet)."""
        forced = self.config.structured_output
        return cast("SchemaForm", forced) if forced != "auto" else self.facts.form

    def provenance(self) -> dict[str, Any]:
        """The non-secret settings and learned facts to record with an LLM-made result: the config's params plus the
        structured-output form, the context length and its source, and how tokens were counted."""
        return {
            **self.config.params(),
            "structured_output": self.structured_output_form,
            "context_length": self.facts.context_length,
            "context_source": self.facts.context_source or None,
            "token_counter": self._counted_by,
        }

    # ---- per-loop resources ------------------------------------------------------------------------------------
    def _loop_state(self) -> _LoopState:
        """Return this loop's openai client and synchronisation objects, creating them on first use."""
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
            self._state = _LoopState(loop, client, asyncio.Condition(), asyncio.Lock(), asyncio.Lock())
        return self._state

    @contextlib.asynccontextmanager
    async def _slot(self, state: _LoopState) -> AsyncIterator[None]:
        """Hold one of the window's in-flight slots."""
        async with state.slots:
            await state.slots.wait_for(lambda: self._window.in_flight < self._window.size)
            self._window.in_flight += 1
        try:
            yield
        finally:
            async with state.slots:
                self._window.in_flight -= 1
                state.slots.notify_all()

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

    def _where(self) -> str:
        """The endpoint, for messages."""
        return self.config.base_url or "api.openai.com"

    # ---- one HTTP request with retries -------------------------------------------------------------------------
    async def _http(self, body: dict[str, Any], *, constrained: bool = False, tag: str = "") -> _Completion:
        """One completion request with bounded retries. `constrained`: the body carries a structured-output form,
        so a refusal that names it raises LLMFormatRefusedError instead of being retried."""
        cfg = self.config
        retries = 0
        timeout = cfg.timeout_s
        last_timeout = False
        while True:
            state = self._loop_state()
            retry_after: float | None = None
            overload = False
            try:
                async with self._slot(state), self._gate():
                    t0 = time.perf_counter()
                    # The client's generic POST with a raw response: the same request, auth, timeouts and typed
                    # errors as `chat.completions.create`, without its per-call walk over the request's TypedDicts
                    # and the pydantic model of the answer (~2 ms per call; bench/NOTES.md).
                    resp = await state.client.post(
                        "/chat/completions",
                        body=body,
                        cast_to=str,  # the raw body (any openai version; its HTTP library has changed)
                        options={"timeout": timeout},
                    )
                    if time.perf_counter() - t0 < _FAST_SHARE * cfg.timeout_s:
                        self._window.grow()  # inside the slot, so the next release lets the wider window fill
                self._connect_failures = 0
                answer = _read_completion(resp)
            except (openai.AuthenticationError, openai.PermissionDeniedError) as err:
                self._connect_failures = 0
                # No body in the message: some servers echo (part of) the key back.
                raise LLMAuthError(
                    f"{self._where()} rejected the API key in ${cfg.api_key_env} "
                    f"(HTTP {err.status_code}): set a valid key in that variable"
                ) from None
            except openai.APIStatusError as err:
                self._connect_failures = 0
                self._raise_if_final(err, body, constrained)
                reason = f"HTTP {err.status_code}"
                retry_after = _retry_after_s(err)
                overload = err.status_code in (429, 503)
                last_timeout = False
            except openai.APITimeoutError:
                reason = f"timeout after {timeout:g} s"
                overload = last_timeout = True
                timeout = min(timeout * 2, cfg.timeout_s * _MAX_TIMEOUT_FACTOR)
            except openai.APIConnectionError as err:
                self._connect_failures += 1
                reason = f"connection error ({type(err.__cause__).__name__ if err.__cause__ else 'unknown'})"
                overload, last_timeout = True, False
                if self._connect_failures >= cfg.down_after:
                    self._window.shrink()
                    raise LLMEndpointDownError(
                        f"{self._where()} could not be reached in {self._connect_failures} consecutive attempts "
                        f"(last: {reason}): the endpoint is down; start it (workbench llm serve) and rerun"
                    ) from None
            except MalformedCompletionError as err:
                reason = str(err)
                last_timeout = False
            else:
                return replace(answer, retries=retries)
            if overload:
                self._window.shrink()
            if retries >= cfg.max_retries:
                kind = LLMTimeoutError if last_timeout else LLMUnavailableError
                raise kind(
                    f"{self._where()} failed {retries + 1} time(s), last: {reason}; "
                    "check that the endpoint is up, or raise max_retries/timeout_s"
                )
            delay = self._backoff_s(retries, retry_after)
            log.warning(
                "LLM call failed (%s, tag %r); retry %d/%d in %.2f s (window %d)",
                reason, tag, retries + 1, cfg.max_retries, delay, self._window.size,
            )  # fmt: skip
            await asyncio.sleep(delay)
            retries += 1

    def _raise_if_final(self, err: openai.APIStatusError, body: Mapping[str, Any], constrained: bool) -> None:
        """Raise the typed error of an HTTP error that retrying cannot fix: a context overflow, a refused
        structured-output form, any other 4xx but 408/429. Return for the ones worth retrying."""
        cfg = self.config
        status, text = err.status_code, _error_text(err)
        if is_context_overflow(status, text):
            stated = context_length_in(text)
            if stated is not None and self.facts.context_source != "config":
                self.facts.context_length, self.facts.context_source = stated, "overflow error"
            raise LLMContextOverflowError(
                f"{self._where()} refused the prompt as too long for the context (HTTP {status}: "
                f"{str(err)[:300]}); trim the prompt or lower max_tokens",
                prompt_tokens=None,
                max_tokens=int(body.get("max_tokens") or cfg.max_tokens),
                context_length=stated,
            )
        if constrained and is_format_refusal(status, text):
            raise LLMFormatRefusedError(
                f"{self._where()} refused the structured-output form of the request (HTTP {status}: "
                f"{str(err)[:300]}); set structured_output to another form (json_schema, json_object, none)"
            )
        if status != 429 and status < 500 and status != 408:
            raise LLMRequestError(
                f"{self._where()} refused the request for model {cfg.model!r} "
                f"(HTTP {status}: {str(err)[:300]}); check the model name and parameters"
            )

    async def _send(
        self,
        messages: list[dict[str, str]],
        temperature: float,
        max_tokens: int,
        request: LLMRequest,
        n: int = 1,
    ) -> _Completion:
        """Send one completion request, with the request's schema in the endpoint's form (detected on first use)."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
            **({"n": n} if n > 1 else {}),
        }
        schema = request.schema
        if schema is None:
            return await self._http(body, tag=request.tag)
        form = self.structured_output_form
        if form is not None:
            return await self._http({**body, **schema_fields(form, schema, request.schema_name)},
                                    constrained=form != "none", tag=request.tag)  # fmt: skip
        state = self._loop_state()
        async with state.form_lock:  # one request detects; the others wait and use its finding
            if self.facts.form is not None:
                form = self.facts.form
                return await self._http({**body, **schema_fields(form, schema, request.schema_name)},
                                         constrained=form != "none", tag=request.tag)  # fmt: skip
            for candidate in DETECTION_ORDER:
                try:
                    answer = await self._http({**body, **schema_fields(candidate, schema, request.schema_name)},
                                              constrained=candidate != "none", tag=request.tag)  # fmt: skip
                except LLMFormatRefusedError as err:
                    log.info("%s: structured-output form %s refused (%s); trying the next", self._where(),
                             candidate, err)  # fmt: skip
                    continue
                self.facts.form = candidate
                log.info("%s accepts structured output as %s", self._where(), candidate)
                return answer
        raise AssertionError("the 'none' form carries no schema and cannot be refused")  # pragma: no cover

    # ---- context length and token counting ----------------------------------------------------------------------
    async def _probe_json(
        self,
        method: str,
        url: str,
        payload: Mapping[str, Any] | None = None,
        timeout_s: float = _PROBE_TIMEOUT_S,
    ) -> dict[str, Any] | None:
        """GET/POST a JSON route of the server (not the chat route); None on any error or an answer that is not a
        JSON object."""
        state = self._loop_state()
        try:
            if method == "GET":
                raw = await state.client.get(url, cast_to=str, options={"timeout": timeout_s})
            else:
                raw = await state.client.post(
                    url, body=dict(payload or {}), cast_to=str, options={"timeout": timeout_s}
                )
            data: object = json.loads(raw)
        except (openai.APIError, ValueError, TypeError):
            return None
        return cast("dict[str, Any]", data) if isinstance(data, dict) else None

    async def context_length(self) -> int | None:
        """The model's context length in tokens: the config's, else what the server reports (asked once per
        endpoint: vLLM's /v1/models max_model_len, llama-server's /props n_ctx), else one learned from an overflow
        refusal; None when nothing says."""
        facts = self.facts
        if facts.context_length is not None or facts.context_probed or self.config.base_url is None:
            return facts.context_length
        async with self._loop_state().probe_lock:
            if facts.context_probed:
                return facts.context_length
            found = await self._probe_context()
            facts.context_probed = True
            if found is not None and facts.context_length is None:
                facts.context_length, facts.context_source = found
        return facts.context_length

    async def _probe_context(self) -> tuple[int, str] | None:
        """(context length, source) from the server's metadata routes, or None."""
        assert self.config.base_url is not None
        models = await self._probe_json("GET", self.config.base_url.rstrip("/") + "/models")
        entries: list[object] = list((models or {}).get("data") or [])
        for raw in entries:
            entry = cast("dict[str, Any]", raw) if isinstance(raw, dict) else {}
            length = entry.get("max_model_len")
            if isinstance(length, int) and (entry.get("id") == self.config.model or len(entries) == 1):
                return length, "/v1/models max_model_len"
        props = await self._probe_json("GET", server_root(self.config.base_url) + "/props") or {}
        settings = props.get("default_generation_settings")
        n_ctx = (
            cast("dict[str, Any]", settings).get("n_ctx")
            if isinstance(settings, dict)
            else props.get("n_ctx")
        )
        if isinstance(n_ctx, int) and n_ctx > 0:
            return n_ctx, "/props n_ctx"
        return None

    async def count_tokens(self, text: str) -> tuple[int, str]:
        """(tokens in `text`, how they were counted): by the model's GGUF vocabulary in this process when
        LLMConfig.tokenizer_gguf names it (exact, and never queued behind the server's running answer), else by the
        server's tokenizer when it has a route for it (llama-cpp-python /extras/tokenize/count, llama-server or vLLM
        /tokenize; found once per endpoint), else `estimate_tokens` (characters / 3, an over-count)."""
        facts = self.facts
        if self.config.tokenizer_gguf is not None and not self._gguf_failed:
            try:
                n = await asyncio.to_thread(gguf_token_count, self.config.tokenizer_gguf, text)
            except (ImportError, OSError, ValueError, RuntimeError) as err:
                log.warning(
                    "cannot count tokens with %s (%s); asking the server", self.config.tokenizer_gguf, err
                )
                self._gguf_failed = True
            else:
                self._counted_by = GGUF_COUNTER
                return n, GGUF_COUNTER
        if self.config.base_url is None:
            facts.token_counter = facts.token_counter or "estimate"
        if facts.token_counter is None:
            async with self._loop_state().probe_lock:
                if facts.token_counter is None:
                    for route in ("/extras/tokenize/count", "/tokenize"):
                        if await self._server_count(route, "probe") is not None:
                            facts.token_counter = route
                            break
                    else:
                        facts.token_counter = "estimate"
        if facts.token_counter != "estimate":
            n = await self._server_count(facts.token_counter, text)
            if n is not None:
                self._counted_by = facts.token_counter
                return n, facts.token_counter
            # llama-cpp-python answers /extras/tokenize only between completions: a busy server makes every count
            # wait for its running answer. Count by estimate from now on rather than stall each request.
            log.warning("%s%s did not answer; counting tokens by estimate from now on", self._where(),
                        facts.token_counter)  # fmt: skip
            facts.token_counter = "estimate"
        self._counted_by = "estimate"
        return estimate_tokens(text), "estimate"

    async def _server_count(self, route: str, text: str) -> int | None:
        """Tokens in `text` by one server route, or None when the route does not answer with a count."""
        assert self.config.base_url is not None
        root = server_root(self.config.base_url)
        payload = {"input": text, "model": self.config.model} if route.startswith("/extras") else {
            "content": text, "prompt": text, "model": self.config.model, "add_special": False}  # fmt: skip
        data = await self._probe_json("POST", root + route, payload, timeout_s=_COUNT_TIMEOUT_S) or {}
        count, tokens = data.get("count"), data.get("tokens")
        if isinstance(count, int):
            return count
        return len(cast("list[object]", tokens)) if isinstance(tokens, list) else None

    async def prompt_tokens(self, messages: Sequence[Message]) -> tuple[int, str]:
        """(prompt tokens of a chat, how they were counted): the messages' text plus TOKENS_PER_MESSAGE per message
        for the chat template, plus what the endpoint's template was seen to add beyond that (a default system
        prompt, say: learned from the prompt tokens the server bills)."""
        n, how = await self.count_tokens(_messages_text(messages))
        return n + TOKENS_PER_MESSAGE * (len(messages) + 1) + self.facts.template_tokens, how

    async def check_fit(self, request: LLMRequest) -> PromptFit:
        """The request's prompt tokens against the context; raise LLMContextOverflowError when prompt + completion
        budget exceeds it (nothing is checked, and nothing counted, when the context length is unknown)."""
        max_tokens = self.config.max_tokens if request.max_tokens is None else request.max_tokens
        context = await self.context_length()
        if context is None:
            return PromptFit(0, max_tokens, None, "not counted")
        n, how = await self.prompt_tokens(request.messages)
        fit = PromptFit(n, max_tokens, context, how)
        if not fit.fits:
            raise LLMContextOverflowError(
                f"the prompt ({n} tokens by {how}) plus the completion budget ({max_tokens}) exceeds the "
                f"{context}-token context of {self.config.model!r} (tag {request.tag!r}); trim the prompt by "
                f"{-(fit.room or 0)} tokens or lower max_tokens",
                prompt_tokens=n,
                max_tokens=max_tokens,
                context_length=context,
            )
        return fit

    # ---- answers ---------------------------------------------------------------------------------------------
    def _resolve(
        self, request: LLMRequest, digest: str | None = None
    ) -> tuple[list[dict[str, str]], float, int, str]:
        """(messages, temperature, max_tokens, cache key) of a request, config defaults filled in (`digest`: the
        messages' sha256 when already known)."""
        cfg = self.config
        temperature = cfg.temperature if request.temperature is None else request.temperature
        max_tokens = cfg.max_tokens if request.max_tokens is None else request.max_tokens
        messages = [{"role": m["role"], "content": m["content"]} for m in request.messages]
        params: dict[str, Any] = {
            "temperature": temperature,
            "max_tokens": max_tokens,
            "sample": request.sample,
        }
        if request.schema is not None:  # only then: keys of free-form requests stay what they were
            params["schema"] = schema_sha256(request.schema)
        key = cache_key(cfg.model, messages, params, digest)
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

    async def _fetch(self, request: LLMRequest, *, read_cache: bool = True) -> LLMResponse:
        """One answer, from the cache when present (and `read_cache`), otherwise from the endpoint; not cached."""
        messages, temperature, max_tokens, key = self._resolve(request)
        t0 = time.perf_counter()
        if read_cache and (hit := self._cached(key, request.tag)) is not None:
            return hit
        fit = await self.check_fit(request)
        answer = await self._send(messages, temperature, max_tokens, request)
        pt, ct = answer.prompt_tokens, answer.completion_tokens
        if fit.counted_by not in ("estimate", "not counted") and pt > fit.prompt_tokens:
            # The server's tokenizer counted our text; what it bills beyond that is its chat template's own.
            self.facts.template_tokens += pt - fit.prompt_tokens
        usage = Usage(pt, ct, self._cost(pt, ct), 1, 0, answer.retries, 0, time.perf_counter() - t0)
        self.ledger.record(request.tag, usage)
        return LLMResponse(answer.texts[0], self.config.model, usage, False, key, answer.truncated[0])

    def _store(self, key: str, text: str, usage: Usage) -> None:
        """Cache an answer (with the tokens it cost) under `key`."""
        if self.cache is not None:
            self.cache.put(key, self.config.model, text, usage.prompt_tokens, usage.completion_tokens)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One answer, unparsed: from the cache when present, otherwise from the endpoint (then cached)."""
        resp = await self._fetch(request)
        if not resp.cached:
            self._store(resp.cache_key, resp.text, resp.usage)
        return resp

    async def complete_parsed(
        self, request: LLMRequest, parse: Callable[[str], T], first: LLMResponse | None = None
    ) -> Parsed[T]:
        """An answer run through `parse`; a ValueError from `parse` is sent back to the model (≤ max_reasks times)
        with the original messages, the last bad answer and the correction only, so re-asks never grow the prompt.
        Only an answer that parsed is cached, under the request's own key (a rerun gets it at once); a request whose
        answers never parse caches nothing, so a rerun asks again. `first`: the answer to the request itself when it
        is already at hand (a sample of a multi-sample call)."""
        base = list(request.messages)
        messages = base
        total = Usage()
        errors: list[str] = []
        all_cached = True
        text, truncated, key = "", False, ""
        for turn in range(self.config.max_reasks + 1):
            if turn == 0 and first is not None:
                resp = first
            else:
                resp = await self._fetch(replace(request, messages=tuple(messages)), read_cache=turn == 0)
            if turn == 0:
                key = resp.cache_key
            text, truncated = resp.text, resp.truncated
            total = total + resp.usage
            all_cached = all_cached and resp.cached
            try:
                value = parse(text)
            except ValueError as err:
                note = TRUNCATED_NOTE if truncated else ""
                errors.append(f"{err}{note}")
                if turn == self.config.max_reasks:
                    break
                log.info("malformed LLM answer (tag %r): %s%s; re-asking", request.tag, err, note)
                messages = [
                    *base,
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": REASK_TEMPLATE.format(error=f"{err}{note}")},
                ]
                reask = Usage(reasks=1)
                total = total + reask
                self.ledger.record(request.tag, reask)
                continue
            if not resp.cached:
                self._store(key, text, total)
            return Parsed(value, text, total, turn, all_cached)
        raise LLMMalformedOutputError(
            f"the model's answer could not be parsed after {len(errors)} attempt(s) (tag {request.tag!r}); "
            f"last error: {errors[-1]}. Send a schema, use a stronger model or raise max_reasks",
            last_text=text,
            errors=errors,
            truncated=truncated,
        )

    async def complete_json(self, request: LLMRequest) -> Parsed[JSONValue]:
        """An answer that must be exactly one JSON document (optionally fenced)."""
        return await self.complete_parsed(request, parse_json_strict)

    async def complete_many(
        self, requests: Sequence[LLMRequest], *, progress: bool = False
    ) -> list[LLMResponse]:
        """Many answers concurrently (bounded by the adaptive window), in request order; the first error cancels the
        rest."""
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
        request with `n` choices (not cached here: complete_parsed caches those that parse); {} when that does not
        apply (one sample, setting off, endpoint known to refuse `n`, unequal requests)."""
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
        await self.check_fit(base)
        t0 = time.perf_counter()
        try:
            answer = await self._send(messages, temperature, max_tokens, base, n=len(missing))
        except (LLMFormatRefusedError, LLMContextOverflowError):
            raise
        except LLMRequestError as err:
            self._n_refused = True
            log.warning("%s; asking for one sample per request from now on", err)
            return out
        pt, ct = answer.prompt_tokens, answer.completion_tokens
        usage = Usage(pt, ct, self._cost(pt, ct), 1, 0, answer.retries, 0, time.perf_counter() - t0)
        self.ledger.record(base.tag, usage)
        if len(answer.texts) < len(missing):
            log.info(
                "the endpoint returned %d of %d samples; asking for the rest one by one",
                len(answer.texts),
                len(missing),
            )
        for j, (i, text) in enumerate(zip(missing, answer.texts, strict=False)):
            # The call's tokens are counted once, with the first sample.
            out[i] = LLMResponse(
                text, cfg.model, usage if j == 0 else Usage(), False, keys[i], answer.truncated[j]
            )
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

    def __init__(self, client: LLMClient | LLMConfig) -> None:
        """Drive `client` (a config gets an LLMClient with no cache, its own ledger and the process environment;
        build the LLMClient yourself for more) from a private event loop (works even inside a running loop)."""
        self.client = client if isinstance(client, LLMClient) else LLMClient(client)
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

    def parse_samples_settled(
        self, requests: Sequence[LLMRequest], parse: Callable[[str], T]
    ) -> list[Parsed[T] | LLMMalformedOutputError]:
        """Blocking LLMClient.parse_samples_settled."""
        return self._run(self.client.parse_samples_settled(requests, parse))

    def context_length(self) -> int | None:
        """Blocking LLMClient.context_length."""
        return self._run(self.client.context_length())

    def count_tokens(self, text: str) -> tuple[int, str]:
        """Blocking LLMClient.count_tokens."""
        return self._run(self.client.count_tokens(text))

    def prompt_tokens(self, messages: Sequence[Message]) -> tuple[int, str]:
        """Blocking LLMClient.prompt_tokens."""
        return self._run(self.client.prompt_tokens(messages))

    def check_fit(self, request: LLMRequest) -> PromptFit:
        """Blocking LLMClient.check_fit."""
        return self._run(self.client.check_fit(request))

    def provenance(self) -> dict[str, Any]:
        """LLMClient.provenance."""
        return self.client.provenance()

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
