"""Token, cost, call and time accounting for LLM work: per call (`Usage`), per tag and per job (`UsageLedger`)."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Usage:
    """Additive counters for one call, one feature or one job."""

    prompt_tokens: int = 0
    """Prompt tokens billed by the endpoint (cache hits cost none)."""
    completion_tokens: int = 0
    """Completion tokens billed by the endpoint (cache hits cost none)."""
    cost_usd: float = 0.0
    """Cost from the config's prices; 0.0 when unpriced."""
    calls: int = 0
    """Completed HTTP calls (answers received from the endpoint)."""
    cache_hits: int = 0
    """Answers served from the response cache instead of the endpoint."""
    retries: int = 0
    """Failed HTTP attempts that were retried (429, 5xx, timeouts, connection errors)."""
    reasks: int = 0
    """Malformed answers sent back to the model with their parse error."""
    seconds: float = 0.0
    """Wall time per call, including backoff waits, summed (exceeds the job's wall time under concurrency)."""

    def __add__(self, other: Usage) -> Usage:
        """Field-wise sum."""
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(Usage)})

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for provenance JSON."""
        return asdict(self)


class UsageLedger:
    """Running totals for a job, broken down by a caller-supplied tag (e.g. "feature:123"). Thread-safe."""

    def __init__(self) -> None:
        """Start at zero."""
        self._lock = threading.Lock()
        self._total = Usage()
        self._by_tag: dict[str, Usage] = {}

    def record(self, tag: str, usage: Usage) -> None:
        """Add one call's usage to the job total and to its tag."""
        with self._lock:
            self._total = self._total + usage
            self._by_tag[tag] = self._by_tag.get(tag, Usage()) + usage

    @property
    def total(self) -> Usage:
        """Usage over the whole job so far."""
        with self._lock:
            return self._total

    def by_tag(self) -> dict[str, Usage]:
        """Usage per tag (a copy)."""
        with self._lock:
            return dict(self._by_tag)

    def for_tag(self, tag: str) -> Usage:
        """Usage of one tag (zero when the tag was never used)."""
        with self._lock:
            return self._by_tag.get(tag, Usage())

    def to_dict(self) -> dict[str, Any]:
        """Totals and per-tag breakdown as plain dicts."""
        with self._lock:
            return {
                "total": self._total.to_dict(),
                "by_tag": {k: v.to_dict() for k, v in self._by_tag.items()},
            }
