"""``DedicatedThread``: blocking calls run one at a time, in order, on one long-lived thread.

Why not ``trio.to_thread.run_sync`` with a limiter of one: a limiter bounds how many calls run at
once, not where. trio hands each call to whichever idle worker of its thread cache is free,
starts a new one when none is, and ends workers idle for 10 s, so over hours a stream of calls
runs on many threads in turn. Each new thread takes a glibc ``malloc`` arena, and memory that
SQLite frees on one thread is kept in that thread's arena while the next thread allocates in its
own: the archive's long-lived allocations (SQLite's page and statement caches) spread over
arenas, and the process's memory creeps up. On one thread they stay in one arena.

``run(fn, *args)`` is like ``trio.to_thread.run_sync(fn, *args)`` without ``abandon_on_cancel``:
the caller waits for the call to finish even when cancelled (a committed insert is reported, not
lost), then the cancellation takes effect at its next checkpoint. The thread is trio's
(``trio.lowlevel.start_thread_soon``), started by ``start`` and ended by ``stop`` (after the
calls already queued); a thread whose owner never stopped it waits, a daemon, for the process to
end.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import outcome
import trio

__all__ = ["DedicatedThread"]

T = TypeVar("T")

_Job = Callable[[], None]


class DedicatedThread:
    """One thread for a blocking resource (a SQLite connection); ``start`` before ``run``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()  # the running thread's
        self._running = False

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        """Start the thread (if it is not running)."""
        if not self._running:
            # A queue of its own: a thread stopped a moment ago may not have taken its end yet.
            self._jobs, self._running = queue.SimpleQueue(), True
            trio.lowlevel.start_thread_soon(partial(_loop, self._jobs), _ignore, name=self.name)

    def stop(self) -> None:
        """End the thread once the calls already queued have run."""
        if self._running:
            self._running = False
            self._jobs.put(None)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread; its result, or what it raised (see the module
        docstring for cancellation)."""
        if not self._running:
            raise RuntimeError(f"{self.name}: the thread is not started")
        token = trio.lowlevel.current_trio_token()
        task = trio.lowlevel.current_task()

        def job() -> None:
            result = outcome.capture(fn, *args)
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        await trio.lowlevel.checkpoint_if_cancelled()
        self._jobs.put(job)
        # The call finishes first, whatever happens meanwhile (see the module docstring).
        result: T = await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        return result


def _loop(jobs: queue.SimpleQueue[_Job | None]) -> None:
    while (job := jobs.get()) is not None:
        job()


def _ignore(_: outcome.Outcome[None]) -> None:
    pass
