"""The running parts of a partitioned queue (``echomq_trio.partitions``): a consumer and a
metronome that run one ordinary ``Consumer``/``Metronome`` per partition in one nursery, and the
rounds that share the queue-wide cap on jobs in flight out (``CapRounds``). Re-exported by
``echomq_trio.partitions``, where they are documented."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import attrs
import trio

from echomq_trio import _partition_cap as _cap
from echomq_trio import protocol
from echomq_trio.backoff import reconnect_delay_s
from echomq_trio.bus import Bus, new_holder
from echomq_trio.consumer import Consumer, ConsumerStats, Handler, StopConsumer
from echomq_trio.errors import BusError, level_of
from echomq_trio.metronome import Metronome, MetronomeStats


class Partitioned(Protocol):
    """What the running parts read of a ``partitions.PartitionedQueue`` (which imports this
    module, so it is not named here): its bus, its name, its partitions' names."""

    @property
    def bus(self) -> Bus: ...

    @property
    def name(self) -> str: ...

    @property
    def names(self) -> tuple[str, ...]: ...

    @property
    def n(self) -> int: ...


SHARE_MS = 200  # a PartitionedMetronome's period of the queue-wide cap's rounds
SHARE_LEASE_ROUNDS = 5  # its lease on the rounds lasts this many periods past its last round
log = logging.getLogger("echomq_trio.partitions")


class PartitionedConsumer:
    """One ordinary ``Consumer`` per partition (``consumers``), each with the ``settings``
    given (``concurrency`` and the rest, as ``Consumer`` takes them: each partition's consumer
    runs up to ``concurrency`` handlers, ``n`` times that in all). Run it with
    ``nursery.start(pc.run)``: it returns once every partition is being claimed; cancel the
    nursery to stop them all, each as a ``Consumer`` stops. A handler's ``StopConsumer`` stops
    every partition's consumer (each hands back what it holds) and ``run`` raises it."""

    def __init__(self, queue: Partitioned, handler: Handler, **settings: Any) -> None:
        self.queue = queue
        settings.setdefault("metrics_queue", queue.name)  # one series per queue (metrics)
        self.consumers = tuple(Consumer(queue.bus, name, handler, **settings)
                               for name in queue.names)  # fmt: skip

    def statistics(self) -> ConsumerStats:
        """The partitions' consumers' counters, added up."""
        return _sum_stats(ConsumerStats, [c.statistics() for c in self.consumers])

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and handle jobs of every partition until cancelled."""
        await _run_all([c.run for c in self.consumers], task_status)


class PartitionedMetronome:
    """One ``Metronome`` per partition (``metronomes``), each with the ``settings`` given, and
    the rounds of the queue-wide cap on jobs in flight (``cap_rounds``, a ``CapRounds`` with
    ``share_ms`` and the metronomes' ``beat_ms``; none for a queue of one partition). Run it
    with ``nursery.start(pm.run)``, cancel its nursery to stop them."""

    def __init__(self, queue: Partitioned, *, share_ms: int = SHARE_MS,
                 **settings: Any) -> None:  # fmt: skip
        self.queue = queue
        settings.setdefault("metrics_queue", queue.name)  # one series per queue (metrics)
        self.metronomes = tuple(Metronome(queue.bus, name, **settings) for name in queue.names)
        beat_ms = round(self.metronomes[0].beat_s * 1000)
        self.cap_rounds = CapRounds(queue, share_ms=share_ms, beat_ms=beat_ms)

    @property
    def rounds(self) -> int:
        """``cap_rounds.rounds``: the rounds of the queue-wide cap it has run."""
        return self.cap_rounds.rounds

    @property
    def round_failures(self) -> int:
        """``cap_rounds.failures``."""
        return self.cap_rounds.failures

    def statistics(self) -> MetronomeStats:
        """The partitions' metronomes' counters, added up."""
        return _sum_stats(MetronomeStats, [m.statistics() for m in self.metronomes])

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Promote, fire and reap in every partition, and share the queue's cap out, until
        cancelled."""
        runs = [m.run for m in self.metronomes]
        if self.queue.n > 1:
            runs.append(self.cap_rounds.run)
        await _run_all(runs, task_status)


class CapRounds:
    """The rounds of a partitioned queue's cap on jobs in flight (``PartitionedQueue.set_limit``)
    as one task: while partition 0 holds a total, a round every ``share_ms`` (200 by default),
    run by one ``CapRounds`` of all the processes' at a time (a lease on the rounds that another
    takes over when it runs out: a process that stops hands the rounds on within
    ``SHARE_LEASE_ROUNDS`` periods), so the shares follow the work within a round. Without a
    total it costs one call (an ``HMGET`` of partition 0's meta) every ``beat_ms``. A round that
    fails is tried again after the reconnect delay; one stopped midway (failed, cancelled)
    leaves the partitions within the total. ``PartitionedMetronome`` runs one, and so does a
    ``Worker`` of ``PartitionedQueue.serve``'s entries."""

    def __init__(self, queue: Partitioned, *, share_ms: int = SHARE_MS,
                 beat_ms: int = 1_000) -> None:  # fmt: skip
        for name, value in (("share_ms", share_ms), ("beat_ms", beat_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.queue = queue
        self.share_s = share_ms / 1000
        self.idle_s = max(share_ms, beat_ms) / 1000
        self._lease_ms = share_ms * SHARE_LEASE_ROUNDS
        self._holder = new_holder()
        self._rounds = 0
        self._failures = 0

    @property
    def rounds(self) -> int:
        """The rounds it has run (none while another's lease runs or the queue has no total)."""
        return self._rounds

    @property
    def failures(self) -> int:
        """The rounds that failed (the server unreachable...), each tried again."""
        return self._failures

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """A round every ``share_ms`` while the queue has a total, else a look every
        ``beat_ms``, until cancelled."""
        bus, k0 = self.queue.bus, self.queue.bus.keys(self.queue.name)
        task_status.started()
        failures = 0
        while True:
            try:
                begin = protocol.cap_total_call(k0, "begin", self._holder, self._lease_ms)
                total, epoch = await bus.run(begin)
                if epoch:
                    await _cap.share_round(bus, self.queue.names, begun=(total, epoch))
                    self._rounds += 1
                failures = 0
                wait = self.share_s if total is not None else self.idle_s
            except BusError as exc:
                failures += 1
                self._failures += 1
                wait = reconnect_delay_s(failures)
                log.log(level_of(exc), "a round of %s's cap failed: %s", self.queue.name, exc)
            except BaseExceptionGroup as group:
                # cancelled (stopping) as a call of the round failed: the stop, not the failure
                cancelled = group.subgroup(trio.Cancelled)
                if cancelled is None:
                    raise
                raise cancelled from None
            await trio.sleep(wait)


S = TypeVar("S")


def _sum_stats(cls: type[S], parts: Sequence[S]) -> S:
    return cls(**{f.name: sum(getattr(p, f.name) for p in parts)
                  for f in attrs.fields(cls)})  # type: ignore[arg-type]  # fmt: skip


async def _run_all(
    runs: Sequence[Callable[..., Awaitable[None]]], task_status: trio.TaskStatus[None]
) -> None:
    """Start each of ``runs`` in turn, then report started; a run that ends (or raises
    ``StopConsumer``) stops the others, and its ``StopConsumer`` is raised as it is, as
    ``Consumer.run`` raises it (any other error comes in the nursery's exception group)."""
    stopped: list[StopConsumer] = []
    async with trio.open_nursery() as nursery:

        async def one(run: Callable[..., Awaitable[None]], *, task_status: trio.TaskStatus[None]
                      = trio.TASK_STATUS_IGNORED) -> None:  # fmt: skip
            try:
                await run(task_status=task_status)
            except StopConsumer as exc:
                stopped.append(exc)
            nursery.cancel_scope.cancel()  # one stopped by itself: stop the others

        for run in runs:
            await nursery.start(one, run)
        task_status.started()
    if stopped:
        raise stopped[0]
