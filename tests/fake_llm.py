"""A real OpenAI-compatible HTTP server on 127.0.0.1 that serves scripted answers, for tests and benchmarks.

    from tests.fake_llm import FakeLLM, HTTPFault, Hang, Reply, fake_llm   # fake_llm is a pytest fixture

    with FakeLLM() as server:                          # random free port, stdlib http.server in a thread
        server.push(HTTPFault(429, retry_after="0.05"), Reply('{"ok": true}'))
        ... LLMConfig(model="fake", base_url=server.base_url) ...
        server.calls, server.peak_in_flight, server.requests[0].body["messages"]

Answer order: the queue (`push`), then `responder(request_json)`, then `default`; with none of them the server
answers HTTP 418 so a test that under-scripted fails loudly instead of retrying. Token usage is reported as the
number of whitespace-separated words (`count_tokens`), so tests can compute expected totals by hand.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True)
class Reply:
    """A 200 answer with this assistant content."""

    content: str
    """Assistant message content (may be malformed JSON on purpose)."""
    delay_s: float = 0.0
    """Wait this long before answering (to measure concurrency)."""
    prompt_tokens: int | None = None
    """Reported prompt tokens; None = count_tokens of the request messages."""
    completion_tokens: int | None = None
    """Reported completion tokens; None = count_tokens of the content."""


@dataclass(frozen=True)
class HTTPFault:
    """An HTTP error status (429, 500, 401, ...) with an OpenAI-style error body."""

    status: int
    """HTTP status code."""
    retry_after: str | None = None
    """Value of the Retry-After header, if any (seconds)."""
    message: str = "scripted failure"
    """error.message in the body."""


@dataclass(frozen=True)
class Hang:
    """Accept the request and answer nothing for `seconds` (or until the server stops)."""

    seconds: float = 5.0
    """How long to hang; make it longer than the client timeout."""


@dataclass(frozen=True)
class BrokenBody:
    """A 200 answer whose body is not a chat completion (a proxy's HTML page, a truncated body)."""

    body: str = "<html><body>502 Bad Gateway (proxy)</body></html>"
    """Raw response body."""


Scripted = Reply | HTTPFault | Hang | BrokenBody | str


@dataclass
class RecordedRequest:
    """One request the server received."""

    body: dict[str, Any]
    """Parsed JSON body."""
    headers: dict[str, str]
    """Request headers (lower-cased names)."""
    started: float
    """time.monotonic() when it arrived."""
    outcome: str = ""
    """What was served: "reply", "http <status>", "hang", "broken body"."""
    finished: float = 0.0
    """time.monotonic() when the answer was sent (or the hang ended)."""


def count_tokens(text: str) -> int:
    """The fake tokenizer: whitespace-separated words."""
    return len(text.split())


def prompt_token_count(body: dict[str, Any]) -> int:
    """Prompt tokens the server reports for a request body: words over all message contents."""
    return sum(count_tokens(str(m.get("content") or "")) for m in body.get("messages", []))


@dataclass
class _State:
    """Mutable server state shared with handler threads."""

    queue: deque[Scripted] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)


class FakeLLM:
    """OpenAI-compatible /v1/chat/completions on 127.0.0.1 with scripted answers and fault injection."""

    def __init__(
        self,
        *,
        responder: Callable[[dict[str, Any]], Scripted] | None = None,
        default: Scripted | None = None,
        expected_key: str | None = None,
        n_mode: str = "honour",
        n_ctx: int | None = None,
    ) -> None:
        """Configure answers; `expected_key` makes any other bearer token get HTTP 401. `n_mode` is what a request
        with n > 1 gets: "honour" (n choices, one scripted answer each), "ignore" (one choice, as some servers do)
        or "refuse" (HTTP 400, as servers without `n` support do). `n_ctx`: act like llama-server's metadata, i.e.
        report this context length at GET /props and count tokens (words) at POST /tokenize; None = 404 there."""
        self.responder = responder
        self.default = default
        self.expected_key = expected_key
        self.n_mode = n_mode
        self.n_ctx = n_ctx
        self._state = _State()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- scripting and inspection -------------------------------------------------------------------------
    def push(self, *items: Scripted) -> None:
        """Append answers to the queue (served first, in order)."""
        with self._state.lock:
            self._state.queue.extend(items)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every chat request received so far (a copy)."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def calls(self) -> int:
        """Number of chat requests received."""
        with self._state.lock:
            return len(self._state.requests)

    @property
    def peak_in_flight(self) -> int:
        """Most requests being handled at the same time."""
        with self._state.lock:
            return self._state.peak_in_flight

    @property
    def queued(self) -> int:
        """Scripted answers not yet served."""
        with self._state.lock:
            return len(self._state.queue)

    @property
    def base_url(self) -> str:
        """The endpoint root to give the client (…/v1)."""
        if self._server is None:
            raise RuntimeError("FakeLLM is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def _next(self, body: dict[str, Any]) -> Scripted | None:
        """Pick the answer for a request."""
        with self._state.lock:
            if self._state.queue:
                return self._state.queue.popleft()
        if self.responder is not None:
            return self.responder(body)
        return self.default

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> FakeLLM:
        """Bind a free port and serve in a daemon thread."""
        from sae_workbench.llm.endpoint import forget_endpoint

        server = _Server(("127.0.0.1", 0), _make_handler(self))
        server.daemon_threads = True
        server.block_on_close = False  # hung handlers must not block shutdown
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        # A port reused from an earlier server: what clients learned about that one is stale.
        forget_endpoint(self.base_url)
        return self

    def stop(self) -> None:
        """Release hung requests, stop serving and close the port."""
        self._state.stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLM:
        """Start on entering a with-block."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop on leaving it."""
        self.stop()


class _Server(ThreadingHTTPServer):
    """Threaded server with a listen backlog large enough for 32+ simultaneous connects (default is 5)."""

    request_queue_size = 256


def _make_handler(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to one FakeLLM."""
    state = fake._state

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes; without TCP_NODELAY, Nagle + delayed ACK add ~40 ms a call.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

        def _send_json(
            self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/props" and fake.n_ctx is not None:
                self._send_json(200, {"default_generation_settings": {"n_ctx": fake.n_ctx}})
                return
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            if self.path.rstrip("/") == "/tokenize" and fake.n_ctx is not None:
                words = count_tokens(str(json.loads(raw or b"{}").get("content") or ""))
                self._send_json(200, {"tokens": list(range(words))})
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            body = json.loads(raw or b"{}")
            rec = RecordedRequest(body, {k.lower(): v for k, v in self.headers.items()}, time.monotonic())
            with state.lock:
                state.requests.append(rec)
                state.in_flight += 1
                state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
            try:
                self._serve(body, rec)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout); that is the point of a hang
            finally:
                rec.finished = time.monotonic()
                with state.lock:
                    state.in_flight -= 1

        def _serve(self, body: dict[str, Any], rec: RecordedRequest) -> None:
            auth = self.headers.get("Authorization", "")
            if fake.expected_key is not None and auth != f"Bearer {fake.expected_key}":
                rec.outcome = "http 401"
                msg = "Incorrect API key provided."
                self._send_json(
                    401,
                    {"error": {"message": msg, "type": "invalid_request_error", "code": "invalid_api_key"}},
                )
                return
            n = int(body.get("n") or 1)
            if n > 1 and fake.n_mode == "refuse":
                rec.outcome = "http 400"
                self._send_json(400, {"error": {"message": "n must be 1", "type": "invalid_request_error"}})
                return
            item = fake._next(body)
            if item is None:
                rec.outcome = "http 418"
                self._send_json(
                    418, {"error": {"message": "fake_llm: script exhausted", "type": "test_error"}}
                )
                return
            if isinstance(item, str):
                item = Reply(item)
            if isinstance(item, Hang):
                rec.outcome = "hang"
                state.stop.wait(item.seconds)
                self.close_connection = True
                return
            if isinstance(item, BrokenBody):
                rec.outcome = "broken body"
                data = item.body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if isinstance(item, HTTPFault):
                rec.outcome = f"http {item.status}"
                headers = {"Retry-After": item.retry_after} if item.retry_after is not None else {}
                err = {"error": {"message": item.message, "type": "server_error", "code": None}}
                self._send_json(item.status, err, headers)
                return
            if item.delay_s:
                state.stop.wait(item.delay_s)
            replies = [item]
            while n > 1 and fake.n_mode == "honour" and len(replies) < n:  # one scripted answer per choice
                more = fake._next(body)
                if isinstance(more, str):
                    more = Reply(more)
                if not isinstance(more, Reply):
                    if more is not None:  # not a choice (a fault, a hang): it stays first in line
                        with fake._state.lock:
                            fake._state.queue.appendleft(more)
                    break
                replies.append(more)
            pt = item.prompt_tokens if item.prompt_tokens is not None else prompt_token_count(body)
            ct = sum(
                r.completion_tokens if r.completion_tokens is not None else count_tokens(r.content)
                for r in replies
            )
            rec.outcome = "reply" if len(replies) == 1 else f"reply x{len(replies)}"
            self._send_json(
                200,
                {
                    "id": f"chatcmpl-fake-{len(state.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [
                        {
                            "index": i,
                            "message": {"role": "assistant", "content": r.content},
                            "finish_reason": "stop",
                        }
                        for i, r in enumerate(replies)
                    ],
                    "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
                },
            )

    return Handler


@pytest.fixture()
def fake_llm() -> Iterator[FakeLLM]:
    """A started FakeLLM with an empty script; stopped after the test."""
    with FakeLLM() as server:
        yield server
