"""The service's Prometheus metrics at ``/metrics`` of the page server: one ``ServiceMetrics``
(one ``CollectorRegistry``, nothing global) per service, which assembles the metrics of its
parts, each defined beside what it measures:

* the bus's (``echomq_trio.metrics``: the process-local instruments its consumers and
  metronomes observe, and the queues' state read from the server per scrape);
* the notifications' (``codemojex.notify.metrics``: what the ``NotificationWorker`` observes,
  its counters, its rate limiter's answers and budget, and Telegram's outages);
* the archive's (``codemojex.audit.metrics``: rows, segments, the replica).

A scrape first reads the queues' state (async), samples the send window, then renders; a
``BusError`` while reading answers 503 with one line.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio
from prometheus_client import CollectorRegistry

from codemojex.audit.archiver import Archiver
from codemojex.audit.metrics import ArchiveCollector
from codemojex.notify.metrics import BUDGET_WINDOW_S, NotifyCollector, NotifyMetrics, Watched
from echomq_trio import Bus, BusError
from echomq_trio.metrics import CONTENT_TYPE_LATEST, BusMetrics, QueueReadings, render
from servicekit.asgi import Response

__all__ = ["ServiceMetrics"]


class ServiceMetrics:
    """One registry for the service. Pass ``bus_metrics`` to its consumers and metronomes and
    ``notify`` to its notification worker, then ``watch`` the worker and the archiver; the page
    server answers ``/metrics`` with ``response()``."""

    def __init__(
        self, bus: Bus, queues: Sequence[str], *, budget_window_s: float = BUDGET_WINDOW_S
    ) -> None:
        self.registry = CollectorRegistry()
        self.bus_metrics = BusMetrics(self.registry)
        self.queues = QueueReadings(bus, queues, self.registry)
        self.notify = NotifyMetrics(self.registry, self.bus_metrics)
        self.budget_window_s = budget_window_s
        self._worker = NotifyCollector(budget_window_s)
        self._archive = ArchiveCollector()
        self.registry.register(self._worker)
        self.registry.register(self._archive)

    def watch(self, worker: Watched | None = None, archiver: Archiver | None = None) -> None:
        """Report ``worker``'s and ``archiver``'s statistics from now on."""
        if worker is not None:
            self._worker.watch(worker)
        if archiver is not None:
            self._archive.watch(archiver)

    async def scrape(self) -> bytes:
        """The metrics in the Prometheus text format, the queues read fresh (``BusError`` when
        the server cannot be read)."""
        self._worker.sample(trio.current_time())
        return await render(self.registry, [self.queues])

    async def response(self) -> Response:
        """``scrape`` as the page server's answer: 200, or 503 with one line."""
        try:
            body = await self.scrape()
        except BusError:
            return Response(503, b"text/plain", b"the server is unavailable\n")
        return Response(200, CONTENT_TYPE_LATEST.encode(), body)
