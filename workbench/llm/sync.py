"""Blocking twins of async entry points: one helper instead of a second, hand-copied signature per function
(`run_scoring = blocking(run_scoring_async)` takes the same parameters and runs the coroutine to completion)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def blocking(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """`fn` with the same parameters, run to completion on a new event loop (`asyncio.run`; not inside a running
    loop, where `SyncLLMClient`'s private loop is the way)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return asyncio.run(fn(*args, **kwargs))

    return run
