"""Prometheus metrics of the bus, with ``prometheus_client`` and no global state: the caller makes
a ``CollectorRegistry`` (one per service) and everything here registers into it, never into the
library's default registry.

Two kinds of numbers, named so that they never clash:

* Process-local instruments (``BusMetrics``), observed as they happen by the consumers and
  metronomes this process runs: pass one ``BusMetrics`` as ``Consumer(..., metrics=...)`` and
  ``Metronome(..., metrics=...)``; without it (the default, ``None``) they observe nothing. Their
  ``queue`` label is the queue's name, a partitioned queue's for every partition
  (``metrics_queue``, set by ``partitions.PartitionedConsumer`` and ``PartitionedMetronome``).

  - ``echomq_claim_batch_size{queue}`` (histogram): jobs per claim round trip that got any (an
    idle claim that gets none is not observed); its ``_count`` is such claims, its ``_sum`` the
    jobs claimed.
  - ``echomq_consumer_jobs_total{queue,outcome}`` (counter): jobs this process's consumers
    settled, by the server's answer: ``acked``, ``retried``, ``deferred``, ``dead``, ``stale``
    (and ``cancelled``: handlers stopped by ``jobs.cancel``, whose jobs are settled by nobody)
    (the counters of ``Consumer.statistics()``, summed over this process's consumers).
  - ``echomq_scheduled_lateness_seconds{queue}`` (histogram): for each job a metronome moved
    from the schedule to pending, the server's time of the move minus the job's score there (its
    run-at, or the end of its backoff or deferral). It is the metronome's lateness; the wait in
    pending until a consumer claims the job is not in it.

* The server's state (``QueueReadings``), read per scrape with ``jobs.counts`` (of every
  partition of a partitioned queue, added up: ``echomq_trio.partitions``): the same answer in
  every process that reads it.

  - ``echomq_jobs{queue,state}`` (gauge): jobs ``pending`` (lanes included), ``scheduled``,
    ``active``, ``dead``, ``cancelled``, ``waiting_children`` (flows' parents waiting for their
    children) now.
  - ``echomq_lanes{queue,state}`` (gauge): lanes ``with_jobs``, ``paused``, ``waiting``.
  - ``echomq_repeats{queue}`` (gauge): recurring schedules registered.
  - ``echomq_queue_paused{queue}`` (gauge): 1 while the queue is paused (``queues.pause``: it
    claims nothing), else 0; ``echomq_queue_max_active{queue}`` (gauge): its cap on jobs in
    flight, for a queue that has one (``queues.set_limit``). One ``HMGET`` per queue.
  - ``echomq_queue_jobs_total{queue,outcome}`` (counter): the queue's running totals kept by its
    scripts since it was made, by every process: ``completed``, ``retried``, ``dead``,
    ``deferred``, ``cancelled``, ``expired`` (jobs a claim met past their expiry: kept dead,
    and so also in ``dead``, or dropped, per ``queues.set_expired``).
  - ``echomq_server_memory_used_bytes`` and ``echomq_server_memory_max_bytes`` (gauges): the
    server's memory and its ``maxmemory`` (0: none), so an alert can fire before a
    ``noeviction`` server refuses writes.
  - ``echomq_server_writes_refused`` (gauge): 1 while the server cannot write its append-only
    file (a full disk: it refuses writes until it can), else 0 (``storage.read_storage``).
  - ``echomq_server_disk_free_bytes`` and ``echomq_server_disk_size_bytes`` (gauges), for an
    embedded server: the file system of its data directory.

Reading the server is async, but prometheus_client collects synchronously, so a scrape is two
steps: await fresh readings, then render the registry, whose collectors read that snapshot.
``render`` does both; a ``BusError`` while reading propagates (answer 503).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from echomq_trio import memory, queues
from echomq_trio._partition_meta import queue_counts
from echomq_trio.bus import Bus
from echomq_trio.results import Counts, QueueControl
from echomq_trio.storage import Storage, read_storage

__all__ = [
    "CLAIM_BATCH_BUCKETS",
    "CONTENT_TYPE_LATEST",
    "LATENESS_BUCKETS_S",
    "SETTLED_OUTCOMES",
    "BusMetrics",
    "QueueReadings",
    "Readings",
    "render",
]

CLAIM_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LATENESS_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# The outcome label of echomq_consumer_jobs_total: the settling counters of ConsumerStats.
SETTLED_OUTCOMES = ("acked", "retried", "deferred", "dead", "stale", "cancelled")


class BusMetrics:
    """The process-local instruments, registered into ``registry``. One per registry: share it
    between every consumer and metronome of the process (they label by queue)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.claim_batch = Histogram(
            "echomq_claim_batch_size",
            "Jobs per claim round trip that got any, by this process's consumers.",
            ["queue"],
            buckets=CLAIM_BATCH_BUCKETS,
            registry=registry,
        )
        self.consumer_jobs = Counter(
            "echomq_consumer_jobs",
            "Jobs settled by this process's consumers, by the server's answer.",
            ["queue", "outcome"],
            registry=registry,
        )
        self.lateness = Histogram(
            "echomq_scheduled_lateness_seconds",
            "Server time a metronome of this process moved a due job to pending, minus the "
            "time it was due (run-at, or the end of its backoff or deferral).",
            ["queue"],
            buckets=LATENESS_BUCKETS_S,
            registry=registry,
        )

    def settled(self, queue: str) -> dict[str, Counter]:
        """The settled counter's child per outcome for ``queue`` (bind once, count cheaply)."""
        return {outcome: self.consumer_jobs.labels(queue, outcome) for outcome in SETTLED_OUTCOMES}


class Readings(Protocol):
    """What ``render`` refreshes before each scrape."""

    async def read(self) -> None: ...


_DEPTH = ("pending", "scheduled", "active", "dead", "cancelled", "waiting_children")
_LANES = (("with_jobs", "lanes"), ("paused", "paused_lanes"), ("waiting", "waiting_lanes"))
_TOTALS = (("completed", "completed_total"), ("retried", "retried_total"),
           ("dead", "dead_total"), ("deferred", "deferred_total"),
           ("cancelled", "cancelled_total"), ("expired", "expired_total"))  # fmt: skip


class QueueReadings(Collector):
    """The server's state of ``queues``: ``await read()`` fetches it (per queue an ``HMGET`` of
    its partition count and one ``jobs.counts``, one per partition of a partitioned queue, added
    up; ``BusError`` when the server cannot be read, and the last reading stays), and the
    registry's collection reports the last reading. Registers into ``registry`` when given."""

    def __init__(
        self, bus: Bus, queues: Sequence[str], registry: CollectorRegistry | None = None
    ) -> None:
        for queue in queues:
            bus.keys(queue)  # validates the name
        self.bus = bus
        self.queues = tuple(queues)
        self._last: dict[str, Counts] = {}
        self._controls: dict[str, QueueControl] = {}
        self._memory: memory.MemoryUse | None = None
        self._storage: Storage | None = None
        if registry is not None:
            registry.register(self)

    async def read(self) -> None:
        # a partitioned queue's partitions added up (echomq_trio.partitions)
        fresh = {queue: await queue_counts(self.bus, queue) for queue in self.queues}
        controls = {queue: await queues.control(self.bus, queue) for queue in self.queues}
        self._memory = await memory.memory_use(self.bus)
        self._storage = await read_storage(self.bus)
        self._last, self._controls = fresh, controls

    def last(self) -> dict[str, Counts]:
        """The last reading, per queue (empty before the first)."""
        return dict(self._last)

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "echomq_jobs", "Jobs in the queue now, by state (read from the server).",
            labels=["queue", "state"],
        )  # fmt: skip
        lanes = GaugeMetricFamily(
            "echomq_lanes", "Lanes of the queue now, by state (read from the server).",
            labels=["queue", "state"],
        )  # fmt: skip
        repeats = GaugeMetricFamily(
            "echomq_repeats", "Recurring schedules registered on the queue (read from the server).",
            labels=["queue"],
        )  # fmt: skip
        totals = CounterMetricFamily(
            "echomq_queue_jobs",
            "The queue's running totals by every process, kept by the server, by outcome.",
            labels=["queue", "outcome"],
        )
        for queue, c in self._last.items():
            for state in _DEPTH:
                depth.add_metric([queue, state], getattr(c, state))
            for state, field in _LANES:
                lanes.add_metric([queue, state], getattr(c, field))
            repeats.add_metric([queue], c.repeats)
            for outcome, field in _TOTALS:
                totals.add_metric([queue, outcome], getattr(c, field))
        yield from (depth, lanes, repeats, totals)
        paused = GaugeMetricFamily(
            "echomq_queue_paused", "1 while the queue is paused (it claims nothing), else 0.",
            labels=["queue"],
        )  # fmt: skip
        cap = GaugeMetricFamily(
            "echomq_queue_max_active", "The queue's cap on jobs in flight across every worker.",
            labels=["queue"],
        )  # fmt: skip
        for queue, control in self._controls.items():
            paused.add_metric([queue], 1 if control.paused else 0)
            if control.max_active is not None:
                cap.add_metric([queue], control.max_active)
        yield from (paused, cap)
        if self._memory is not None:
            yield GaugeMetricFamily(
                "echomq_server_memory_used_bytes",
                "The server's used memory (on a cluster: the primary nearest its ceiling).",
                value=self._memory.used_bytes,
            )
            yield GaugeMetricFamily(
                "echomq_server_memory_max_bytes",
                "The server's maxmemory (0: no ceiling); at it a noeviction server refuses writes.",
                value=self._memory.max_bytes,
            )
        if self._storage is not None:
            yield GaugeMetricFamily(
                "echomq_server_writes_refused",
                "1 while the server cannot write its append-only file (it refuses writes).",
                value=0 if self._storage.writable else 1,
            )
            if self._storage.disk is not None:
                yield GaugeMetricFamily(
                    "echomq_server_disk_free_bytes",
                    "Free space on the file system of the embedded server's data directory.",
                    value=self._storage.disk.free_bytes,
                )
                yield GaugeMetricFamily(
                    "echomq_server_disk_size_bytes",
                    "Size of the file system of the embedded server's data directory.",
                    value=self._storage.disk.size_bytes,
                )


async def render(registry: CollectorRegistry, readings: Iterable[Readings] = ()) -> bytes:
    """Await fresh ``readings`` (``BusError`` when the server cannot be read), then the
    registry in the Prometheus text format (``CONTENT_TYPE_LATEST``)."""
    for r in readings:
        await r.read()
    return generate_latest(registry)
