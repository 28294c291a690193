"""``Consumer``: N handler tasks fed by one claimer through a bounded memory channel.

Theory of operation:

* The claimer leases batches (one round trip each) only while there is room: at most
  ``concurrency + prefetch`` jobs are held at once, so a slow handler pushes back on claiming
  rather than growing a list. Untuned (no ``prefetch``), it holds ahead of the handlers about
  ``AHEAD_S`` of their work at the pace they finish jobs (``claim_window.HoldAhead``: from
  ``concurrency`` up to ``ADAPTIVE_PREFETCH``; the claimer keeps the slots it does not want),
  and the claim batch follows the backlog (``claim_window.ClaimWindow``): it doubles while claims
  come back full and halves while they come back short, up to ``ADAPTIVE_CLAIM_BATCH``. So a
  deep queue is drained in large batches with fast handlers far ahead, and neither a shallow
  queue nor slow handlers let one consumer hoard jobs while another idles. With nothing to
  claim it parks on the queue's wake list, on a client of its own, for at most a beat.
* Handlers run the user's function. Returning ``None`` acks; returning ``RetryIn`` schedules a
  retry after that delay; returning ``DeferIn`` puts the job back to wait without spending an
  attempt (a lane job keeps its place and its lane waits); returning ``Bury`` sends it to the
  dead set at once with a reason; raising retries with the consumer's
  backoff policy, and after ``max_attempts`` the job is dead with the exception's text.
  Raising ``StopConsumer`` stops the whole consumer (the job goes back to pending). The mapping
  from result to transition is ``settlement.decide``, pure; this module only runs what it says.
* A settler folds finished jobs into one ack round trip per burst, at most ``SETTLE_BATCH`` a
  round trip (retries, deferrals and burials one round trip each); a renewer extends the leases
  of every held job each third of a lease, so a long handler is not reaped from under itself.
  A claim or a settlement that meets connection trouble is tried again
  (``backoff.reconnect_delay_s``); a second try of a settlement the server did run is refused
  by the lease token, so no job is settled twice.
* Cancellation (shutdown): claiming stops at once; running handlers get ``grace_s`` to finish and
  are then cancelled; their outcomes are settled; then every job still held (running, cancelled
  or never started) goes back to pending in one round trip, without spending an attempt. A claim
  in flight is shielded (with a deadline) so the consumer always knows what it holds, and a
  handler that finished is always settled (its result is queued without a checkpoint). A crash
  (kill -9), or a release the server never answers, returns held jobs through lease expiry and
  the metronome's reaper instead. ``tests/echomq_trio/test_cancellations.py`` cancels and fails
  every call to the server in turn and checks that no job is lost or settled twice.
* Scheduled jobs, retries and recurring schedules become claimable only when a metronome moves
  them. A consumer that idles looks, at most once per ``OVERDUE_BEATS`` beats, whether a
  scheduled job or a repeat is overdue by more than that many beats (``ZCOUNT`` on the two
  sorted sets: O(log n)); if one is, no metronome serves the queue, and it says so once in the
  log. A ``Worker`` runs a metronome beside its consumers and turns the check off.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TypeVar

import attrs
import trio

from echomq_trio import jobs, leases
from echomq_trio.backoff import Exponential, Jitter, Policy
from echomq_trio.bus import Bus
from echomq_trio.claim_window import ClaimWindow, HoldAhead
from echomq_trio.errors import BusError, ConnectionLost, RequestTimedOut, raising_first
from echomq_trio.jobs import Job, Outcome
from echomq_trio.metrics import BusMetrics
from echomq_trio.settlement import (
    Ack,
    AckJob,
    Bury,
    BuryJob,
    DeferIn,
    DeferJob,
    HandlerResult,
    RetryIn,
    RetryJob,
    SettlePolicy,
    Transition,
    decide,
)
from echomq_trio.transport import Transport

__all__ = [
    "Ack",
    "Bury",
    "Consumer",
    "ConsumerStats",
    "DeferIn",
    "Handler",
    "RetryIn",
    "StopConsumer",
]

log = logging.getLogger("echomq_trio.consumer")

T = TypeVar("T")
SETTLE_BATCH = 128  # the most acks per round trip (128 flat jobs cost the server about 1 ms)
DEFAULT_BACKOFF: Policy = Jitter(Exponential(1_000, 60_000))
SETTLE_TIME_S = leases.SETTLE_TIME_S  # after the grace period, the longest settling takes
ADAPTIVE_PREFETCH = 512  # untuned, the most jobs claimed ahead of the handlers
ADAPTIVE_CLAIM_BATCH = 128  # untuned, the most jobs per claim (about 1 ms of the server's time)
AHEAD_S = 0.05  # untuned, the handlers' work held ahead of them (at their recent pace)
PACE_SPAN_S = 0.05  # the shortest span over which their pace is measured
OVERDUE_BEATS = 5  # a due job this many beats late means no metronome runs; checked as often


class StopConsumer(Exception):
    """Raised by a handler to stop its consumer (for a fatal condition such as a revoked
    credential). The job is handed back to pending; ``Consumer.run`` re-raises this."""


Handler = Callable[[Job], Awaitable[HandlerResult]]


@attrs.frozen
class ConsumerStats:
    """Counters since the consumer started: a frozen snapshot from ``Consumer.statistics``."""

    claimed: int = 0
    acked: int = 0
    retried: int = 0
    deferred: int = 0
    dead: int = 0
    stale: int = 0  # settlements the server refused: the lease was no longer this consumer's
    released: int = 0
    lost_leases: int = 0
    held: int = 0


@attrs.frozen
class _Settle:
    job: Job
    transition: Transition


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


class Consumer:
    """Drains one queue with ``concurrency`` handler tasks. Run it with ``await consumer.run()``
    inside a nursery (``nursery.start(consumer.run)`` returns once it is claiming); cancel the
    nursery to stop it cleanly. With ``metrics`` (``echomq_trio.metrics.BusMetrics``) it observes
    its claim batch sizes and the jobs it settles; without, nothing."""

    def __init__(
        self,
        bus: Bus,
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 10,
        prefetch: int | None = None,
        claim_batch: int | None = None,
        lease_ms: int = 30_000,
        beat_ms: int = 1_000,
        max_attempts: int = 3,
        backoff: Policy = DEFAULT_BACKOFF,
        grace_s: float = 5.0,
        metrics: BusMetrics | None = None,
        metronome_check: bool = True,
    ) -> None:
        bus.keys(queue)  # validates the name
        for name, value in [
            ("concurrency", concurrency),
            ("lease_ms", lease_ms),
            ("beat_ms", beat_ms),
            ("max_attempts", max_attempts),
        ]:
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            _check_positive(name, value)
        if grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s}")
        self.bus = bus
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        # Untuned (prefetch None): jobs held ahead at the handlers' pace (HoldAhead, up to
        # ADAPTIVE_PREFETCH), and the claim window follows the backlog (ClaimWindow, up to
        # ADAPTIVE_CLAIM_BATCH): doubling while claims come back full, halving while short.
        self.adaptive = prefetch is None
        self.prefetch = max(ADAPTIVE_PREFETCH, concurrency) if prefetch is None else prefetch
        most = min(concurrency + self.prefetch, ADAPTIVE_CLAIM_BATCH) if self.adaptive else None
        self.claim_batch = claim_batch or most or concurrency + self.prefetch
        self._ahead = (
            HoldAhead(least=concurrency, most=self.prefetch, horizon_s=AHEAD_S, span_s=PACE_SPAN_S)
            if self.adaptive
            else None
        )
        self._window = ClaimWindow(
            least=min(2 * concurrency, self.claim_batch) if self.adaptive else self.claim_batch,
            most=self.claim_batch,
        )
        self.lease_ms = lease_ms
        self.beat_ms = beat_ms
        self.policy = SettlePolicy(max_attempts, backoff)
        self.grace_s = grace_s
        self._max_held = concurrency + self.prefetch
        self._held: dict[str, Job] = {}  # bounded: at most _max_held (the claim's semaphore)
        self._stats = ConsumerStats()
        self._stopping = False
        # When idle, look now and then for overdue scheduled jobs (no metronome); warn once.
        self._metronome_check = metronome_check
        self._next_check = 0.0
        # Process-local instruments (echomq_trio.metrics), bound to this queue once; None: none.
        self._claim_sizes = None if metrics is None else metrics.claim_batch.labels(queue)
        self._settled = None if metrics is None else metrics.settled(queue)

    @property
    def max_attempts(self) -> int:
        return self.policy.max_attempts

    @property
    def backoff(self) -> Policy:
        return self.policy.backoff

    def statistics(self) -> ConsumerStats:
        """A snapshot of the counters, and how many jobs are held now."""
        return attrs.evolve(self._stats, held=len(self._held))

    def _count(self, **more: int) -> None:
        s = self._stats
        self._stats = attrs.evolve(s, **{name: getattr(s, name) + n for name, n in more.items()})

    def _count_settled(self, outcomes: Mapping[str, int]) -> None:
        self._count(**outcomes)
        if self._settled is not None:
            for name, n in outcomes.items():
                self._settled[name].inc(n)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and handle jobs until cancelled; then shut down as described above."""
        self._stopping = False
        slots = trio.Semaphore(self._max_held)
        work_send, work_recv = trio.open_memory_channel[Job](self._max_held)
        done_send, done_recv = trio.open_memory_channel[_Settle](self._max_held)
        handler_scope = trio.CancelScope()
        shield = trio.CancelScope(shield=True)

        def begin_stop() -> None:
            if not self._stopping:
                self._stopping = True
                now = trio.current_time()
                handler_scope.deadline = now + self.grace_s
                shield.deadline = now + self.grace_s + SETTLE_TIME_S

        try:
            with raising_first(StopConsumer):
                async with self.bus.wire.blocking() as parker, trio.open_nursery() as outer:
                    outer.start_soon(self._claim_loop, work_send, parker, slots)
                    outer.start_soon(self._watch, begin_stop)
                    task_status.started()
                    with shield:
                        async with trio.open_nursery() as core:
                            core.start_soon(self._settle_loop, done_recv, slots)
                            renew_scope = trio.CancelScope()
                            core.start_soon(self._renew_loop, renew_scope)
                            with handler_scope:
                                async with trio.open_nursery() as handlers, done_send, work_recv:
                                    for _ in range(self.concurrency):
                                        handlers.start_soon(
                                            self._handler_loop, work_recv.clone(), done_send.clone()
                                        )
                            renew_scope.cancel()
                    outer.cancel_scope.cancel()
        finally:
            await self._release_held()

    async def _watch(self, begin_stop: Callable[[], None]) -> None:
        try:
            await trio.sleep_forever()
        finally:
            begin_stop()

    async def _claim_loop(
        self, work_send: trio.MemorySendChannel[Job], parker: Transport, slots: trio.Semaphore
    ) -> None:
        wake = self.bus.keys(self.queue).wake
        self._next_check = trio.current_time() + OVERDUE_BEATS * self.beat_ms / 1000
        kept = 0  # slots the claimer keeps back: held ahead, only what the handlers' pace wants
        async with work_send:
            while True:
                kept = await self._wait_for_room(slots, kept)
                claimed, want = await leases.claim_for_slots(
                    self.bus, self.queue, slots, self._window.size, self.lease_ms
                )
                self._window.claimed(want, len(claimed))
                self._count(claimed=len(claimed))
                if self._claim_sizes is not None and claimed:
                    self._claim_sizes.observe(len(claimed))
                for job in claimed:
                    self._held[job.id] = job
                if self._stopping:
                    return  # the handlers may be gone; what we hold is released at the end
                for job in claimed:
                    work_send.send_nowait(job)
                if len(claimed) < want:
                    await self._look_for_overdue_jobs()
                    try:
                        await parker.blpop(wake, self.beat_ms / 1000)
                    except (ConnectionLost, RequestTimedOut):
                        await trio.sleep(min(self.beat_ms / 1000, 0.5))

    async def _wait_for_room(self, slots: trio.Semaphore, kept: int) -> int:
        """Untuned: keep back the free slots beyond what the handlers' pace wants ahead (give
        back those it now wants), and wait until a slot is free beyond them, deciding anew each
        time one frees: when the handlers slow down, the slots their finished jobs free are
        kept, and the jobs held fall to what their pace wants. Returns how many the claimer
        keeps. Tuned: at once (``claim_for_slots`` waits for a slot)."""
        if self._ahead is None:
            return kept
        while True:
            self._ahead.observe(trio.current_time(), self._stats.claimed - len(self._held))
            want_kept = self.prefetch - self._ahead.allowance
            while kept < want_kept and slots.value > 0:
                slots.acquire_nowait()
                kept += 1
            while kept > want_kept:
                slots.release()
                kept -= 1
            if slots.value > 0:
                return kept
            await slots.acquire()  # one is free again: give it back, and decide anew
            slots.release()

    async def _look_for_overdue_jobs(self) -> None:
        if not self._metronome_check or trio.current_time() < self._next_check:
            return
        self._next_check = trio.current_time() + OVERDUE_BEATS * self.beat_ms / 1000
        k = self.bus.keys(self.queue)
        try:
            late = await self.bus.wire.server_time_ms() - OVERDUE_BEATS * self.beat_ms
            overdue = [
                int(await self.bus.wire.command("ZCOUNT", key, "-inf", str(late)))
                for key in (k.schedule, k.repeats)
            ]
        except BusError:
            return  # best effort: the next idle moment looks again
        if any(overdue):
            self._metronome_check = False
            log.warning(
                "consumer on %s: %d scheduled jobs and %d recurring schedules are overdue by "
                "more than %d ms: no metronome serves this queue, so they never run. Serve it "
                "with echomq_trio.Worker, or start a Metronome for it.",
                self.queue,
                *overdue,
                OVERDUE_BEATS * self.beat_ms,
            )

    async def _handler_loop(
        self, work: trio.MemoryReceiveChannel[Job], done: trio.MemorySendChannel[_Settle]
    ) -> None:
        async with work, done:
            async for job in work:
                if self._stopping:
                    continue  # never start a job while stopping; it is released at the end
                result: HandlerResult | Exception
                try:
                    result = await self.handler(job)
                except StopConsumer:
                    raise
                except Exception as exc:
                    result = exc
                # Never blocks (room for every held job), so no cancellation can come between a
                # finished handler and its settlement.
                done.send_nowait(_Settle(job, decide(result, job, self.policy)))

    async def _persist(self, call: Callable[[], Awaitable[T]]) -> T:
        # Settling must not be lost to a blip: retry through connection trouble until it goes
        # through or the shutdown deadline cancels us (then the job is released or reaped).
        return await leases.persist(self.queue, call)

    async def _settle_loop(
        self, done: trio.MemoryReceiveChannel[_Settle], slots: trio.Semaphore
    ) -> None:
        async with done:
            async for first in done:
                batch = [first]
                while len(batch) < SETTLE_BATCH:
                    try:
                        batch.append(done.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                await self._settle(batch)
                for d in batch:
                    if self._held.pop(d.job.id, None) is not None:
                        slots.release()

    async def _settle(self, batch: list[_Settle]) -> None:
        """Run a batch's transitions: every ack in one round trip, then the rest in order (their
        scripts take one job each)."""
        acks = [
            (d.job.id, d.job.token, d.transition.note)
            for d in batch
            if isinstance(d.transition, AckJob)
        ]
        if acks:
            outcomes = await self._persist(partial(jobs.ack_many, self.bus, self.queue, acks))
            self._count_settled(Counter(leases.COUNTER[o] for o in outcomes))
        for d in batch:
            job = d.job
            match d.transition:
                case AckJob():
                    continue
                case RetryJob(delay_ms=wait, error=error, max_attempts=most):
                    call = partial(
                        jobs.retry, self.bus, self.queue, job.id, job.token, wait, most, error
                    )
                case DeferJob(delay_ms=wait, reason=error):
                    call = partial(jobs.defer, self.bus, self.queue, job.id, job.token, wait, error)
                case BuryJob(reason=error):
                    call = partial(
                        jobs.retry,
                        self.bus,
                        self.queue,
                        job.id,
                        job.token,
                        0,
                        1,
                        error,
                        buried=True,
                    )
            outcome = await self._persist(call)
            self._count_settled({leases.COUNTER[outcome]: 1})
            if outcome is Outcome.DEAD:
                log.warning(
                    "job %s on %s is dead after %d attempts: %s",
                    job.id,
                    self.queue,
                    job.attempts,
                    error,
                )

    async def _renew_loop(self, scope: trio.CancelScope) -> None:
        with scope:
            await leases.renew(self.bus, self.queue, self._held, self.lease_ms,
                               lambda n: self._count(lost_leases=n))  # fmt: skip

    async def _release_held(self) -> None:
        self._count(released=await leases.release(self.bus, self.queue, self._held))
