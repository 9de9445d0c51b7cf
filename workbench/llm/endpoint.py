"""What the client learns about an endpoint once and remembers: its structured-output form, its context length and
how to count its tokens.

Structured-output forms (the request fields a JSON schema travels in), tried in this order with
`LLMConfig.structured_output="auto"`:

- ``json_schema``: OpenAI's `response_format={"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`
  (OpenAI, vLLM, llama.cpp's llama-server, Ollama >= 0.5 on /v1, SGLang).
- ``json_object``: llama-cpp-python's `response_format={"type": "json_object", "schema": {...}}` (its server answers
  the json_schema form with HTTP 500 "Input should be 'text' or 'json_object'"; llama-server accepts it too).
- ``none``: no constraint; the answer is parsed free-form and re-asked on a parse error.

``format`` (Ollama's native `format: <schema>` field, sent at the top level of the body) is never probed, because a
server that does not know a field ignores it silently; set it explicitly when an endpoint needs it.

Context length sources, in order: `LLMConfig.context_length` (`--llm-context`), vLLM's `max_model_len` in
`/v1/models`, llama-server's `/props` (`default_generation_settings.n_ctx`), vLLM's `/tokenize`, and the number in a
server's context-overflow refusal ("maximum context length is N tokens"). Token counters: llama-cpp-python's
`/extras/tokenize/count`, llama-server's and vLLM's `/tokenize`, else `estimate_tokens` (characters / 3).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

SchemaForm = Literal["json_schema", "json_object", "format", "none"]
STRUCTURED_OUTPUT_CHOICES = ("auto", "json_schema", "json_object", "format", "none")
DETECTION_ORDER: tuple[SchemaForm, ...] = ("json_schema", "json_object", "none")

# English BPE text runs ~4 characters per token (SmolLM2's tokenizer: 3.8-4.3 on this corpus); dividing by 3
# over-counts, so a prompt the estimate says fits does fit.
CHARS_PER_TOKEN_ESTIMATE = 3.0
# Chat-template tokens around each message (role markers, separators): ChatML spends 4-5 per message.
TOKENS_PER_MESSAGE = 6

_FORM_REFUSAL_RE = re.compile(r"response_format|json_schema|json_object|'text'|grammar|schema", re.IGNORECASE)
_OVERFLOW_RE = re.compile(
    r"context[ _](length|window|size)|maximum context|exceeds? the available context|too many tokens",
    re.IGNORECASE,
)
_CONTEXT_NUMBER_RES = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r"context window of (\d+)", re.IGNORECASE),
    re.compile(r"\"n_ctx\"\s*:\s*(\d+)"),
    re.compile(r"context size[^0-9]{0,20}(\d+)", re.IGNORECASE),
)


def schema_fields(form: SchemaForm, schema: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The request-body fields that carry `schema` in `form` ({} for "none")."""
    if form == "json_schema":
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": dict(schema), "strict": True},
            }
        }
    if form == "json_object":
        return {"response_format": {"type": "json_object", "schema": dict(schema)}}
    if form == "format":
        return {"format": dict(schema)}
    return {}


def schema_sha256(schema: Mapping[str, Any]) -> str:
    """Hex sha256 of a schema in canonical JSON (part of the response-cache key of a constrained request)."""
    blob = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def is_format_refusal(status: int, message: str) -> bool:
    """True when an HTTP error answers a request that carried a schema and names the structured-output fields:
    the form is unsupported, the server is not down (llama-cpp-python uses 500 for this)."""
    return status in (400, 404, 415, 422, 500, 501) and _FORM_REFUSAL_RE.search(message) is not None


def is_context_overflow(status: int, message: str) -> bool:
    """True when an HTTP error says the prompt plus completion does not fit the context (vLLM, OpenAI,
    llama-cpp-python: 400 "maximum context length"; llama-server: 400 "exceeds the available context size")."""
    return status in (400, 413, 422, 500) and _OVERFLOW_RE.search(message) is not None


def context_length_in(message: str) -> int | None:
    """The context length a server's overflow message states, if it states one."""
    for pattern in _CONTEXT_NUMBER_RES:
        match = pattern.search(message)
        if match:
            return int(match.group(1))
    return None


def estimate_tokens(text: str) -> int:
    """A conservative token count without a tokenizer: characters / 3, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)


def is_local_url(base_url: str | None) -> bool:
    """True for an endpoint on this machine (127.0.0.1, localhost, ::1), where one server computes every answer."""
    if base_url is None:
        return False
    host = re.sub(r"^[a-z]+://", "", base_url.lower()).split("/")[0]
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
    return host.strip("[]") in ("127.0.0.1", "localhost", "::1", "0.0.0.0")


GGUF_COUNTER = "gguf vocabulary"
_VOCABS: dict[str, Any] = {}
_VOCABS_LOCK = threading.Lock()


def gguf_token_count(path: str, text: str) -> int:
    """Tokens in `text` by a GGUF file's own vocabulary (llama-cpp-python, vocabulary only: loaded once per process,
    ~0.1 s), special tokens parsed as the server parses them; raises ImportError without llama-cpp-python."""
    with _VOCABS_LOCK:
        vocab = _VOCABS.get(path)
        if vocab is None:
            import llama_cpp

            vocab = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
            _VOCABS[path] = vocab
    return len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))


@dataclass
class EndpointFacts:
    """What is known about one (endpoint, model): learned once, then reused by every client in the process."""

    form: SchemaForm | None = None
    """Structured-output form the endpoint accepted; None = not detected yet."""
    context_length: int | None = None
    """Context length in tokens; None = unknown."""
    context_source: str = ""
    """Where context_length came from ("config", "/v1/models max_model_len", "/props", "overflow error", ...)."""
    context_probed: bool = False
    """True once the endpoint's metadata routes were asked (so they are asked once)."""
    token_counter: str | None = None
    """Server route that counts tokens ("/extras/tokenize/count", "/tokenize"), or "estimate" when it has none (or
    it stopped answering); None = not probed yet."""
    template_tokens: int = 0
    """Prompt tokens the server's chat template adds beyond the per-message allowance (e.g. a default system
    prompt), learned from the prompt tokens it billed for a prompt its tokenizer counted."""


_FACTS: dict[tuple[str, str], EndpointFacts] = {}
_FACTS_LOCK = threading.Lock()


def endpoint_facts(base_url: str | None, model: str) -> EndpointFacts:
    """The shared facts record of an endpoint and model (created empty on first use)."""
    key = ((base_url or "").rstrip("/"), model)
    with _FACTS_LOCK:
        return _FACTS.setdefault(key, EndpointFacts())


def forget_endpoint(base_url: str | None = None) -> None:
    """Forget what was learned about an endpoint (every endpoint when None), e.g. after it was replaced by another
    server on the same port."""
    root = (base_url or "").rstrip("/")
    with _FACTS_LOCK:
        for key in [k for k in _FACTS if base_url is None or k[0] == root]:
            del _FACTS[key]


def server_root(base_url: str) -> str:
    """The server's root URL: the base URL without its trailing /v1 (where /props, /tokenize and /extras live)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root
