"""``NotificationWorker``: the consumer of ``cm.notify``: per-chat lane tasks fed by one claimer.

Theory of operation:

* One claimer leases notices in batches (one round trip each) while the worker holds fewer than
  ``concurrency``, and hands each to the task of its chat (its lane) over that chat's bounded
  memory channel, starting the task when the chat has none. A chat task lives while its chat
  has work and ends after ``idle_s`` without any; one nursery supervises them all. The lanes on
  the server have limit 1, so a chat has one notice in flight across every process: its task
  sends in the order the lane gives, and order holds across deferrals, retries and processes.
* A chat task decides with ``codemojex.notify.steps`` (pure) and carries the step out: a short
  wait for the rate limiter (``hold_max_ms``) is held in the task while the renewer extends the
  lease; a long one is deferred on the server (the lane waits, the notice keeps its place, no
  attempt spent). A 429 pauses the limiter (the chat, or everyone) the same way. A 5xx, no
  answer, or an answer that is not the Bot API's asks ``getMe`` whether Telegram is there at
  all: if not, it is an outage of the bot, not of the notice: the outage gate closes (no claims,
  every chat task waits at it holding its notice, no attempt spent) until a probe gets an
  answer. If Telegram is there, the failure was the chat's and costs the attempt (6 at most,
  backoff ``min(500·2^(a−1), 30000)`` ms with full jitter). The probe runs after the send's
  shielded part, so it is not cut short by the send's deadline; cancelled, it gives the notice
  back unspent. The gate also watches for requests left unanswered (``hang_after_s``). A chat
  answering 429 for ``stuck_after_ms`` in a row: its notice is dead with the reason.
* Cancel scopes: the worker's (cancel it to shut down) holds the claimer, the renewer, the
  prober and the chats' nursery. Each chat task runs in a scope of its own (``ChatLane.scope``):
  cancelling it ends that chat's task at its next wait; the notice it held but had not settled
  goes back to pending without spending an attempt. A send already on the wire is finished
  first (shielded, with a deadline) and settled, so a cancelled send is never delivered twice.
  Shutdown cancels every chat scope through the nursery; a chat whose notice was deferred
  long, buried or stuck ends its own scope at once instead of idling.
* Settling is one script per notice (ack, retry, defer, bury), tried again through connection
  trouble; the lease token refuses a second try of a settled job. On exit every held notice not
  settled goes back in one ``release`` (shielded, with a deadline). After ``kill -9`` the leases
  expire and the metronome's reaper returns the notices, still first in their lanes.
* After a repair or restore of the server's data (its append-only file cut at a damage, or an
  older copy put in place), notices delivered before it may be pending again. With a ``ledger``
  (``codemojex.audit.Ledger``), a chat task first asks it about a notice minted before that
  time: one the audit archive records as delivered is acked without sending, its note saying
  so, and counted (``already_delivered``).
"""

from __future__ import annotations

import logging
import random
from functools import partial
from typing import TYPE_CHECKING

import attrs
import trio

from codemojex.notify.migration import migrate_chat, migrations_key
from codemojex.notify.notice import DeliveryNote, Notice, decode, encode_note
from codemojex.notify.notifier import NOTIFY_QUEUE
from codemojex.notify.outage import DEFAULT_HANG_AFTER_S, OutageGate
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.steps import (
    Booked,
    Bury,
    Defer,
    Done,
    Flood,
    Follow,
    Hold,
    Outage,
    Probe,
    Retry,
    StepPolicy,
    Stop,
    after_answer,
    after_flood,
    after_probe,
    after_take,
    booking_missed,
)
from codemojex.stats import added
from codemojex.telegram.bot import TelegramBot
from codemojex.telegram.classify import RetryLater
from echomq_trio import (
    BusError,
    ConnectionLost,
    ConsumerStats,
    Job,
    Outcome,
    StopConsumer,
    jobs,
    leases,
)
from echomq_trio.backoff import delay_ms, reconnect_delay_s
from echomq_trio.bus import Bus
from echomq_trio.errors import RequestTimedOut, level_of
from echomq_trio.transport import Transport

if TYPE_CHECKING:
    from codemojex.audit.ledger import Ledger
    from codemojex.notify.metrics import NotifyMetrics

__all__ = ["ChatLane", "NotificationWorker", "WorkerStats"]

log = logging.getLogger("codemojex.notify.worker")

SETTLE_TIME_S = leases.SETTLE_TIME_S  # on shutdown, the longest a settlement takes
SEND_TIME_S = 15.0  # the longest a send on the wire is shielded (the bot's timeout is 10 s)
IDLE_S = 1.0  # a chat task with nothing to do for this long ends


@attrs.frozen
class WorkerStats:
    """What this worker did with the notices it handled (a snapshot from ``statistics()``)."""

    delivered: int = 0
    deferred: int = 0  # no rate-limit token soon enough: deferred on the server
    held: int = 0  # short waits held in a chat task instead
    booked: int = 0  # sends booked a little ahead, waited for in the chat task
    flood_waits: int = 0  # 429s from Telegram
    retried: int = 0
    migrated: int = 0
    dropped: int = 0  # buried: undeliverable, or stuck behind 429s
    outages: int = 0  # outages of Telegram this worker saw (``OutageGate.statistics()``)
    chat_tasks: int = 0  # chat tasks started
    already_delivered: int = 0  # acked unsent: the audit archive records them delivered
    fatal: str | None = None


@attrs.define(eq=False)
class ChatLane:
    """One chat's task: its inbox (the far end of the claimer's channel) and its cancel scope."""

    key: str
    inbox: trio.MemoryReceiveChannel[Job]
    outbox: trio.MemorySendChannel[Job]
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)


class NotificationWorker:
    """Run with ``nursery.start(worker.run)``; cancel to stop (notices in hand go back). With
    ``metrics`` (``codemojex.metrics.NotifyMetrics``) it observes its claims and settlements, and
    each delivery its delay; without, nothing. ``concurrency`` is how many notices (so chats) it
    holds at most: 8 by default, the best of 8/16/64 measured with tools/bench_notify.py (more
    chat tasks wake later for their booked slots, and late sends meet 429s; README).
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
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.beat_ms = beat_ms
        self.policy = policy or StepPolicy()
        self.idle_s = idle_s
        self.outage = OutageGate(bot, shared=limiter, hang_after_s=hang_after_s)
        self._stats = WorkerStats()
        self._bus_stats = ConsumerStats()
        self._rng = rng or random.Random()
        self._metrics = metrics
        self.ledger = ledger
        self._claim_sizes = None if metrics is None else metrics.bus.claim_batch.labels(queue)
        self._settled = None if metrics is None else metrics.bus.settled(queue)
        # On the server, not in this process: old chat id -> new chat id, one field per group
        # that Telegram upgraded to a supergroup (once each), so bounded by the group chats.
        self._migrations = migrations_key(bus, queue)
        self._lanes: dict[str, ChatLane] = {}  # at most `concurrency`: one per held notice
        self._held: dict[str, Job] = {}  # at most `concurrency` (the claimer's semaphore)
        self._slots = trio.Semaphore(concurrency)
        self._scope = trio.CancelScope()  # the worker's: cancelled to stop it for good
        self._stopped: StopConsumer | None = None

    def statistics(self) -> WorkerStats:
        return attrs.evolve(self._stats, outages=self.outage.statistics().outages)

    def bus_statistics(self) -> ConsumerStats:
        """The queue-side counters, as ``echomq_trio.Consumer.statistics()`` has them."""
        return attrs.evolve(self._bus_stats, held=len(self._held))

    def chats(self) -> list[str]:
        """The lanes (chats) that have a task now."""
        return list(self._lanes)

    def _count(self, **more: int) -> None:
        self._stats = added(self._stats, **more)

    def _count_bus(self, **more: int) -> None:
        self._bus_stats = added(self._bus_stats, **more)
        if self._settled is not None:
            for name, n in more.items():
                if name in self._settled:
                    self._settled[name].inc(n)

    # --- the tasks ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and deliver until cancelled; then shut down as described above. Raises
        ``StopConsumer`` when Telegram refuses the bot (its notices go back first)."""
        self._stopped = None
        self._scope = trio.CancelScope()
        try:
            with self._scope:
                async with self.bus.wire.blocking() as parker, trio.open_nursery() as nursery:
                    nursery.start_soon(self._renew_loop)
                    nursery.start_soon(self.outage.run)
                    async with trio.open_nursery() as chats:
                        chats.start_soon(self._claim_loop, parker, chats)
                        task_status.started()
        finally:
            await self._release_held()
        if self._stopped is not None:
            raise self._stopped

    def _stop(self, reason: str) -> None:
        """Telegram refuses the bot: stop the whole worker, as a shutdown, then say why."""
        self._stats = attrs.evolve(self._stats, fatal=reason)
        self._stopped = StopConsumer(f"Telegram refused the bot, stopping: {reason}")
        self._scope.cancel()

    async def _claim_loop(self, parker: Transport, chats: trio.Nursery) -> None:
        wake = self.bus.keys(self.queue).wake
        while True:
            await self.outage.wait_open()
            claimed, want = await leases.claim_for_slots(
                self.bus, self.queue, self._slots, self.concurrency, self.lease_ms
            )
            self._count_bus(claimed=len(claimed))
            if self._claim_sizes is not None and claimed:
                self._claim_sizes.observe(len(claimed))
            for job in claimed:
                self._held[job.id] = job
                self._lane(job, chats).outbox.send_nowait(job)
            if len(claimed) < want:
                try:
                    await parker.blpop(wake, self.beat_ms / 1000)
                except (ConnectionLost, RequestTimedOut):
                    await trio.sleep(min(self.beat_ms / 1000, 0.5))

    def _lane(self, job: Job, chats: trio.Nursery) -> ChatLane:
        """The task of ``job``'s chat, started if it has none. No checkpoint here: a task that
        ends while idle leaves ``_lanes`` only when its inbox is empty, in one step."""
        key = job.group or job.id
        lane = self._lanes.get(key)
        if lane is None:
            # Room for every notice the worker may hold: the claimer never blocks on one chat.
            outbox, inbox = trio.open_memory_channel[Job](self.concurrency)
            lane = self._lanes[key] = ChatLane(key, inbox, outbox)
            self._count(chat_tasks=1)
            chats.start_soon(self._chat_task, lane, name=f"chat {key}")
        return lane

    async def _chat_task(self, lane: ChatLane) -> None:
        try:
            with lane.scope:
                while True:
                    job: Job | None = None
                    with trio.move_on_after(self.idle_s):
                        job = await lane.inbox.receive()
                    if job is None:
                        try:
                            job = lane.inbox.receive_nowait()
                        except trio.WouldBlock:
                            return  # idle: `finally` takes the lane out before any checkpoint
                    await self._serve(lane, job)
        finally:
            if self._lanes.get(lane.key) is lane:
                del self._lanes[lane.key]

    async def _renew_loop(self) -> None:
        await leases.renew(self.bus, self.queue, self._held, self.lease_ms,
                           lambda n: self._count_bus(lost_leases=n))  # fmt: skip

    # --- one notice ----------------------------------------------------------------------------

    async def _serve(self, lane: ChatLane, job: Job) -> None:
        """Carry one notice through the steps until it is settled (or the scope is cancelled:
        then it stays held and goes back at the end). Connection trouble on the way (the
        limiter, the migration table) waits and goes on with the same notice; anything else
        unexpected costs the attempt, as a handler's exception does."""
        try:
            notice = decode(job.payload)
        except ValueError as exc:
            self._count(dropped=1)
            await self._settle(job, Bury(str(exc)))
            return
        if self.ledger is not None and await self._already_delivered(job, notice):
            return
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
            except Exception as exc:
                log.exception("notice %s: unexpected error", notice.id)
                step = Retry(delay_ms(self.policy.backoff, max(job.attempts, 1), self._rng),
                             f"{type(exc).__name__}: {exc}")  # fmt: skip
            await self._settle(job, step)
            if isinstance(step, Defer | Bury) and lane.inbox.statistics().current_buffer_used == 0:
                self._end(lane)  # paused, stuck or gone: the chat needs no task now
            return

    async def _already_delivered(self, job: Job, notice: Notice) -> bool:
        """Ack ``notice`` unsent if the ledger (the audit archive) records it delivered: the
        server's data went back since (see the module docstring)."""
        assert self.ledger is not None
        known = await self.ledger.delivered(notice.id or job.id)
        if known is None:
            return False
        self._count(already_delivered=1)
        log.info("notice %s not sent again: the audit archive records it delivered to %s "
                 "(message %s)", notice.id, known.chat, known.message_id)  # fmt: skip
        chat = notice.chat if known.chat is None else known.chat
        await self._settle(job, Done(known.message_id, chat=chat, already=True))
        return True

    def _end(self, lane: ChatLane) -> None:
        """End a chat's task at its next checkpoint (its inbox is empty: checked just before,
        with no checkpoint between): taken out of ``_lanes`` now, so the next notice for the
        chat starts a new task."""
        if self._lanes.get(lane.key) is lane:
            del self._lanes[lane.key]
        lane.scope.cancel()

    async def _attempt(self, job: Job, notice: Notice) -> Done | Retry | Bury | Defer:
        """The steps for one notice, up to what to settle it with. Only the waits (the gate, the
        limiter, a hold) are cancellable; a send and what its answer needs run to the end."""
        chat = await self._chat_for(notice.chat)
        followed = False
        booking = ""  # a booked slot to refine, or one this task woke too late for
        while True:
            await self.outage.wait_open()
            answer = await self.limiter.take(chat, book_ms=self.policy.hold_max_ms,
                                             booking=booking)  # fmt: skip
            passed_back, booking = booking, ""
            take = after_take(answer, self.policy)
            if isinstance(take, Booked):
                # The slot is `ms` after the take on the server's clock, and the take happened
                # between asking and the answer: wait from the answer, so the send is never
                # early, and count lateness from the answer too. Counted from the asking, the
                # take's own round trip made most bookings look late on a slow host, and the
                # hand-backs that followed ate the budget (bench_notify: 0.26 of it, and not
                # every notice delivered in the run).
                if not passed_back:
                    self._count(booked=1)
                answered = trio.current_time()
                if take.ask_ms:  # ask again nearer the slot: it may come forward
                    await trio.sleep(take.ask_ms / 1000)
                    booking = answer.entry
                    continue
                await trio.sleep(take.ms / 1000)
                late_ms = (trio.current_time() - answered) * 1000 - take.ms
                if booking_missed(late_ms, self.limiter.margin_ms):
                    booking = answer.entry
                    continue
            elif isinstance(take, Defer):
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
            step: Done | Retry | Bury | Defer | Hold | Follow | Probe | Stop | None = None
            with trio.CancelScope(shield=True, deadline=trio.current_time() + SEND_TIME_S):
                step = await self._exchange(job, notice, chat, answer.entry, followed)
                if isinstance(step, Done | Retry | Bury | Defer):
                    return step
                if isinstance(step, Follow):
                    followed = True
                    chat = step.new_chat_id
            if isinstance(step, Probe):
                probed = await self._probe(job, step)
                if isinstance(probed, Retry):
                    return probed
                # An outage: wait at the gate, then send again, no attempt spent.
            elif isinstance(step, Hold):
                await trio.sleep(step.ms / 1000)
            elif isinstance(step, Stop):
                self._stop(step.reason)
                await trio.sleep_forever()  # cancelled at once: the notice goes back

    async def _exchange(
        self, job: Job, notice: Notice, chat: int, entry: str, followed: bool
    ) -> Done | Retry | Bury | Defer | Hold | Follow | Probe | Stop:
        """Send once (taken from the limiter as ``entry``) and act on the answer: a step to
        settle with, or what to do before the next send (``Hold`` after a short 429, ``Follow``
        a migration, ``Probe`` whether Telegram answers at all)."""
        verdict = await self.bot.send_message(chat, notice.text, **notice.opts)
        if not (isinstance(verdict, RetryLater) and not verdict.answered):
            await self._sent(chat, entry)
        step = after_answer(verdict, job.attempts, self.policy, self._rng)
        if isinstance(step, Follow):
            if followed:
                return Retry(0, "migrated twice")
            self._count(migrated=1)
            # Recorded with the chat's room carried along: one script for every signal of it.
            await migrate_chat(self.bus, notice.chat, step.new_chat_id, queue=self.queue)
            log.info("chat %s migrated to %s", chat, step.new_chat_id)
            return step
        if isinstance(step, Flood):
            self._count(flood_waits=1)
            scope, _ = await self.limiter.pause("auto", chat, step.ms)
            flooded = await self._flooded_for_ms(chat) if scope == "chat" else 0
            after = after_flood(step.ms, flooded, self.policy)
            if isinstance(after, Hold):
                self._count(held=1)
                return after
            if isinstance(after, Defer):
                return Defer(after.ms, f"429 ({scope}): {step.reason}")
            step = after  # stuck: buried below, as an undeliverable notice is
        if isinstance(step, Done):
            await self._delivered(chat, notice)
            return attrs.evolve(step, chat=chat)
        if isinstance(step, Retry):
            self._count(retried=1)
            return step
        if isinstance(step, Bury):
            self._count(dropped=1)
            log.info("notice %s to %s dropped: %s", notice.id, chat, step.reason)
            return step
        return step  # Probe or Stop

    async def _probe(self, job: Job, probe: Probe) -> Retry | Outage:
        """Ask ``getMe`` whether Telegram answers the bot at all after a send failed as every
        chat's would: an ``Outage`` (the gate closes) or the chat's own failure (a ``Retry``).
        Not shielded: cancelled, the notice goes back unspent."""
        step = after_probe(not await self.bot.reachable(), probe, job.attempts, self.policy,
                           self._rng)  # fmt: skip
        if isinstance(step, Outage):
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
            await self.bus.wire.command("DEL", self._stuck_key(chat))
        except BusError as exc:
            log.log(level_of(exc), "could not clear the 429 streak of chat %s: %s", chat, exc)

    async def _chat_for(self, chat: int) -> int:
        moved = await self.bus.wire.command("HGET", self._migrations, str(chat))
        return int(moved) if moved is not None else chat

    def _stuck_key(self, chat: int) -> str:
        return self.bus.keys(self.queue).app(f"flooded:{chat}")

    async def _flooded_for_ms(self, chat: int) -> int:
        """How long ``chat`` has answered 429 without a delivery in between (server clock: the
        key is set with a lifetime of twice the cap at the first 429, and its remaining lifetime
        tells the time since; a delivery deletes it)."""
        ttl = 2 * self.policy.stuck_after_ms
        key = self._stuck_key(chat)
        await self.bus.wire.command("SET", key, "1", "NX", "PX", str(ttl))
        left = await self.bus.wire.command("PTTL", key)
        return max(0, ttl - int(left)) if isinstance(left, int) and left >= 0 else 0

    # --- settling ----------------------------------------------------------------------------

    async def _settle(self, job: Job, step: Done | Retry | Bury | Defer) -> None:
        """One script for the notice, shielded with a deadline so that a shutdown does not cut
        it off, and tried again through connection trouble."""
        match step:
            case Done(message_id=mid, chat=chat, already=already):
                note = encode_note(DeliveryNote(chat, mid, already_delivered=already))
                call = partial(jobs.ack, self.bus, self.queue, job.id, job.token, note)
            case Retry(ms=wait, reason=why):
                call = partial(jobs.retry, self.bus, self.queue, job.id, job.token, wait,
                               self.policy.max_attempts, why)  # fmt: skip
            case Defer(ms=wait, reason=why):
                call = partial(jobs.defer, self.bus, self.queue, job.id, job.token, wait, why)
            case Bury(reason=why):
                call = partial(jobs.retry, self.bus, self.queue, job.id, job.token, 0, 1, why,
                               buried=True)  # fmt: skip
        while True:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + SETTLE_TIME_S):
                outcome = await leases.persist(self.queue, call)
                self._count_bus(**{leases.COUNTER[outcome]: 1})
                if outcome is Outcome.DEAD and isinstance(step, Retry):
                    log.warning("notice job %s on %s is dead after %d attempts: %s",
                                job.id, self.queue, job.attempts, step.reason)  # fmt: skip
                if self._held.pop(job.id, None) is not None:
                    self._slots.release()
                return
            # Not settled within the deadline: raises Cancelled when shutting down (the notice
            # is released or reaped), else tries again.
            await trio.lowlevel.checkpoint()

    async def _release_held(self) -> None:
        self._count_bus(released=await leases.release(self.bus, self.queue, self._held))
