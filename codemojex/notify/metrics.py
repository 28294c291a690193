"""The notifications' Prometheus metrics (``codemojex.metrics.ServiceMetrics`` serves them with
the bus's and the archive's at ``/metrics``):

* What the ``NotificationWorker`` observes itself (``NotifyMetrics``, its ``metrics``): its
  consumer's instruments (the bus's) and ``codemojex_notice_delay_seconds{chat_type}``
  (histogram): per delivered notice, the time from when it was due (its ``due_ms``, else its
  id's mint time) to Telegram's acceptance; ``chat_type`` is ``private`` or ``group`` (their
  per-chat limits differ), never the chat itself (that label would grow without bound).
* What ``NotifyCollector`` reads of a worker (and its ``RateLimiter``) at each scrape:

  - ``codemojex_notices_total{outcome}`` (counter): notices handled, by what happened:
    ``delivered``, ``deferred`` (no rate-limit token yet), ``flood_wait`` (Telegram answered
    429), ``retried``, ``dropped``, ``already_delivered`` (the worker's ``statistics()``).
  - ``codemojex_chat_migrations_total`` (counter): group chats that moved to a supergroup.
  - ``codemojex_rate_limit_answers_total{answer}`` (counter): what the shared rate limiter told
    this process: ``taken`` (a send), ``denied_global``, ``denied_chat``, ``denied_paused``.
  - ``codemojex_rate_budget_used_ratio`` (gauge): sends this process took in about the last
    ``BUDGET_WINDOW_S`` (60 s), divided by what the bot's global limit allows in that time. The
    budget is shared: with several worker processes, sum their gauges.

* Telegram's outages, from the worker's ``OutageGate`` and its bot:

  - ``codemojex_telegram_outages_total{cause}`` (counter): outages that began, by cause
    (``server_error``, ``no_answer``, ``not_bot_api``, ``unanswered``).
  - ``codemojex_telegram_outage_seconds`` (gauge): how long the outage going on has lasted
    (0: none); ``codemojex_telegram_sending_paused`` (gauge): 1 while sending is paused.
  - ``codemojex_telegram_unanswered_seconds`` (gauge): how long the oldest request to Telegram
    in flight has waited (0: none in flight).

The collector reads a worker through ``Watched`` (what it reads of one), so the worker, which
imports ``NotifyMetrics`` from here, is not imported back.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import trio
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from codemojex.notify.outage import OutageGate
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.telegram import CAUSES, TelegramBot, is_group_chat
from echomq_trio import ids
from echomq_trio.metrics import BusMetrics

if TYPE_CHECKING:
    from codemojex.notify.notice import Notice

__all__ = [
    "BUDGET_WINDOW_S",
    "DELAY_BUCKETS_S",
    "Counts",
    "NotifyCollector",
    "NotifyMetrics",
    "SendWindow",
    "Watched",
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


class Counts(Protocol):
    """The counters of a worker's ``statistics()`` the collector reports."""

    @property
    def delivered(self) -> int: ...
    @property
    def deferred(self) -> int: ...
    @property
    def flood_waits(self) -> int: ...
    @property
    def retried(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def already_delivered(self) -> int: ...
    @property
    def migrated(self) -> int: ...


class Watched(Protocol):
    """What ``NotifyCollector`` reads of a ``NotificationWorker``."""

    @property
    def bot(self) -> TelegramBot: ...
    @property
    def limiter(self) -> RateLimiter: ...
    @property
    def outage(self) -> OutageGate: ...
    def statistics(self) -> Counts: ...


class NotifyCollector(Collector):
    """A worker's statistics, as of the last ``sample`` (the budget) and of the collection (the
    counters). ``watch`` it once, then ``sample`` before each scrape."""

    def __init__(self, budget_window_s: float = BUDGET_WINDOW_S) -> None:
        self.budget_window_s = budget_window_s
        self.worker: Watched | None = None
        self._window = SendWindow(budget_window_s)
        self._budget = 0.0
        self._now = 0.0  # trio's clock at the last sample

    def watch(self, worker: Watched) -> None:
        """Report ``worker``'s statistics from now on (its budget from now)."""
        self._window = SendWindow(self.budget_window_s)
        self._window.rate(trio.current_time(), worker.limiter.statistics().taken)
        self.worker = worker

    def sample(self, now: float) -> None:
        self._now = now
        w = self.worker
        if w is not None:
            limit = w.limiter.limits.global_.per_second
            self._budget = self._window.rate(now, w.limiter.statistics().taken) / limit

    def collect(self) -> Iterator[Metric]:
        if self.worker is not None:
            yield from self._notify(self.worker)
            yield from self._telegram(self.worker)

    def _notify(self, worker: Watched) -> Iterator[Metric]:
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

    def _telegram(self, worker: Watched) -> Iterator[Metric]:
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
