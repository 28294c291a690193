"""``NotificationWorker``: the consumer of ``cm.notify`` that delivers notices to Telegram.

Per notice: take a send from the shared rate limiter; without one, defer it (the lane waits on
the server and the notice keeps its place) and let go of the job, never sleeping while holding
it. With one, send and act on the verdict:

* delivered: ack;
* retry later: backoff ``min(500·2^(a−1), 30000)`` ms with full jitter, at least the server's
  ``retry_after``, up to 6 attempts; a 429 pauses the chat (or everyone, when the bot's own
  window is full) and defers without counting an attempt;
* migrate: remember the new chat id and resend there at once (later notices follow it);
* drop: bury the job with the reason (it can be listed and replayed);
* fatal: stop the worker with a clear message (``StopConsumer``).
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

import attrs
import trio

from codemojex.notify.classify import Delivered, Drop, Fatal, Migrate, RetryLater, Verdict
from codemojex.notify.notice import DeliveryNote, Notice, decode, encode_note
from codemojex.notify.notifier import NOTIFY_QUEUE
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.telegram import TelegramBot
from codemojex.stats import added
from echomq_trio import Ack, Bury, Bus, Consumer, DeferIn, Job, RetryIn, StopConsumer
from echomq_trio.backoff import Exponential, Jitter, delay_ms

if TYPE_CHECKING:
    from codemojex.metrics import NotifyMetrics

__all__ = ["NotificationWorker", "WorkerStats"]

log = logging.getLogger("codemojex.notify.worker")

MAX_ATTEMPTS = 6
BACKOFF = Jitter(Exponential(500, 30_000))


@attrs.frozen
class WorkerStats:
    """What this worker did with the notices it handled (a snapshot from ``statistics()``)."""

    delivered: int = 0
    deferred: int = 0  # no rate-limit token yet
    flood_waits: int = 0  # 429s from Telegram
    retried: int = 0
    migrated: int = 0
    dropped: int = 0
    fatal: str | None = None


class NotificationWorker:
    """Run with ``nursery.start(worker.run)``; cancel to stop (notices in hand go back). With
    ``metrics`` (``codemojex.metrics.NotifyMetrics``) its consumer observes its claims and
    settlements, and each delivery its delay; without, nothing."""

    def __init__(
        self,
        bus: Bus,
        bot: TelegramBot,
        limiter: RateLimiter,
        *,
        queue: str = NOTIFY_QUEUE,
        concurrency: int = 16,
        lease_ms: int = 15_000,
        rng: random.Random | None = None,
        metrics: NotifyMetrics | None = None,
    ) -> None:
        self.bus = bus
        self.bot = bot
        self.limiter = limiter
        self.queue = queue
        self._stats = WorkerStats()
        self._rng = rng or random.Random()
        self._metrics = metrics
        # On the server, not in this process: old chat id -> new chat id, one field per group
        # that Telegram upgraded to a supergroup (once each), so bounded by the group chats.
        self._migrations = bus.keys(queue).app("migrated")
        self.consumer = Consumer(
            bus,
            queue,
            self.handle,
            concurrency=concurrency,
            lease_ms=lease_ms,
            max_attempts=MAX_ATTEMPTS,
            beat_ms=1000,
            metrics=None if metrics is None else metrics.bus,
        )

    def statistics(self) -> WorkerStats:
        return self._stats

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.consumer.run(task_status=task_status)

    async def _chat_for(self, chat: int) -> int:
        moved = await self.bus.wire.command("HGET", self._migrations, str(chat))
        return int(moved) if moved is not None else chat

    async def handle(self, job: Job) -> Ack | RetryIn | DeferIn | Bury | None:
        try:
            notice = decode(job.payload)
        except ValueError as exc:
            self._stats = added(self._stats, dropped=1)
            return Bury(str(exc))
        chat = await self._chat_for(notice.chat)
        for _ in range(2):  # a second pass only after a migration
            take = await self.limiter.take(chat)
            if not take.ok:
                self._stats = added(self._stats, deferred=1)
                return DeferIn(take.wait_ms, f"rate limit ({take.blocked_by})")
            verdict = await self.bot.send_message(chat, notice.text, **notice.opts)
            if not isinstance(verdict, Migrate):
                return await self._act(job, notice, chat, verdict)
            self._stats = added(self._stats, migrated=1)
            await self.bus.wire.command("HSET", self._migrations, str(notice.chat),
                                        str(verdict.new_chat_id))  # fmt: skip
            log.info("chat %s migrated to %s", chat, verdict.new_chat_id)
            chat = verdict.new_chat_id
        return RetryIn(delay_ms(BACKOFF, max(job.attempts, 1), self._rng), "migrated twice")

    async def _act(
        self, job: Job, notice: Notice, chat: int, verdict: Verdict
    ) -> Ack | RetryIn | DeferIn | Bury | None:
        if isinstance(verdict, Delivered):
            self._stats = added(self._stats, delivered=1)
            if self._metrics is not None:
                self._metrics.delivered(notice, chat)
            return Ack(encode_note(DeliveryNote(chat, verdict.message_id)))
        if isinstance(verdict, RetryLater):
            if verdict.flood:
                self._stats = added(self._stats, flood_waits=1)
                wait = verdict.delay_ms or 1000
                scope, _ = await self.limiter.pause("auto", chat, wait)
                return DeferIn(wait, f"429 ({scope}): {verdict.reason}")
            self._stats = added(self._stats, retried=1)
            wait = max(delay_ms(BACKOFF, max(job.attempts, 1), self._rng), verdict.delay_ms or 0)
            return RetryIn(wait, verdict.reason)
        if isinstance(verdict, Drop):
            self._stats = added(self._stats, dropped=1)
            log.info("notice %s to %s dropped: %s", notice.id, chat, verdict.reason)
            return Bury(verdict.reason)
        if isinstance(verdict, Fatal):
            self._stats = attrs.evolve(self._stats, fatal=verdict.reason)
            raise StopConsumer(f"Telegram refused the bot, stopping: {verdict.reason}")
        raise AssertionError(f"unhandled verdict {verdict!r}")  # pragma: no cover
