"""Sharing the store file while the explain job runs: the job's lease on it and its store thread.

Store calls are synchronous. The explain job holds the file under a lease (`StoreLease`) and makes its per-feature
reads (a feature's activations, its sampled windows, their tokens) and its batched writes of finished features on
one `StoreWorker` thread, off the event loop: while one feature awaits the LLM or runs its Python, the next
feature's DuckDB queries run beside it (DuckDB releases the GIL while a query executes). The LLM response cache
writes on the event-loop thread, in the lease's session. Each thread has its own session (cursor) on the same
attachment; the lease closes the worker's, after its queued calls, before its own whenever it steps aside.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from sae_workbench.store import Store
from sae_workbench.store.connection import YIELD_S, someone_waiting

T = TypeVar("T")


class StoreLease:
    """Holds one store connection across features, stepping aside when another process waits for the file.

    The job's store calls on the event-loop thread run synchronously between awaits and share the leased connection
    (Store.session is re-entrant per thread); its `StoreWorker` thread holds a session of its own, which the lease
    closes first whenever it releases (so the file is really free). Opening costs ~10–30 ms and releasing ~15 ms (a
    checkpoint), so the lease is kept while nobody else wants the file: `renew` (after each feature, and from the
    job's keeper task every KEEPER_POLL_S while features await the LLM) releases it for YIELD_S when another
    process has announced that it waits (connection.someone_waiting) and the lease is at least `seconds` old — and,
    as a fallback for waiters that cannot announce themselves, every `max_seconds`.
    """

    def __init__(self, store: Store, seconds: float, max_seconds: float = 10.0) -> None:
        """Lease nothing yet."""
        self.store, self.seconds, self.max_seconds = store, seconds, max(seconds, max_seconds)
        self._stack: contextlib.ExitStack | None = None
        self._since = 0.0
        self.workers: list[StoreWorker] = []
        """Worker threads whose sessions close whenever the lease releases."""

    def acquire(self) -> None:
        """Open the leased session if none is held."""
        if self._stack is None:
            self._stack = contextlib.ExitStack()
            self._stack.enter_context(self.store.session())
            self._since = time.monotonic()

    def due(self) -> bool:
        """Whether the next `renew` will release the connection (another process gets its turn)."""
        if self._stack is None:
            return False
        age = time.monotonic() - self._since
        return age >= self.max_seconds or (age >= self.seconds and someone_waiting(self.store.path))

    def renew(self, before: Callable[[], None] | None = None) -> None:
        """When `due`: run `before` (the job writes its finished features), release, leave the file free for
        YIELD_S, and reacquire."""
        if self.due():
            if before is not None:
                before()
            self.release()
            # Long enough for a polling process (the app) to get in; see connection.YIELD_S.
            time.sleep(YIELD_S)
            self.acquire()

    @contextlib.contextmanager
    def paused(self) -> Generator[None, None, None]:
        """Leave the store file free during long work that needs no store (PRISM's embedding) when another process
        waits for it (otherwise keep it: releasing and reopening cost ~10 ms). A pause of at least YIELD_S is the
        yield itself: the lease restarts its clock and `renew` has no reason to sleep."""
        if self._stack is None or not someone_waiting(self.store.path):
            yield
            return
        since = self._since
        self.release()
        t0 = time.monotonic()
        try:
            yield
        finally:
            free = time.monotonic() - t0
            self.acquire()
            if free < YIELD_S:
                self._since = since

    def release(self) -> None:
        """Close the leased session, then the workers' sessions (after their queued calls).

        The leased session goes first: while a worker's queued call runs long work with the file released
        (`Store.released`, e.g. embedding a feature's crops), no session of this process holds the file and a
        waiting process gets in at once instead of after the worker's whole queue."""
        if self._stack is not None:
            self._stack.close()
            self._stack = None
        for worker in self.workers:
            worker.close_session()


class StoreWorker:
    """One thread that runs store calls in a session of its own, kept open between calls until `close_session`.

    Calls run one at a time in the order they were made (`read` awaits its result; `submit` does not).
    """

    def __init__(self, store: Store) -> None:
        """No thread yet (started by the first `read`)."""
        self.store = store
        self._pool: ThreadPoolExecutor | None = None
        self._stack: contextlib.ExitStack | None = None  # touched on the worker thread only

    def _executor(self) -> ThreadPoolExecutor:
        """The thread (started on first use)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="store-worker")
        return self._pool

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the worker thread, inside its session (opened if closed)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor(), self._in_session, fn, *args)

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue `fn(*args)` on the worker thread, inside its session, without waiting for it."""
        return self._executor().submit(self._in_session, fn, *args)

    def _in_session(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` in the worker's session (worker thread)."""
        if self._stack is None:
            stack = contextlib.ExitStack()
            stack.enter_context(self.store.session())
            self._stack = stack
        return fn(*args)

    def _close(self) -> None:
        """Close the worker's session (worker thread)."""
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def close_session(self) -> None:
        """Close the worker's session once the calls queued before this one are done (blocks the caller)."""
        if self._pool is not None:
            self._pool.submit(self._close).result()

    def shutdown(self) -> None:
        """Finish the queued calls, close the session and stop the thread (a later call starts a new one)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.submit(self._close)
            pool.shutdown(wait=True)
