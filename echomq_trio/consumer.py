"""``Consumer``: N handler tasks fed by one claimer through a bounded memory channel.

Theory of operation:

* The claimer leases batches (one round trip each) only while there is room: at most
  ``concurrency + prefetch`` jobs are held at once, so a slow handler pushes back on claiming
  rather than growing a list. With nothing to claim it parks on the queue's wake list, on a client
  of its own, for at most a beat.
* Handlers run the user's function. Returning ``None`` acks; returning ``RetryIn`` schedules a
  retry after that delay; returning ``DeferIn`` puts the job back to wait without spending an
  attempt (a lane job keeps its place and its lane waits); returning ``Bury`` sends it to the
  dead set at once with a reason; raising retries with the consumer's
  backoff policy, and after ``max_attempts`` the job is dead with the exception's text.
  Raising ``StopConsumer`` stops the whole consumer (the job goes back to pending).
* A settler folds finished jobs into one ack round trip per burst; a renewer extends the leases of
  every held job each third of a lease, so a long handler is not reaped from under itself.
* Cancellation (shutdown): claiming stops at once; running handlers get ``grace_s`` to finish and
  are then cancelled; their outcomes are settled; then every job still held (running, cancelled
  or never started) goes back to pending in one round trip, without spending an attempt. A claim
  in flight is shielded (with a deadline) so the consumer always knows what it holds. A crash
  (kill -9) returns held jobs through lease expiry and the metronome's reaper instead.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import attrs
import trio

from echomq_trio import jobs
from echomq_trio.backoff import Exponential, Jitter, Policy, delay_ms
from echomq_trio.bus import Bus
from echomq_trio.checks import MAX_DELAY_MS
from echomq_trio.errors import BusError, ConnectionLost, RequestTimedOut
from echomq_trio.jobs import Job, Outcome
from echomq_trio.wire import Wire

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
SETTLE_BATCH = 512
DEFAULT_BACKOFF: Policy = Jitter(Exponential(1_000, 60_000))
SETTLE_TIME_S = 5.0  # after the grace period, the longest we spend settling and releasing


def _delay_ms(value: object) -> int:
    """A handler's delay: a number of ms, rounded up (never early) and kept within what the
    server's scores hold (0 to ``MAX_DELAY_MS``). Anything else is a ``TypeError`` where the
    handler builds it, so it counts as the handler's own error."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise TypeError(f"delay_ms must be a number of ms, got {value!r}")
    return int(min(max(0, math.ceil(value)), MAX_DELAY_MS))


@attrs.frozen
class RetryIn:
    """Returned by a handler: fail this attempt and try again after ``delay_ms``."""

    delay_ms: int = attrs.field(converter=_delay_ms)
    reason: str = "retry requested by handler"


@attrs.frozen
class Ack:
    """Returned by a handler: done, like returning ``None``, with a ``note`` for the queue's
    audit record (for example what the far side answered)."""

    note: str


@attrs.frozen
class Bury:
    """Returned by a handler: this job can never succeed (a permanent error). It goes to the dead
    set at once with ``reason``, where it can be listed and replayed."""

    reason: str


@attrs.frozen
class DeferIn:
    """Returned by a handler: not now, and not a failure. The job waits ``delay_ms`` without
    spending an attempt; a lane job keeps its place and its lane waits with it."""

    delay_ms: int = attrs.field(converter=_delay_ms)
    reason: str = "deferred by handler"


class StopConsumer(Exception):
    """Raised by a handler to stop its consumer (for a fatal condition such as a revoked
    credential). The job is handed back to pending; ``Consumer.run`` re-raises this."""


Handler = Callable[[Job], Awaitable[Ack | RetryIn | DeferIn | Bury | None]]


@attrs.define
class ConsumerStats:
    """Counters since the consumer started (a snapshot from ``Consumer.statistics``)."""

    claimed: int = 0
    acked: int = 0
    retried: int = 0
    deferred: int = 0
    dead: int = 0
    stale: int = 0
    released: int = 0
    lost_leases: int = 0
    held: int = 0


@attrs.frozen
class _Done:
    job: Job
    kind: str = "ack"  # ack | retry | defer | bury
    delay_ms: int = 0
    error: str = ""  # the error of a retry, the reason of a bury, or the note of an ack


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


class Consumer:
    """Drains one queue with ``concurrency`` handler tasks. Run it with ``await consumer.run()``
    inside a nursery (``nursery.start(consumer.run)`` returns once it is claiming); cancel the
    nursery to stop it cleanly."""

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
        self.prefetch = concurrency if prefetch is None else prefetch
        self.claim_batch = claim_batch or concurrency + self.prefetch
        self.lease_ms = lease_ms
        self.beat_ms = beat_ms
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.grace_s = grace_s
        self._max_held = concurrency + self.prefetch
        self._held: dict[str, Job] = {}
        self._stats = ConsumerStats()
        self._stopping = False

    def statistics(self) -> ConsumerStats:
        return attrs.evolve(self._stats, held=len(self._held))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and handle jobs until cancelled; then shut down as described above."""
        self._stopping = False
        slots = trio.Semaphore(self._max_held)
        work_send, work_recv = trio.open_memory_channel[Job](self._max_held)
        done_send, done_recv = trio.open_memory_channel[_Done](self._max_held)
        handler_scope = trio.CancelScope()
        shield = trio.CancelScope(shield=True)

        def begin_stop() -> None:
            if not self._stopping:
                self._stopping = True
                now = trio.current_time()
                handler_scope.deadline = now + self.grace_s
                shield.deadline = now + self.grace_s + SETTLE_TIME_S

        try:
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
        except BaseExceptionGroup as group:
            stop = group.subgroup(StopConsumer)
            if stop is not None:
                raise _first(stop) from group
            raise
        finally:
            await self._release_held()

    async def _watch(self, begin_stop: Callable[[], None]) -> None:
        try:
            await trio.sleep_forever()
        finally:
            begin_stop()

    async def _shielded(self, call: Callable[[], Awaitable[T]]) -> T:
        # A request whose answer we must see (a claim: otherwise we would hold jobs unknowingly).
        timeout = self.bus.wire.spec.timeout_ms / 1000 + 1
        with trio.CancelScope(shield=True, deadline=trio.current_time() + timeout):
            return await call()
        raise RequestTimedOut("shielded request passed its deadline")

    async def _claim_loop(
        self, work_send: trio.MemorySendChannel[Job], parker: Wire, slots: trio.Semaphore
    ) -> None:
        wake = self.bus.keys(self.queue).wake
        errors = 0
        async with work_send:
            while True:
                await slots.acquire()
                want = 1
                while want < self.claim_batch and slots.value > 0:
                    slots.acquire_nowait()
                    want += 1
                try:
                    claimed = await self._shielded(
                        partial(jobs.claim, self.bus, self.queue, want, self.lease_ms)
                    )
                except (ConnectionLost, RequestTimedOut) as exc:
                    for _ in range(want):
                        slots.release()
                    errors += 1
                    log.warning("claim on %s failed (%s); retrying", self.queue, exc)
                    await trio.sleep(min(0.05 * 2**errors, 1.0))
                    continue
                errors = 0
                for _ in range(want - len(claimed)):
                    slots.release()
                self._stats.claimed += len(claimed)
                for job in claimed:
                    self._held[job.id] = job
                    work_send.send_nowait(job)
                if len(claimed) < want:
                    try:
                        await parker.blpop(wake, self.beat_ms / 1000)
                    except (ConnectionLost, RequestTimedOut):
                        await trio.sleep(min(self.beat_ms / 1000, 0.5))

    async def _handler_loop(
        self, work: trio.MemoryReceiveChannel[Job], done: trio.MemorySendChannel[_Done]
    ) -> None:
        async with work, done:
            async for job in work:
                if self._stopping:
                    continue  # never start a job while stopping; it is released at the end
                try:
                    result = await self.handler(job)
                except StopConsumer:
                    raise
                except Exception as exc:
                    text = f"{type(exc).__name__}: {exc}"
                    wait = delay_ms(self.backoff, max(job.attempts, 1))
                    await done.send(_Done(job, "retry", wait, text))
                else:
                    if result is None:
                        await done.send(_Done(job))
                    elif isinstance(result, Ack):
                        await done.send(_Done(job, "ack", 0, result.note))
                    elif isinstance(result, Bury):
                        await done.send(_Done(job, "bury", 0, result.reason))
                    elif isinstance(result, DeferIn):
                        await done.send(_Done(job, "defer", max(0, result.delay_ms), result.reason))
                    else:
                        await done.send(_Done(job, "retry", max(0, result.delay_ms), result.reason))

    async def _persist(self, call: Callable[[], Awaitable[T]]) -> T:
        # Settling must not be lost to a blip: retry through connection trouble until it goes
        # through or the shutdown deadline cancels us (then the job is released or reaped).
        errors = 0
        while True:
            try:
                return await call()
            except (ConnectionLost, RequestTimedOut) as exc:
                errors += 1
                log.warning("settling on %s failed (%s); retrying", self.queue, exc)
                await trio.sleep(min(0.05 * 2**errors, 1.0))

    async def _settle_loop(
        self, done: trio.MemoryReceiveChannel[_Done], slots: trio.Semaphore
    ) -> None:
        async with done:
            async for first in done:
                batch = [first]
                while len(batch) < SETTLE_BATCH:
                    try:
                        batch.append(done.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if any(d.kind == "ack" for d in batch):
                    items = [(d.job.id, d.job.token, d.error) for d in batch if d.kind == "ack"]
                    outcomes = await self._persist(
                        partial(jobs.ack_many, self.bus, self.queue, items)
                    )
                    for o in outcomes:
                        if o is Outcome.ACKED:
                            self._stats.acked += 1
                        else:
                            self._stats.stale += 1
                for d in batch:
                    if d.kind in ("retry", "bury"):
                        await self._settle_retry(d)
                    elif d.kind == "defer":
                        await self._settle_defer(d)
                for d in batch:
                    if self._held.pop(d.job.id, None) is not None:
                        slots.release()

    async def _settle_defer(self, d: _Done) -> None:
        outcome = await self._persist(
            partial(jobs.defer, self.bus, self.queue, d.job.id, d.job.token, d.delay_ms, d.error)
        )
        if outcome is Outcome.DEFERRED:
            self._stats.deferred += 1
        else:
            self._stats.stale += 1

    async def _settle_retry(self, d: _Done) -> None:
        outcome = await self._persist(
            partial(
                jobs.retry,
                self.bus,
                self.queue,
                d.job.id,
                d.job.token,
                d.delay_ms,
                1 if d.kind == "bury" else self.max_attempts,
                d.error,
                buried=d.kind == "bury",
            )
        )
        if outcome is Outcome.SCHEDULED:
            self._stats.retried += 1
        elif outcome is Outcome.DEAD:
            self._stats.dead += 1
            log.warning(
                "job %s on %s is dead after %d attempts: %s",
                d.job.id,
                self.queue,
                d.job.attempts,
                d.error,
            )
        else:
            self._stats.stale += 1

    async def _renew_loop(self, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                await trio.sleep(self.lease_ms / 3000)
                items = [(j.id, j.token) for j in self._held.values()]
                if not items:
                    continue
                try:
                    result = await jobs.extend(self.bus, self.queue, items, self.lease_ms)
                except BusError as exc:
                    log.warning("lease renewal on %s failed: %s", self.queue, exc)
                    continue
                self._stats.lost_leases += len(result.lost)

    async def _release_held(self) -> None:
        if not self._held:
            return
        items = [(j.id, j.token) for j in self._held.values()]
        with trio.CancelScope(shield=True, deadline=trio.current_time() + SETTLE_TIME_S):
            try:
                self._stats.released += await jobs.release(self.bus, self.queue, items)
                self._held.clear()
            except BusError as exc:
                log.warning(
                    "could not release %d jobs on %s (%s); they return when their leases expire",
                    len(items),
                    self.queue,
                    exc,
                )


def _first(group: BaseExceptionGroup[StopConsumer]) -> StopConsumer:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        return exc
    raise AssertionError("empty exception group")  # pragma: no cover
