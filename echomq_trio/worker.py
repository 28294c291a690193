"""``Worker``: serves one or more queues, each with its handler, its consumers and a metronome.

Theory of operation:

* A worker is made of ``Serve`` entries, one per queue: the queue's handler and the settings of
  its ``Consumer`` (``consumers`` of them), and whether a ``Metronome`` runs for it (by default
  one does: without it scheduled jobs, retries and recurring schedules never become claimable and
  expired leases are never reaped). Everything is checked when the worker is made.
* ``run`` starts every metronome, then every consumer, each with ``nursery.start``, in two
  nested nurseries with cancel scopes of their own; it reports ``started`` (for
  ``nursery.start``) once every consumer is claiming. A start-up that is cancelled or fails
  leaves nothing running.
* Shutdown, by ``stop()`` or by leaving ``open_worker``'s block: the consumers' scope is
  cancelled first; each consumer stops claiming, lets running handlers finish within
  ``grace_s``, settles what finished and hands every other held job back to pending without
  spending an attempt (see ``consumer``). Then the metronomes' scope is cancelled. Cancelling the
  caller's nursery stops everything at once; the consumers still take their grace period (they
  shield their settling with a deadline), so held jobs go back the same way.
* A handler that raises ``StopConsumer`` stops the whole worker; ``run`` re-raises it. Any other
  failure of a part ends ``run`` with that failure, after the others have shut down.
* ``statistics()`` is a frozen snapshot: the worker's state and, per queue, the sum of its
  consumers' counters and its metronome's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from enum import Enum
from typing import Any

import attrs
import trio

from echomq_trio.backoff import Policy
from echomq_trio.bus import Bus
from echomq_trio.consumer import (
    CANCEL_POLL_S,
    DEFAULT_BACKOFF,
    LANE_IDLE_S,
    ClaimGate,
    Consumer,
    ConsumerStats,
    Handler,
    StopConsumer,
)
from echomq_trio.errors import raising_first
from echomq_trio.metrics import BusMetrics
from echomq_trio.metronome import Metronome, MetronomeStats

__all__ = ["QueueStats", "Serve", "Worker", "WorkerState", "WorkerStats", "open_worker"]


@attrs.frozen
class Serve:
    """One queue a ``Worker`` serves: its handler, and its consumers' settings (the meanings and
    defaults of ``Consumer``'s). ``consumers`` consumers run on it, each with ``concurrency``
    handler tasks (``per_lane=True``: a task per lane, at most ``concurrency`` running);
    ``metronome=False`` leaves promoting and reaping to a metronome elsewhere; ``metrics_queue``
    is the ``queue`` label of their metrics (default: ``queue``; a partition's ``Serve`` from
    ``PartitionedQueue.serve`` has its queue's name). ``beside``: tasks the worker runs beside
    the metronomes while it serves (each started with ``nursery.start``, so it takes
    ``task_status``; cancelled with them at the end); ``PartitionedQueue.serve`` runs its
    queue-wide cap's rounds there."""

    queue: str
    handler: Handler
    concurrency: int = attrs.field(default=10, kw_only=True)
    prefetch: int | None = attrs.field(default=None, kw_only=True)
    claim_batch: int | None = attrs.field(default=None, kw_only=True)
    lease_ms: int = attrs.field(default=30_000, kw_only=True)
    beat_ms: int = attrs.field(default=1_000, kw_only=True)
    max_attempts: int = attrs.field(default=3, kw_only=True)
    backoff: Policy = attrs.field(default=DEFAULT_BACKOFF, kw_only=True)
    consumers: int = attrs.field(default=1, kw_only=True)
    metronome: bool = attrs.field(default=True, kw_only=True)
    per_lane: bool = attrs.field(default=False, kw_only=True)
    lane_idle_s: float = attrs.field(default=LANE_IDLE_S, kw_only=True)
    claim_gate: ClaimGate | None = attrs.field(default=None, kw_only=True)
    timeout_s: float | None = attrs.field(default=None, kw_only=True)
    cancel_poll_s: float = attrs.field(default=CANCEL_POLL_S, kw_only=True)
    metrics_queue: str | None = attrs.field(default=None, kw_only=True)
    beside: tuple[Callable[..., Awaitable[None]], ...] = attrs.field(default=(), kw_only=True)


class WorkerState(Enum):
    NEW = "new"  # made, not run yet
    STARTING = "starting"
    RUNNING = "running"  # every consumer is claiming
    STOPPING = "stopping"  # handing held jobs back
    STOPPED = "stopped"


@attrs.frozen
class QueueStats:
    """One queue's counters: its consumers' summed, and its metronome's (``None`` without)."""

    queue: str
    consumers: int
    consumer: ConsumerStats
    metronome: MetronomeStats | None


@attrs.frozen
class WorkerStats:
    """A frozen snapshot from ``Worker.statistics``: the state and each queue's counters, in the
    order the queues were given."""

    state: WorkerState
    queues: tuple[QueueStats, ...]

    def of(self, queue: str) -> QueueStats:
        """The counters of ``queue``; ``KeyError`` if the worker does not serve it."""
        for q in self.queues:
            if q.queue == queue:
                return q
        raise KeyError(queue)


def _consumer_settings(s: Serve) -> dict[str, Any]:
    names = ("concurrency", "prefetch", "claim_batch", "lease_ms", "beat_ms", "max_attempts")
    lanes = ("per_lane", "lane_idle_s", "claim_gate", "timeout_s", "cancel_poll_s", "metrics_queue")
    return {n: getattr(s, n) for n in (*names, "backoff", *lanes)}


def _sum(stats: Sequence[ConsumerStats]) -> ConsumerStats:
    names = [f.name for f in attrs.fields(ConsumerStats)]
    return ConsumerStats(**{n: sum(getattr(s, n) for s in stats) for n in names})


class Worker:
    """Serves ``queues`` (``Serve`` entries, one per queue). Run it with
    ``await nursery.start(worker.run)`` and stop it with ``worker.stop()`` (or cancel the
    nursery), or use ``open_worker``. A worker runs once. ``grace_s`` is how long running
    handlers may finish at shutdown; ``metrics`` (``echomq_trio.metrics.BusMetrics``) is given
    to every consumer and metronome."""

    def __init__(
        self,
        bus: Bus,
        queues: Sequence[Serve],
        *,
        grace_s: float = 5.0,
        metrics: BusMetrics | None = None,
    ) -> None:
        if isinstance(queues, Serve):
            raise TypeError("queues must be a sequence of Serve entries, e.g. [Serve(q, handler)]")
        if not queues:
            raise ValueError("a Worker needs at least one queue to serve")
        names = [s.queue for s in queues]
        if len(set(names)) != len(names):
            raise ValueError(f"each queue may be served once, got {names}")
        self.bus = bus
        self.grace_s = grace_s
        self._serves = tuple(queues)
        self._consumers: dict[str, list[Consumer]] = {}
        self._metronomes: dict[str, Metronome] = {}
        for s in self._serves:
            if not isinstance(s.consumers, int) or s.consumers < 1:
                raise ValueError(f"consumers must be a positive int, got {s.consumers!r}")
            self._consumers[s.queue] = [
                Consumer(bus, s.queue, s.handler, grace_s=grace_s, metrics=metrics,
                         metronome_check=not s.metronome, **_consumer_settings(s))
                for _ in range(s.consumers)
            ]  # fmt: skip
            if s.metronome:
                self._metronomes[s.queue] = Metronome(
                    bus, s.queue, beat_ms=s.beat_ms, metrics=metrics, metrics_queue=s.metrics_queue
                )
        self._state = WorkerState.NEW
        self._stop = trio.Event()

    @property
    def queues(self) -> tuple[str, ...]:
        return tuple(s.queue for s in self._serves)

    def statistics(self) -> WorkerStats:
        """A snapshot: the state, and per queue its consumers' counters summed (``held`` is how
        many jobs they hold now) and its metronome's."""
        return WorkerStats(
            self._state,
            tuple(
                QueueStats(
                    s.queue,
                    len(self._consumers[s.queue]),
                    _sum([c.statistics() for c in self._consumers[s.queue]]),
                    m.statistics() if (m := self._metronomes.get(s.queue)) else None,
                )
                for s in self._serves
            ),
        )

    def stop(self) -> None:
        """Begin a graceful shutdown (see the module's notes); ``run`` returns when it is done.
        Safe to call at any time, more than once, and before ``run`` (which then starts and
        stops at once)."""
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the queues until ``stop()`` or cancellation; then shut down as described."""
        if self._state is not WorkerState.NEW:
            raise RuntimeError(f"a Worker runs once (this one is {self._state.value})")
        self._state = WorkerState.STARTING
        try:
            with raising_first(StopConsumer):
                async with trio.open_nursery() as metronomes:
                    for m in self._metronomes.values():
                        await metronomes.start(m.run)
                    for s in self._serves:
                        for run in s.beside:
                            await metronomes.start(run)
                    async with trio.open_nursery() as consumers:
                        for group in self._consumers.values():
                            for c in group:
                                await consumers.start(c.run)
                        self._state = WorkerState.RUNNING
                        task_status.started()
                        await self._stop.wait()
                        self._state = WorkerState.STOPPING
                        consumers.cancel_scope.cancel()
                    metronomes.cancel_scope.cancel()
        finally:
            self._state = WorkerState.STOPPED


@asynccontextmanager
async def open_worker(
    bus: Bus,
    queues: Sequence[Serve],
    *,
    grace_s: float = 5.0,
    metrics: BusMetrics | None = None,
) -> AsyncIterator[Worker]:
    """A ``Worker`` running in a nursery of its own for the block: entered once every consumer
    is claiming; leaving the block (normally, by an exception or by cancellation) shuts it down
    gracefully and waits for that. An exception raised in the block comes out as itself, not
    inside an exception group."""
    worker = Worker(bus, queues, grace_s=grace_s, metrics=metrics)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            try:
                yield worker
            finally:
                worker.stop()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
