"""A consumer's progress book: what its handlers report with ``await job.progress(value)``,
coalesced into one write of every job's news at most every ``interval_s``.

Theory of operation:

* ``report`` (synchronous, called by ``Job.progress``) checks the value (``ValueError`` or
  ``TypeError`` in the handler, before any I/O) and keeps it as the job's latest, replacing any
  value not yet written: a tight loop of reports is one entry per job.
* The flusher is a task started at the first report, never before: a consumer whose handlers
  never report runs no task and makes no call for it. It waits for news, writes every job's
  latest value in one round trip (``jobs.write_progress``: the script refuses a job whose lease
  the token no longer holds), then sleeps ``interval_s`` before it looks for news again.
* The consumer flushes the news of jobs it is about to settle first (``flush``), so a job's last
  report before it finished is in its row; a report that races the settlement is refused by the
  lease (a settled job's lease no longer holds). Writes go one at a time (a lock), in the order
  of the values they carry, and a settlement waits for a write in flight too: a job's value
  written last is its latest, whichever task writes it.
* Progress is best effort: a write the server does not take (connection trouble) is dropped and
  logged, not retried; the next report is written as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import attrs
import trio

from echomq_trio import jobs, protocol
from echomq_trio.bus import Bus
from echomq_trio.errors import BusError, level_of
from echomq_trio.results import Job

__all__ = ["PROGRESS_INTERVAL_S", "ProgressBook"]

log = logging.getLogger("echomq_trio.consumer")

PROGRESS_INTERVAL_S = 0.25  # a consumer writes its handlers' progress at most this often


@attrs.define(eq=False)
class ProgressBook:
    """The latest progress of each job of one consumer not yet written, and its flusher (started
    in ``nursery`` at the first report; ``close`` ends it)."""

    bus: Bus
    queue: str
    interval_s: float
    nursery: trio.Nursery | None = None
    writes: int = 0  # round trips made
    _latest: dict[str, tuple[str, int, object]] = attrs.field(factory=dict)
    _news: trio.Event = attrs.field(factory=trio.Event)
    _scope: trio.CancelScope | None = None
    _writing: trio.Lock = attrs.field(factory=trio.Lock)  # one write at a time, in order

    def report(self, job: Job, value: object) -> None:
        """Keep ``value`` as ``job``'s latest progress (checked now), to be written soon."""
        protocol.encode_progress(value)
        self._latest[job.id] = (job.id, job.token, value)
        if self._scope is None:
            if self.nursery is None:
                raise RuntimeError(f"job {job.id}'s consumer is not running")
            self._scope = trio.CancelScope()
            self.nursery.start_soon(self._flush_loop, self._scope)
        self._news.set()

    def has_news(self, job_ids: Iterable[str]) -> bool:
        """Whether any of ``job_ids`` has progress not yet written, or a write is in flight (its
        jobs' values are not in their rows yet)."""
        if self._writing.locked():
            return True
        latest = self._latest
        return bool(latest) and any(i in latest for i in job_ids)

    async def flush(self) -> None:
        """Write every job's news now, in one round trip (nothing when there is none), after the
        write in flight, if any."""
        async with self._writing:
            if not self._latest:
                return
            items = list(self._latest.values())
            self._latest.clear()
            self.writes += 1
            try:
                await jobs.write_progress(self.bus, self.queue, items)
            except BusError as exc:
                log.log(level_of(exc), "progress of %d jobs on %s not written: %s",
                        len(items), self.queue, exc)  # fmt: skip

    def close(self) -> None:
        """End the flusher (what it has not written is dropped)."""
        if self._scope is not None:
            self._scope.cancel()

    async def _flush_loop(self, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                await self._news.wait()
                self._news = trio.Event()
                await self.flush()
                await trio.sleep(self.interval_s)
