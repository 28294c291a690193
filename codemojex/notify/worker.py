"""``NotificationWorker``: the handler of ``cm.notify``, run by the bus's per-lane consumer.

Theory of operation:

* The bus's ``Consumer`` with per-lane dispatch does the queue's side (``echomq_trio.consumer``):
  one claimer leases notices while the worker holds fewer than ``concurrency`` and hands each to
  the task of its chat (its lane) over that chat's bounded memory channel; a chat task lives
  while its chat has work and ends after ``idle_s`` without any, or at once after a deferral or
  a burial with nothing else to do; the renewer, the settler and the release on the way out are
  the consumer's. The lanes on the server have limit 1, so a chat has one notice in flight
  across every process: its task sends in the order the lane gives, and order holds across
  deferrals, retries and processes. The outage gate is the consumer's claim gate: while it is
  closed nothing is claimed.
* This module is the handler, ``deliver``: it decides with ``codemojex.notify.steps`` (pure) and
  carries each step out, and returns what the bus settles the notice with: an ``Ack`` whose
  note records the delivery, ``RetryIn`` (spends the attempt), ``DeferIn`` (no attempt spent;
  the lane waits) or ``Bury``. A short wait for the rate limiter (``hold_max_ms``) is held in the
  task while the consumer renews the lease; a long one is deferred on the server. A 429 pauses
  the limiter (the chat, or everyone) the same way. A 5xx, no answer, or an answer that is not
  the Bot API's asks ``getMe`` whether Telegram is there at all: if not, it is an outage of the
  bot, not of the notice: the outage gate closes (no claims, every chat task waits at it holding
  its notice, no attempt spent) until a probe gets an answer. If Telegram is there, the failure
  was the chat's and costs the attempt (6 at most, backoff ``min(500·2^(a−1), 30000)`` ms with
  full jitter). The probe runs after the send's shielded part, so it is not cut short by the
  send's deadline; cancelled, it gives the notice back unspent. The gate also watches for
  requests left unanswered (``hang_after_s``). A chat answering 429 for ``stuck_after_ms`` in a
  row: its notice is dead with the reason. Telegram refusing the bot raises ``StopConsumer``:
  the whole worker stops, its notices go back.
* Cancellation: the worker runs the consumer and the outage prober in one nursery; cancel it to
  shut down. Handlers get no grace period: a chat task waiting (at the gate, the limiter, a
  hold) is cancelled at once and its notice goes back to pending without spending an attempt.
  A send already on the wire is finished first (shielded, with a deadline) together with what
  its answer needs, and returned, so the consumer settles it: a cancelled send is never
  delivered twice. Connection trouble on the way (the limiter, the migration table) waits and
  goes on with the same notice; anything else unexpected is raised, and costs the attempt as a
  handler's exception does. After ``kill -9`` the leases expire and the metronome's reaper
  returns the notices, still first in their lanes.
* After a repair or restore of the server's data (its append-only file cut at a damage, or an
  older copy put in place), notices delivered before it may be pending again. With a ``ledger``
  (``codemojex.audit.Ledger``), the handler first asks it about a notice: one the audit archive
  records as delivered is acked without sending, its note saying so, and counted
  (``already_delivered``).
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

import attrs
import trio

from codemojex.notify.migration import current_chat, migrate_chat
from codemojex.notify.notice import DeliveryNote, Notice, decode, encode_note
from codemojex.notify.notifier import NOTIFY_QUEUE
from codemojex.notify.outage import DEFAULT_HANG_AFTER_S, OutageGate
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.steps import (
    AskBot,
    Booked,
    BotDown,
    Done,
    Flood,
    Follow,
    Hold,
    Send,
    StepPolicy,
    Stop,
    after_answer,
    after_asking,
    after_flood,
    after_take,
    slot_missed,
)
from codemojex.notify.streak import end_streak, flooded_for_ms
from codemojex.stats import added
from codemojex.telegram.bot import TelegramBot
from codemojex.telegram.classify import RetryLater
from echomq_trio import Ack, BusError, ConnectionLost, Consumer, ConsumerStats, Job, StopConsumer
from echomq_trio.backoff import reconnect_delay_s
from echomq_trio.bus import Bus
from echomq_trio.errors import RequestTimedOut, level_of, raising_first
from echomq_trio.settlement import Bury, DeferIn, RetryIn

if TYPE_CHECKING:
    from codemojex.audit.ledger import Ledger
    from codemojex.notify.metrics import NotifyMetrics

__all__ = ["DeliveryStats", "NotificationWorker"]

log = logging.getLogger("codemojex.notify.worker")

SEND_TIME_S = 15.0  # the longest a send on the wire is shielded (the bot's timeout is 10 s)
IDLE_S = 1.0  # a chat task with nothing to do for this long ends

Settled = Ack | RetryIn | DeferIn | Bury  # what ``deliver`` returns for the bus to settle


@attrs.frozen
class DeliveryStats:
    """What this worker did with the notices it handled (a snapshot from ``statistics()``)."""

    delivered: int = 0
    deferred: int = 0  # no rate-limit token soon enough: deferred on the server
    held: int = 0  # short waits held in a chat task instead
    booked: int = 0  # sends booked a little ahead, waited for in the chat task
    handed_back: int = 0  # slots given back to the limiter, too late to send on (slot_missed)
    flood_waits: int = 0  # 429s from Telegram
    retried: int = 0
    migrated: int = 0
    dropped: int = 0  # buried: undeliverable, or stuck behind 429s
    outages: int = 0  # outages of Telegram this worker saw (``OutageGate.statistics()``)
    chat_tasks: int = 0  # chat tasks started
    already_delivered: int = 0  # acked unsent: the audit archive records them delivered
    fatal: str | None = None


class NotificationWorker:
    """Run with ``nursery.start(worker.run)``; cancel to stop (notices in hand go back). With
    ``metrics`` (``codemojex.notify.metrics.NotifyMetrics``) it observes its claims and
    settlements, and each delivery its delay; without, nothing. ``concurrency`` is how many
    notices (so chats) it holds at most: 8 by default, the best of 8/16/64 with
    tools/bench_notify.py (more chat tasks wake later for their booked slots, and late sends
    meet 429s; docs/codemojex/notifications.md).
    ``hang_after_s``: a request to Telegram unanswered this long is an outage (``OutageGate``).
    With a ``ledger`` it does not send again a notice the audit archive records as delivered
    (after a repair or restore of the server's data; see the module docstring)."""

    def __init__(
        self,
        bus: Bus,
        bot: TelegramBot,
        limiter: RateLimiter,
        *,
        queue: str = NOTIFY_QUEUE,
        concurrency: int = 8,
        lease_ms: int = 15_000,
        beat_ms: int = 1000,
        policy: StepPolicy | None = None,
        idle_s: float = IDLE_S,
        rng: random.Random | None = None,
        metrics: NotifyMetrics | None = None,
        hang_after_s: float = DEFAULT_HANG_AFTER_S,
        ledger: Ledger | None = None,
    ) -> None:
        bus.keys(queue)  # validates the name
        for name, value in (("concurrency", concurrency), ("lease_ms", lease_ms),
                            ("beat_ms", beat_ms)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.bus = bus
        self.bot = bot
        self.limiter = limiter
        self.queue = queue
        self.policy = policy or StepPolicy()
        self.outage = OutageGate(bot, shared=limiter, hang_after_s=hang_after_s)
        self.consumer = Consumer(
            bus,
            queue,
            self.deliver,
            per_lane=True,
            lane_idle_s=idle_s,
            claim_gate=self.outage.wait_open,
            concurrency=concurrency,
            prefetch=0,  # a held notice is a chat in flight: hold no more than the handlers run
            lease_ms=lease_ms,
            beat_ms=beat_ms,
            max_attempts=self.policy.max_attempts,
            backoff=self.policy.backoff,
            grace_s=0,  # waits end at once on shutdown; a send on the wire is shielded
            metrics=None if metrics is None else metrics.bus,
            metronome_check=False,
        )
        self._stats = DeliveryStats()
        self._rng = rng or random.Random()
        self._metrics = metrics
        self.ledger = ledger

    @property
    def concurrency(self) -> int:
        return self.consumer.concurrency

    def statistics(self) -> DeliveryStats:
        return attrs.evolve(
            self._stats,
            outages=self.outage.statistics().outages,
            chat_tasks=self.consumer.statistics().lane_tasks,
        )

    def bus_statistics(self) -> ConsumerStats:
        """The queue-side counters: the consumer's (``echomq_trio.Consumer.statistics()``)."""
        return self.consumer.statistics()

    def chats(self) -> list[str]:
        """The lanes (chats) that have a task now."""
        return self.consumer.lanes()

    def _count(self, **more: int) -> None:
        self._stats = added(self._stats, **more)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and deliver until cancelled; then shut down as described above. Raises
        ``StopConsumer`` when Telegram refuses the bot (its notices go back first)."""
        with raising_first(StopConsumer):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.outage.run)
                await nursery.start(self.consumer.run)
                task_status.started()
                await trio.sleep_forever()  # until cancelled, or the consumer stops

    # --- one notice ----------------------------------------------------------------------------

    async def deliver(self, job: Job) -> Settled:
        """The handler: carry one notice through the steps to what the bus settles it with.
        Connection trouble on the way (the limiter, the migration table) waits and goes on with
        the same notice; anything else unexpected is raised (the attempt is spent)."""
        try:
            notice = decode(job.payload)
        except ValueError as exc:
            self._count(dropped=1)
            return Bury(str(exc))
        if self.ledger is not None and (known := await self._already_delivered(job, notice)):
            return known
        failures = 0
        while True:
            try:
                step = await self._attempt(job, notice)
            except (ConnectionLost, RequestTimedOut) as exc:
                failures += 1
                log.log(level_of(exc), "notice %s: the server failed (%s); trying again",
                        notice.id, exc)  # fmt: skip
                await trio.sleep(reconnect_delay_s(failures))
                continue
            except StopConsumer:
                raise
            except Exception:
                log.exception("notice %s: unexpected error", notice.id)
                raise
            if isinstance(step, Done):
                note = DeliveryNote(step.chat, step.message_id, already_delivered=step.already)
                return Ack(encode_note(note))
            return step

    async def _already_delivered(self, job: Job, notice: Notice) -> Ack | None:
        """An ack of ``notice`` unsent if the ledger (the audit archive) records it delivered:
        the server's data went back since (see the module docstring)."""
        assert self.ledger is not None
        known = await self.ledger.delivered(notice.id or job.id)
        if known is None:
            return None
        self._count(already_delivered=1)
        log.info("notice %s not sent again: the audit archive records it delivered to %s "
                 "(message %s)", notice.id, known.chat, known.message_id)  # fmt: skip
        chat = notice.chat if known.chat is None else known.chat
        return Ack(encode_note(DeliveryNote(chat, known.message_id, already_delivered=True)))

    async def _attempt(self, job: Job, notice: Notice) -> Done | RetryIn | Bury | DeferIn:
        """The steps for one notice, up to what to settle it with. Only the waits (the gate, the
        limiter, a hold) are cancellable; a send and what its answer needs run to the end."""
        # Where a group moved (to a supergroup), on the server: ``codemojex.notify.migration``.
        chat = await current_chat(self.bus, notice.chat, queue=self.queue)
        followed = False
        booking = ""  # a booked slot to refine, or one this task woke too late for
        booked = False  # whether `booking` came as a booking (counted once, when it came)
        handed = False  # whether `booking` is a slot handed back as missed
        while True:
            await self.outage.wait_open()
            asked = trio.current_time()
            answer = await self.limiter.take(chat, book_ms=self.policy.hold_max_ms,
                                             booking=booking)  # fmt: skip
            answered = trio.current_time()
            passed_back, booking = booking, ""
            was_booked, was_handed, handed = booked, handed, False
            take = after_take(answer, self.policy)
            if isinstance(take, Send | Booked):
                # The slot is `ms` after the take on the server's clock (0: taken now), and the
                # take happened between asking and the answer: wait from the answer, so the
                # send is never early. Late past half the margin from the answer, or an answer
                # that took longer than the margin (a stall on the way: the slot may lie far
                # back), and the slot goes back to the limiter (steps.slot_missed). An answer
                # to a hand-back is judged from the answer alone: on a slow host every trip is
                # long, and hand-backs in a row would eat the budget.
                ms = take.ms if isinstance(take, Booked) else 0
                booked = isinstance(take, Booked)
                if booked and not (passed_back and was_booked):  # a refined one is the same
                    self._count(booked=1)
                if isinstance(take, Booked) and take.ask_ms:  # ask again nearer the slot
                    await trio.sleep(take.ask_ms / 1000)
                    booking = answer.entry
                    continue
                if ms:
                    await trio.sleep(ms / 1000)
                late_ms = (trio.current_time() - answered) * 1000 - ms
                trip_ms = 0.0 if was_handed else (answered - asked) * 1000
                if slot_missed(late_ms, trip_ms, self.limiter.margin_ms):
                    self._count(handed_back=1)
                    booking, handed = answer.entry, True
                    continue
            elif isinstance(take, DeferIn):
                self._count(deferred=1)
                return take
            elif isinstance(take, Hold):
                self._count(held=1)
                await trio.sleep(take.ms / 1000)
                continue
            # A send on the wire is finished even during shutdown, and so is what its answer
            # needs, so that the answer is acted on: a delivered notice given back would be
            # sent again. (Past the deadline, which the bot's timeout keeps from coming, the
            # notice is sent again.)
            step: Done | RetryIn | Bury | DeferIn | Hold | Follow | AskBot | Stop | None = None
            with trio.CancelScope(shield=True, deadline=trio.current_time() + SEND_TIME_S):
                step = await self._exchange(job, notice, chat, answer.entry, followed)
                if isinstance(step, Done | RetryIn | Bury | DeferIn):
                    return step
                if isinstance(step, Follow):
                    followed = True
                    chat = step.new_chat_id
            if isinstance(step, AskBot):
                told = await self._ask_bot(job, step)
                if isinstance(told, RetryIn):
                    return told
                # An outage: wait at the gate, then send again, no attempt spent.
            elif isinstance(step, Hold):
                await trio.sleep(step.ms / 1000)
            elif isinstance(step, Stop):
                self._stats = attrs.evolve(self._stats, fatal=step.reason)
                raise StopConsumer(f"Telegram refused the bot, stopping: {step.reason}")

    async def _exchange(
        self, job: Job, notice: Notice, chat: int, entry: str, followed: bool
    ) -> Done | RetryIn | Bury | DeferIn | Hold | Follow | AskBot | Stop:
        """Send once (taken from the limiter as ``entry``) and act on the answer: a step to
        settle with, or what to do before the next send (``Hold`` after a short 429, ``Follow``
        a migration, ``AskBot`` whether Telegram answers at all)."""
        verdict = await self.bot.send_message(chat, notice.text, **notice.opts)
        if not (isinstance(verdict, RetryLater) and not verdict.answered):
            await self._sent(chat, entry)
        step = after_answer(verdict, job.attempts, self.policy, self._rng)
        if isinstance(step, Follow):
            if followed:
                return RetryIn(0, "migrated twice")
            self._count(migrated=1)
            # Recorded with the chat's room carried along: one script for every signal of it.
            await migrate_chat(self.bus, notice.chat, step.new_chat_id, queue=self.queue)
            log.info("chat %s migrated to %s", chat, step.new_chat_id)
            return step
        if isinstance(step, Flood):
            self._count(flood_waits=1)
            scope, _ = await self.limiter.pause("auto", chat, step.ms)
            # How long the chat has answered 429 with no delivery between (server clock).
            stuck_ttl_ms = 2 * self.policy.stuck_after_ms
            flooded = (await flooded_for_ms(self.bus, chat, stuck_ttl_ms, queue=self.queue)
                       if scope == "chat" else 0)  # fmt: skip
            after = after_flood(step.ms, flooded, self.policy)
            if isinstance(after, Hold):
                self._count(held=1)
                return after
            if isinstance(after, DeferIn):
                return DeferIn(after.delay_ms, f"429 ({scope}): {step.reason}")
            step = after  # stuck: buried below, as an undeliverable notice is
        if isinstance(step, Done):
            await self._delivered(chat, notice)
            return attrs.evolve(step, chat=chat)
        if isinstance(step, RetryIn):
            self._count(retried=1)
            return step
        if isinstance(step, Bury):
            self._count(dropped=1)
            log.info("notice %s to %s dropped: %s", notice.id, chat, step.reason)
            return step
        return step  # AskBot or Stop

    async def _ask_bot(self, job: Job, asking: AskBot) -> RetryIn | BotDown:
        """Ask ``getMe`` whether Telegram answers the bot at all after a send failed as every
        chat's would: ``BotDown`` (the gate closes) or the chat's own failure (a ``RetryIn``).
        Not shielded: cancelled, the notice goes back unspent."""
        step = after_asking(not await self.bot.reachable(), asking, job.attempts, self.policy,
                            self._rng)  # fmt: skip
        if isinstance(step, BotDown):
            self.outage.close(step.reason, step.cause)
        else:
            self._count(retried=1)
        return step

    async def _sent(self, chat: int, entry: str) -> None:
        """Telegram answered the send: its window counts from now (see ``RateLimiter.sent``). If
        the server cannot be told, the entry keeps the margin's assumption."""
        try:
            await self.limiter.sent(chat, entry)
        except BusError as exc:
            log.log(level_of(exc), "could not stamp the send to chat %s with its answer: %s",
                    chat, exc)  # fmt: skip

    async def _delivered(self, chat: int, notice: Notice) -> None:
        self._count(delivered=1)
        if self._metrics is not None:
            self._metrics.delivered(notice, chat)
        try:  # the streak of 429s ends; never worth sending the delivered notice again
            await end_streak(self.bus, chat, queue=self.queue)
        except BusError as exc:
            log.log(level_of(exc), "could not clear the 429 streak of chat %s: %s", chat, exc)
