"""The service's Prometheus metrics at ``/metrics`` of the page server: one ``ServiceMetrics``
(one ``CollectorRegistry``, nothing global) per service.

It holds the bus's metrics (``echomq_trio.metrics``: the process-local instruments its consumers
and metronomes observe, and the queues' state read from the server per scrape) and adds:

* Notifications, from the ``NotificationWorker`` (and its ``RateLimiter``) of this process:

  - ``codemojex_notices_total{outcome}`` (counter): notices handled, by what happened:
    ``delivered``, ``deferred`` (no rate-limit token yet), ``flood_wait`` (Telegram answered
    429), ``retried``, ``dropped`` (``DeliveryStats``).
  - ``codemojex_chat_migrations_total`` (counter): group chats that moved to a supergroup.
  - ``codemojex_rate_limit_answers_total{answer}`` (counter): what the shared rate limiter told
    this process: ``taken`` (a send), ``denied_global``, ``denied_chat``, ``denied_paused``.
  - ``codemojex_rate_budget_used_ratio`` (gauge): sends this process took in about the last
    ``BUDGET_WINDOW_S`` (60 s), divided by what the bot's global limit allows in that time. The
    budget is shared: with several worker processes, sum their gauges.
  - ``codemojex_notice_delay_seconds{chat_type}`` (histogram): per delivered notice, the time
    from when it was due (its ``due_ms``, else its id's mint time) to Telegram's acceptance;
    ``chat_type`` is ``private`` or ``group`` (their per-chat limits differ), never the chat
    itself (that label would grow without bound).

* Telegram's outages, from the worker's ``OutageGate`` and its bot:

  - ``codemojex_telegram_outages_total{cause}`` (counter): outages that began, by cause
    (``server_error``, ``no_answer``, ``not_bot_api``, ``unanswered``).
  - ``codemojex_telegram_outage_seconds`` (gauge): how long the outage going on has lasted
    (0: none); ``codemojex_telegram_sending_paused`` (gauge): 1 while sending is paused.
  - ``codemojex_telegram_unanswered_seconds`` (gauge): how long the oldest request to Telegram
    in flight has waited (0: none in flight).

* The archive, from the ``Archiver``: ``codemojex_archive_rows_total`` (rows archived),
  ``codemojex_archive_segments_total`` (segments replicated), ``codemojex_archive_fenced``
  (1 when another archiver took over), ``codemojex_archive_replica_up`` (0 during an outage)
  and ``codemojex_archive_replica_errors_total``.

A scrape first reads the queues' state (async), samples the send window, then renders; a
``BusError`` while reading answers 503 with one line.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import attrs
import trio
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from codemojex.asgi import Response
from codemojex.notify.classify import CAUSES
from codemojex.notify.limits import is_group_chat
from echomq_trio import Bus, BusError, ids
from echomq_trio.metrics import CONTENT_TYPE_LATEST, BusMetrics, QueueReadings, render

if TYPE_CHECKING:
    from codemojex.audit import Archiver
    from codemojex.notify.notice import Notice
    from codemojex.notify.worker import NotificationWorker

__all__ = [
    "BUDGET_WINDOW_S",
    "DELAY_BUCKETS_S",
    "NotifyMetrics",
    "SendWindow",
    "ServiceMetrics",
]

BUDGET_WINDOW_S = 60.0
DELAY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
_WINDOW_SAMPLES = 60  # samples kept per window, at most (and one before it)


class SendWindow:
    """A running count's rate over about the last ``window_s``, from samples of the count (pure:
    the caller passes the time). A sample is kept only when ``window_s / 60`` has passed since
    the last kept one, so it holds at most about 62 samples however often it is read."""

    def __init__(self, window_s: float = BUDGET_WINDOW_S) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        self.window_s = window_s
        self._step = window_s / _WINDOW_SAMPLES
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def rate(self, now: float, count: int) -> float:
        """Sample ``count`` at ``now``; its rate per second since the newest sample at least
        ``window_s`` old (the oldest kept, early on); 0.0 before any time has passed."""
        samples = self._samples
        if not samples or now - samples[-1][0] >= self._step:
            samples.append((now, count))
        while len(samples) >= 2 and samples[1][0] <= now - self.window_s:
            samples.popleft()
        since, base = samples[0]
        return (count - base) / (now - since) if now > since else 0.0


class NotifyMetrics:
    """What a ``NotificationWorker`` observes itself: its consumer's instruments (``bus``) and
    the delivery delay. Pass it as ``NotificationWorker(..., metrics=...)``."""

    def __init__(self, registry: CollectorRegistry, bus: BusMetrics) -> None:
        self.bus = bus
        self.delay = Histogram(
            "codemojex_notice_delay_seconds",
            "From when a notice was due (else its id's mint time) to its delivery, by chat type.",
            ["chat_type"],
            buckets=DELAY_BUCKETS_S,
            registry=registry,
        )
        self._private = self.delay.labels("private")
        self._group = self.delay.labels("group")

    def delivered(self, notice: Notice, chat: int, now_ms: int | None = None) -> None:
        """Observe a delivery to ``chat`` now (``now_ms``: Unix ms, this host's clock). A notice
        without a branded id or due time is not observed."""
        if notice.due_ms is not None:
            since_ms = notice.due_ms
        elif ids.is_valid(notice.id):
            since_ms = ids.timestamp_ms(notice.id)
        else:
            return
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        child = self._group if is_group_chat(chat) else self._private
        child.observe(max(0, now_ms - since_ms) / 1000)


@attrs.frozen
class _Worker:
    worker: NotificationWorker
    window: SendWindow


class _ServiceCollector(Collector):
    """The worker's and the archiver's statistics, as of the last ``sample`` (the budget) and
    of the collection (the counters)."""

    def __init__(self) -> None:
        self.worker: _Worker | None = None
        self.archiver: Archiver | None = None
        self._budget = 0.0
        self._now = 0.0  # trio's clock at the last sample

    def sample(self, now: float) -> None:
        self._now = now
        w = self.worker
        if w is not None:
            limit = w.worker.limiter.limits.global_.per_second
            self._budget = w.window.rate(now, w.worker.limiter.statistics().taken) / limit

    def collect(self) -> Iterator[Metric]:
        if self.worker is not None:
            yield from self._notify(self.worker.worker)
        if self.archiver is not None:
            yield from self._archive(self.archiver)

    def _notify(self, worker: NotificationWorker) -> Iterator[Metric]:
        s = worker.statistics()
        notices = CounterMetricFamily(
            "codemojex_notices", "Notices this process's worker handled, by what happened.",
            labels=["outcome"],
        )  # fmt: skip
        for outcome, n in (("delivered", s.delivered), ("deferred", s.deferred),
                           ("flood_wait", s.flood_waits), ("retried", s.retried),
                           ("dropped", s.dropped),
                           ("already_delivered", s.already_delivered)):  # fmt: skip
            notices.add_metric([outcome], n)
        yield notices
        yield CounterMetricFamily(
            "codemojex_chat_migrations", "Group chats this worker saw move to a supergroup.",
            value=s.migrated,
        )  # fmt: skip
        r = worker.limiter.statistics()
        answers = CounterMetricFamily(
            "codemojex_rate_limit_answers",
            "What the shared rate limiter answered this process.",
            labels=["answer"],
        )
        for answer in ("taken", "denied_global", "denied_chat", "denied_paused"):
            answers.add_metric([answer], getattr(r, answer))
        yield answers
        yield GaugeMetricFamily(
            "codemojex_rate_budget_used_ratio",
            f"Sends this process took in about the last {BUDGET_WINDOW_S:g} s over what the "
            "bot's global limit allows in that time.",
            value=self._budget,
        )
        yield from self._telegram(worker)

    def _telegram(self, worker: NotificationWorker) -> Iterator[Metric]:
        o = worker.outage.statistics()
        outages = CounterMetricFamily(
            "codemojex_telegram_outages", "Outages of Telegram this process saw begin, by cause.",
            labels=["cause"],
        )  # fmt: skip
        for cause in CAUSES:
            outages.add_metric([cause], getattr(o, cause))
        yield outages
        lasted = 0.0 if o.trouble is None else max(0.0, self._now - o.trouble.since)
        yield GaugeMetricFamily(
            "codemojex_telegram_outage_seconds",
            "How long the outage of Telegram going on has lasted (0: none).",
            value=lasted,
        )
        yield GaugeMetricFamily(
            "codemojex_telegram_sending_paused",
            "1 while sending is paused for an outage of Telegram, else 0.",
            value=int(not worker.outage.is_open),
        )
        oldest = worker.bot.unanswered()
        yield GaugeMetricFamily(
            "codemojex_telegram_unanswered_seconds",
            "How long the oldest request to Telegram in flight has waited (0: none).",
            value=0.0 if oldest is None else max(0.0, self._now - oldest.started),
        )

    def _archive(self, archiver: Archiver) -> Iterator[Metric]:
        a = archiver.statistics()
        r = a.replicator
        yield CounterMetricFamily(
            "codemojex_archive_rows", "Rows the archiver inserted.", value=a.folder.archived
        )
        yield CounterMetricFamily(
            "codemojex_archive_resent",
            "Deliveries of notices the archive had recorded as delivered before (sent again).",
            value=a.folder.resent,
        )
        yield CounterMetricFamily(
            "codemojex_archive_segments", "Segments the archiver replicated.", value=r.segments
        )
        yield GaugeMetricFamily(
            "codemojex_archive_fenced",
            "1 when another archiver holds the archive's epoch (this one stopped writing).",
            value=int(r.fenced is not None),
        )
        yield GaugeMetricFamily(
            "codemojex_archive_replica_up",
            "0 while the replica is unreachable, else 1.",
            value=int(r.replica_down_since is None),
        )
        yield CounterMetricFamily(
            "codemojex_archive_replica_errors", "Failed calls to the replica.",
            value=r.replica_errors,
        )  # fmt: skip


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
        self._service = _ServiceCollector()
        self.registry.register(self._service)

    def watch(
        self, worker: NotificationWorker | None = None, archiver: Archiver | None = None
    ) -> None:
        """Report ``worker``'s and ``archiver``'s statistics from now on."""
        if worker is not None:
            window = SendWindow(self.budget_window_s)
            window.rate(trio.current_time(), worker.limiter.statistics().taken)
            self._service.worker = _Worker(worker, window)
        if archiver is not None:
            self._service.archiver = archiver

    async def scrape(self) -> bytes:
        """The metrics in the Prometheus text format, the queues read fresh (``BusError`` when
        the server cannot be read)."""
        self._service.sample(trio.current_time())
        return await render(self.registry, [self.queues])

    async def response(self) -> Response:
        """``scrape`` as the page server's answer: 200, or 503 with one line."""
        try:
            body = await self.scrape()
        except BusError:
            return Response(503, b"text/plain", b"the server is unavailable\n")
        return Response(200, CONTENT_TYPE_LATEST.encode(), body)
