"""The adaptive number of LLM requests in flight (AIMD), so a slow endpoint is not flooded and a fast one is used.

A local server computes one answer at a time: requests beyond what it computes wait inside it, and a client that
times out and retries leaves it computing answers nobody waits for. The window starts small, widens while answers come
back fast, and halves when the endpoint shows overload (a timeout, a 429, a lost connection).
"""

from __future__ import annotations


class AdaptiveWindow:
    """The adaptive number of requests in flight (AIMD). Slow start: +1 per fast answer until the first backoff, then
    +1/window per fast answer; halved on a timeout, a 429 or a lost connection; between 1 and the configured max."""

    def __init__(self, start: int, maximum: int) -> None:
        """Start at `start` requests in flight, never above `maximum`."""
        self.limit = float(start)
        self.maximum = maximum
        self.threshold = float(maximum)
        self.in_flight = 0

    @property
    def size(self) -> int:
        """Requests allowed in flight now."""
        return max(1, int(self.limit))

    def grow(self) -> None:
        """A fast answer: widen (one per answer in slow start, one per window after)."""
        step = 1.0 if self.limit < self.threshold else 1.0 / self.limit
        self.limit = min(float(self.maximum), self.limit + step)

    def shrink(self) -> None:
        """Overload (timeout, 429, lost connection): halve, and leave slow start."""
        self.limit = max(1.0, self.limit / 2)
        self.threshold = self.limit
