"""What one LLM call is and what it returns: the request (messages, budget, optional JSON schema), the raw response,
a parsed answer, and a prompt's fit against the model's context."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sae_workbench.llm.usage import Usage

T = TypeVar("T")
Message = Mapping[str, str]


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
    schema: Mapping[str, Any] | None = field(default=None, hash=False)
    """JSON schema the answer must follow, sent in the form the endpoint accepts (LLMConfig.structured_output);
    None = free-form. Write it strict-compatible (every property required, additionalProperties false) so OpenAI's
    strict mode takes it. The answer is still parsed and checked by the caller's parse function."""
    schema_name: str = "answer"
    """Name of the schema in the OpenAI json_schema form (letters, digits, _ and -)."""


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
    truncated: bool = False
    """True when the endpoint stopped the answer at the completion budget (finish_reason "length")."""


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


@dataclass(frozen=True)
class PromptFit:
    """A request's prompt size against the model's context."""

    prompt_tokens: int
    """Prompt tokens, chat-template overhead included (counted by `counted_by`)."""
    max_tokens: int
    """The request's completion budget."""
    context_length: int | None
    """The model's context length; None = unknown (then nothing is checked)."""
    counted_by: str
    """How prompt_tokens was counted: a server route ("/extras/tokenize/count", "/tokenize") or "estimate"."""

    @property
    def fits(self) -> bool:
        """True when prompt + completion budget <= context (or the context is unknown)."""
        return self.context_length is None or self.prompt_tokens + self.max_tokens <= self.context_length

    @property
    def room(self) -> int | None:
        """Prompt tokens still free under the context (negative = over by that many); None when unknown."""
        if self.context_length is None:
            return None
        return self.context_length - self.max_tokens - self.prompt_tokens
