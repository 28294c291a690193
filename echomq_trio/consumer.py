"""``Consumer``: N handler tasks fed by one claimer through a bounded memory channel.

Theory of operation:

* The claimer leases batches (one round trip each) only while there is room: at most
  ``concurrency + prefetch`` jobs are held at once, so a slow handler pushes back on claiming
  rather than growing a list. Untuned (no ``prefetch``), it holds ahead of the handlers about
  ``AHEAD_S`` of their work at the pace they finish jobs (``_claim_window.HoldAhead``: from
  ``concurrency`` up to ``ADAPTIVE_PREFETCH``; the claimer keeps the slots it does not want),
  and the claim batch follows the backlog (``_claim_window.ClaimWindow``): it doubles while claims
  come back full and halves while they come back short, up to ``ADAPTIVE_CLAIM_BATCH``. So a
  deep queue is drained in large batches with fast handlers far ahead, and neither a shallow
  queue nor slow handlers let one consumer hoard jobs while another idles. With nothing to
  claim it parks on the queue's wake list, on a client of its own, for at most a beat.
* Handlers run the user's function. Returning ``None`` acks; returning ``RetryIn`` schedules a
  retry after that delay; returning ``DeferIn`` puts the job back to wait without spending an
  attempt (a lane job keeps its place and its lane waits); returning ``Bury`` sends it to the
  dead set at once with a reason; raising retries with the consumer's
  backoff policy, and after ``max_attempts`` the job is dead with the exception's text.
  Raising ``StopConsumer`` stops the whole consumer: every other handler is cancelled at once,
  what already finished is settled, and the job goes back to pending with the rest. The mapping
  from result to transition is ``settlement.decide``, pure; this module only runs what it says.
* Per-lane dispatch (``per_lane=True``): instead of ``concurrency`` handler tasks sharing one
  channel, a dispatcher hands each claimed job to the task of its lane (``job.group``; a job of
  no lane is a lane of its own) over that lane's bounded memory channel, starting the task when
  the lane has none. A lane's task handles its jobs one after another, in the order they came,
  and ends after ``lane_idle_s`` without work, or at once when it deferred or buried a job and
  has nothing else (its lane waits on the server, or is stuck); each runs in a cancel scope of
  its own under one nursery. At most ``concurrency`` handlers run at once across the lanes (a
  ``trio.CapacityLimiter``, first come first served). With the lanes' limit 1 on the server a
  lane has one job in flight across every process, so its task is the lane's one place of work.
* A claim gate (``claim_gate``, an async callable) is awaited before every claim: while it
  waits, the consumer claims nothing (an outage of what the handlers talk to holds every claim).
* A handler's result (``Ack(result=...)``, or a returned ``str``/``bytes``) goes with its ack:
  the acks of a burst with results are one more round trip beside those without (which run the
  plain ack, as before results existed); the queue keeps them if it keeps results
  (``jobs.keep_results``). A handler reports progress with ``await job.progress(value)``: the
  consumer keeps each job's latest value and writes every job's news in one round trip at most
  every ``progress_interval_s``, from a task started at the first report (``_progress``); the
  news of jobs about to be settled is written first.
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
  handler that finished is always settled (its result is queued without a checkpoint), with
  ``SETTLE_TIME_S`` for it from the moment the last handler is done (a handler may shield a
  step it must finish, such as a message on the wire, beyond the grace period). A crash
  (kill -9), or a release the server never answers, returns held jobs through lease expiry and
  the metronome's reaper instead. ``tests/echomq_trio/test_cancellations.py`` cancels and fails
  every call to the server in turn and checks that no job is lost or settled twice.
* Cancel and timeouts: each handler task runs its jobs in a cancel scope that serves job after
  job and is made anew only once it was cancelled (a scope per job cost the hot path more than
  the rest of a no-op job's turn in the handler). While handlers run, a watcher asks the server
  every ``cancel_poll_s`` in one round trip (``ZMSCORE`` of the queue's cancel marks) whether
  any of their jobs was cancelled (``jobs.cancel``, from any process; it asks nothing while no
  handler runs), and cancels those handlers: the handler sees ``trio.Cancelled`` (cleanup
  under a shield with a deadline works), and the consumer settles nothing for the job (the
  cancel took its lease), counting it ``cancelled``; the task goes on with a new scope. A
  renewal that finds a lease gone (cancelled, or reaped and claimed elsewhere) stops that
  handler the same way (counted in ``lost_leases``), and a held job not yet started whose
  lease is gone is never started. A job's deadline (its ``timeout_ms`` from enqueue, else the
  consumer's ``timeout_s``) is its scope's while it runs: a handler past it is cancelled and
  the attempt fails with ``settlement.TimedOut`` ("timed out after N ms"), so
  ``max_attempts`` and the backoff apply; the lease is renewed meanwhile as for any handler.
* Scheduled jobs, retries and recurring schedules become claimable only when a metronome moves
  them. A consumer that idles looks, at most once per ``OVERDUE_BEATS`` beats, whether a
  scheduled job or a repeat is overdue by more than that many beats (``ZCOUNT`` on the two
  sorted sets: O(log n)); if one is, no metronome serves the queue, and it says so once in the
  log. A ``Worker`` runs a metronome beside its consumers and turns the check off.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TypeVar

import attrs
import trio

from echomq_trio import _leases, jobs, protocol
from echomq_trio._claim_window import ClaimWindow, HoldAhead
from echomq_trio._progress import PROGRESS_INTERVAL_S, ProgressBook
from echomq_trio.backoff import Exponential, Jitter, Policy
from echomq_trio.bus import Bus
from echomq_trio.errors import BusError, ConnectionLost, RequestTimedOut, level_of
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
    TimedOut,
    Transition,
    decide,
)
from echomq_trio.transport import Transport

__all__ = [
    "Ack",
    "Bury",
    "ClaimGate",
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
SETTLE_TIME_S = _leases.SETTLE_TIME_S  # after the grace period, the longest settling takes
ADAPTIVE_PREFETCH = 512  # untuned, the most jobs claimed ahead of the handlers
ADAPTIVE_CLAIM_BATCH = 128  # untuned, the most jobs per claim (about 1 ms of the server's time)
AHEAD_S = 0.05  # untuned, the handlers' work held ahead of them (at their recent pace)
PACE_SPAN_S = 0.05  # the shortest span over which their pace is measured
OVERDUE_BEATS = 5  # a due job this many beats late means no metronome runs; checked as often
LANE_IDLE_S = 1.0  # per-lane dispatch: a lane's task with nothing to do for this long ends
CANCEL_POLL_S = 0.5  # while handlers run, how often the consumer asks which were cancelled


class StopConsumer(Exception):
    """Raised by a handler to stop its consumer (for a fatal condition such as a revoked
    credential). The job is handed back to pending; ``Consumer.run`` re-raises this."""


Handler = Callable[[Job], Awaitable[HandlerResult]]
ClaimGate = Callable[[], Awaitable[None]]  # awaited before each claim; claims wait while it waits


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
    cancelled: int = 0  # handlers stopped because their job was cancelled (``jobs.cancel``)
    held: int = 0
    lane_tasks: int = 0  # per-lane dispatch: lane tasks started


@attrs.frozen
class _Forget:
    """Nothing to settle: the job's lease is gone (cancelled, or lost); ``counter`` is the
    ``ConsumerStats`` counter it adds to ('' for none)."""

    counter: str


@attrs.frozen
class _Settle:
    job: Job
    transition: Transition | _Forget


_CANCELLED = _Forget("cancelled")  # the watcher saw the job's cancel mark
_LOST = _Forget("")  # a renewal found its lease gone (counted there, in lost_leases)


@attrs.define(eq=False)
class _Lane:
    """One lane's task (per-lane dispatch): its inbox, the dispatcher's end of it, its scope."""

    key: str
    inbox: trio.MemoryReceiveChannel[Job]
    outbox: trio.MemorySendChannel[Job]
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


class Consumer:
    """Drains one queue with ``concurrency`` handler tasks. Run it with ``await consumer.run()``
    inside a nursery (``nursery.start(consumer.run)`` returns once it is claiming); cancel the
    nursery to stop it cleanly. With ``metrics`` (``echomq_trio.metrics.BusMetrics``) it observes
    its claim batch sizes and the jobs it settles; without, nothing. ``per_lane`` runs one task
    per lane instead of a pool of handlers (see the module's notes), ``lane_idle_s`` is how long
    such a task waits for more work before it ends, ``claim_gate`` is awaited before every
    claim, and ``progress_interval_s`` is the least time between two writes of its handlers'
    progress (``Job.progress``). ``timeout_s`` is the deadline of a handler whose job has no
    ``timeout_ms`` of its own (``None``: none), and ``cancel_poll_s`` how often, while handlers
    run, the consumer asks the server whether any of their jobs was cancelled (see the module's
    notes). ``metrics_queue`` is the ``queue`` label of its metrics (default: ``queue``): a
    partitioned queue's consumers (``partitions.PartitionedConsumer``) count under the queue's
    name, one series for the queue however many partitions it has."""

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
        per_lane: bool = False,
        lane_idle_s: float = LANE_IDLE_S,
        claim_gate: ClaimGate | None = None,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
        timeout_s: float | None = None,
        cancel_poll_s: float = CANCEL_POLL_S,
        metrics_queue: str | None = None,
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
        _check_positive("lane_idle_s", lane_idle_s)
        _check_positive("progress_interval_s", progress_interval_s)
        _check_positive("cancel_poll_s", cancel_poll_s)
        if timeout_s is not None:
            _check_positive("timeout_s", timeout_s)
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
        self._settling: set[str] = set()  # of them, those whose settlement is on its way
        self._stats = ConsumerStats()
        self._stopping = False
        # When idle, look now and then for overdue scheduled jobs (no metronome); warn once.
        self._metronome_check = metronome_check
        self._next_check = 0.0
        # Process-local instruments (echomq_trio.metrics), bound to this queue's label once
        # (metrics_queue: a partitioned queue's name); None: none.
        label = queue if metrics_queue is None else metrics_queue
        self._claim_sizes = None if metrics is None else metrics.claim_batch.labels(label)
        self._settled = None if metrics is None else metrics.settled(label)
        self.per_lane = per_lane
        self.lane_idle_s = lane_idle_s
        self.claim_gate = claim_gate
        self._lanes: dict[str, _Lane] = {}  # per-lane dispatch: at most one per held job
        self.timeout_s = timeout_s
        self._timeout_ms = None if timeout_s is None else max(1, math.ceil(timeout_s * 1000))
        self.cancel_poll_s = cancel_poll_s
        # The cancel scope of each running handler, by job id (at most one per held job), and
        # the held jobs whose lease is gone: the watcher's cancels and the renewal's losses.
        self._scopes: dict[str, trio.CancelScope] = {}
        self._gone: dict[str, _Forget] = {}
        self._stopped_by: StopConsumer | None = None
        self.progress_interval_s = progress_interval_s
        self._progress = ProgressBook(bus, queue, progress_interval_s)

    @property
    def max_attempts(self) -> int:
        return self.policy.max_attempts

    @property
    def backoff(self) -> Policy:
        return self.policy.backoff

    def statistics(self) -> ConsumerStats:
        """A snapshot of the counters, and how many jobs are held now."""
        return attrs.evolve(self._stats, held=len(self._held))

    def lanes(self) -> list[str]:
        """Per-lane dispatch: the lanes that have a task now (empty otherwise)."""
        return list(self._lanes)

    def _count(self, **more: int) -> None:
        s = self._stats
        self._stats = attrs.evolve(s, **{name: getattr(s, name) + n for name, n in more.items()})

    def _count_settled(self, outcomes: Mapping[str, int]) -> None:
        self._count(**outcomes)
        if self._settled is not None:
            for name, n in outcomes.items():
                self._settled[name].inc(n)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and handle jobs until cancelled; then shut down as described above. Raises
        ``StopConsumer`` when a handler raised it (after the jobs held went back)."""
        self._stopping = False
        self._stopped_by = None
        self._progress = ProgressBook(self.bus, self.queue, self.progress_interval_s)  # this run's
        slots = trio.Semaphore(self._max_held)
        work_send, work_recv = trio.open_memory_channel[Job](self._max_held)
        done_send, done_recv = trio.open_memory_channel[_Settle](self._max_held)
        handler_scope = trio.CancelScope()
        shield = trio.CancelScope(shield=True)

        def begin_stop(grace_s: float) -> None:
            if not self._stopping:
                self._stopping = True
                handler_scope.deadline = trio.current_time() + grace_s

        def stop_by(exc: StopConsumer) -> None:
            # A handler stops the consumer: the others are cancelled at once, what finished
            # is settled, the rest goes back (``_release_held``), then ``exc`` is raised.
            if self._stopped_by is None:
                self._stopped_by = exc
            begin_stop(0)

        try:
            async with self.bus.transport.blocking() as parker, trio.open_nursery() as outer:
                outer.start_soon(self._claim_loop, work_send, parker, slots)
                outer.start_soon(self._watch, partial(begin_stop, self.grace_s))
                task_status.started()
                with shield:
                    async with trio.open_nursery() as core:
                        self._progress.nursery = core  # its flusher, at the first report
                        core.start_soon(self._settle_loop, done_recv, slots)
                        renew_scope = trio.CancelScope()
                        core.start_soon(self._renew_loop, renew_scope)
                        watch_scope = trio.CancelScope()
                        core.start_soon(self._cancel_watch, watch_scope)
                        with handler_scope:
                            async with trio.open_nursery() as handlers, done_send, work_recv:
                                if self.per_lane:
                                    handlers.start_soon(
                                        self._dispatch_loop,
                                        work_recv.clone(),
                                        done_send.clone(),
                                        handlers,
                                        stop_by,
                                    )
                                else:
                                    for _ in range(self.concurrency):
                                        handlers.start_soon(
                                            self._handler_loop,
                                            work_recv.clone(),
                                            done_send.clone(),
                                            stop_by,
                                        )
                        # Every handler is done (a send a handler shields may outlast the grace
                        # period): settling what they finished has this long from now.
                        shield.deadline = trio.current_time() + SETTLE_TIME_S
                        renew_scope.cancel()
                        self._progress.close()
                        watch_scope.cancel()
                outer.cancel_scope.cancel()
        finally:
            self._gone.clear()
            await self._release_held()
        if self._stopped_by is not None:
            raise self._stopped_by

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
                if self.claim_gate is not None:
                    await self.claim_gate()
                claimed, want = await _leases.claim_for_slots(
                    self.bus, self.queue, slots, self._window.size, self.lease_ms
                )
                self._window.claimed(want, len(claimed))
                self._count(claimed=len(claimed))
                if self._claim_sizes is not None and claimed:
                    self._claim_sizes.observe(len(claimed))
                reporter = self._progress
                for job in claimed:
                    self._held[job.id] = job
                    object.__setattr__(job, "_reporter", reporter)  # for ``job.progress``
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
            late = await self.bus.transport.server_time_ms() - OVERDUE_BEATS * self.beat_ms
            overdue = [
                int(await self.bus.transport.command("ZCOUNT", key, "-inf", str(late)))
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
        self,
        work: trio.MemoryReceiveChannel[Job],
        done: trio.MemorySendChannel[_Settle],
        stop_by: Callable[[StopConsumer], None],
    ) -> None:
        # ``_handle``, written out: the pool's hot path, one coroutine fewer per job. One cancel
        # scope serves job after job (a scope per job costs the hot path more than the rest of
        # the handler's turn), and is made anew once it was cancelled: by the watcher, a
        # renewal (the job is in ``_gone``) or the job's deadline.
        scopes, gone = self._scopes, self._gone
        async with work, done:
            while True:
                scope = trio.CancelScope()
                running: Job | None = None  # the job whose handler the scope's cancel stopped
                with scope:
                    async for job in work:
                        if self._stopping:
                            continue  # never start a job while stopping; released at the end
                        if gone and job.id in gone:
                            done.send_nowait(_Settle(job, gone.pop(job.id)))  # its lease is gone
                            continue
                        result: HandlerResult | Exception | TimedOut
                        timeout_ms = job.timeout_ms or self._timeout_ms
                        if timeout_ms:
                            scope.deadline = trio.current_time() + timeout_ms / 1000
                        scopes[job.id] = scope
                        running = job
                        try:
                            result = await self.handler(job)
                        except StopConsumer as exc:
                            stop_by(exc)
                            running = None
                            continue
                        except Exception as exc:
                            result = exc
                        finally:
                            del scopes[job.id]
                        running = None
                        if gone and job.id in gone:  # stopped as it finished: the server's now
                            done.send_nowait(_Settle(job, gone.pop(job.id)))
                            break  # its scope is cancelled: a new one
                        if timeout_ms:
                            if scope.cancel_called:  # its deadline came as it finished
                                done.send_nowait(_Settle(job, decide(result, job, self.policy)))
                                break
                            scope.deadline = math.inf
                        done.send_nowait(_Settle(job, decide(result, job, self.policy)))
                    else:
                        return  # no more work
                if running is not None:  # its handler was stopped by this scope's cancel
                    self._settle_stopped(running, done)

    async def _handle(
        self,
        job: Job,
        done: trio.MemorySendChannel[_Settle],
        stop_by: Callable[[StopConsumer], None],
        scope: trio.CancelScope,
    ) -> Transition | None:
        """Run the handler on ``job`` under ``scope`` (entered by the caller, which makes a new
        one once it was cancelled: ``scope.cancel_called``) and queue its settlement; the
        transition, or ``None`` when the job was not handled (stopping, the handler raised
        ``StopConsumer``, or its lease is gone). A handler the scope's cancel stops raises
        ``trio.Cancelled`` out of here: the caller settles the job (``_settle_stopped``)."""
        if self._stopping:
            return None  # never start a job while stopping; it is released at the end
        gone = self._gone
        if gone and job.id in gone:
            done.send_nowait(_Settle(job, gone.pop(job.id)))  # its lease is gone
            return None
        result: HandlerResult | Exception
        timeout_ms = job.timeout_ms or self._timeout_ms
        if timeout_ms:
            scope.deadline = trio.current_time() + timeout_ms / 1000
        self._scopes[job.id] = scope
        try:
            result = await self.handler(job)
        except StopConsumer as exc:
            stop_by(exc)
            return None
        except Exception as exc:
            result = exc
        finally:
            del self._scopes[job.id]
        if gone and job.id in gone:  # stopped as it finished: the server's now
            done.send_nowait(_Settle(job, gone.pop(job.id)))
            return None
        if timeout_ms and not scope.cancel_called:
            scope.deadline = math.inf
        transition = decide(result, job, self.policy)
        # Never blocks (room for every held job), so no cancellation can come between a
        # finished handler and its settlement.
        done.send_nowait(_Settle(job, transition))
        return transition

    def _settle_stopped(self, job: Job, done: trio.MemorySendChannel[_Settle]) -> None:
        """Settle ``job``, whose handler its scope's cancel stopped: nothing to settle when it
        was cancelled or its lease lost (``_gone``), else it ran past its deadline."""
        if job.id in self._gone:
            done.send_nowait(_Settle(job, self._gone.pop(job.id)))
            return
        timeout_ms = job.timeout_ms or self._timeout_ms
        if timeout_ms:
            done.send_nowait(_Settle(job, decide(TimedOut(timeout_ms), job, self.policy)))

    # --- per-lane dispatch ----------------------------------------------------------------------

    async def _dispatch_loop(
        self,
        work: trio.MemoryReceiveChannel[Job],
        done: trio.MemorySendChannel[_Settle],
        lanes: trio.Nursery,
        stop_by: Callable[[StopConsumer], None],
    ) -> None:
        running = trio.CapacityLimiter(self.concurrency)
        async with work, done:
            try:
                async for job in work:
                    # No checkpoint from here to the send: a lane's task that ends while idle
                    # leaves ``_lanes`` only with an empty inbox, in one step (``_lane_task``).
                    key = job.group or job.id
                    lane = self._lanes.get(key)
                    if lane is None:
                        # Room for every job the consumer may hold: never blocks on one lane.
                        outbox, inbox = trio.open_memory_channel[Job](self._max_held)
                        lane = self._lanes[key] = _Lane(key, inbox, outbox)
                        self._count(lane_tasks=1)
                        lanes.start_soon(
                            self._lane_task, lane, done.clone(), running, stop_by,
                            name=f"lane {key}",
                        )  # fmt: skip
                    lane.outbox.send_nowait(job)
            finally:
                for lane in self._lanes.values():
                    lane.outbox.close()  # no more work: each task ends once its inbox is empty

    async def _lane_task(
        self,
        lane: _Lane,
        done: trio.MemorySendChannel[_Settle],
        running: trio.CapacityLimiter,
        stop_by: Callable[[StopConsumer], None],
    ) -> None:
        async with done:
            try:
                with lane.scope:
                    while True:
                        # The jobs' cancel scope (as the pool's): made anew once cancelled.
                        scope = trio.CancelScope()
                        current: Job | None = None
                        with scope:
                            while True:
                                job: Job | None = None
                                with trio.move_on_after(self.lane_idle_s):
                                    try:
                                        job = await lane.inbox.receive()
                                    except trio.EndOfChannel:
                                        return
                                if job is None:
                                    try:
                                        job = lane.inbox.receive_nowait()
                                    except (trio.WouldBlock, trio.EndOfChannel):
                                        return  # idle: `finally` takes the lane out first
                                async with running:
                                    current = job
                                    transition = await self._handle(job, done, stop_by, scope)
                                    current = None
                                if (self._gone or scope.deadline != math.inf) and (
                                    scope.cancel_called
                                ):
                                    break  # cancelled as its handler finished: a new scope
                                if (
                                    isinstance(transition, DeferJob | BuryJob)
                                    and lane.inbox.statistics().current_buffer_used == 0
                                ):
                                    return  # its lane waits (or is stuck): no task until work
                        if current is not None:  # its handler was stopped by the scope's cancel
                            self._settle_stopped(current, done)
            finally:
                # Out of ``_lanes`` with no checkpoint since the inbox was last seen empty (or
                # since a cancellation): the dispatcher starts a new task for the next job.
                if self._lanes.get(lane.key) is lane:
                    del self._lanes[lane.key]
                lane.inbox.close()

    async def _persist(self, call: Callable[[], Awaitable[T]]) -> T:
        # Settling must not be lost to a blip: retry through connection trouble until it goes
        # through or the shutdown deadline cancels us (then the job is released or reaped).
        return await _leases.persist(self.queue, call)

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
                self._settling.update(d.job.id for d in batch)
                try:
                    await self._settle(batch)
                finally:
                    self._settling.difference_update(d.job.id for d in batch)
                for d in batch:
                    if self._held.pop(d.job.id, None) is not None:
                        slots.release()
                    if self._gone:  # a loss heard after the handler finished: forgotten here
                        self._gone.pop(d.job.id, None)

    async def _settle(self, batch: list[_Settle]) -> None:
        """Run a batch's transitions: every ack in one round trip, then the rest in order (their
        scripts take one job each)."""
        acks = []
        kept = []  # acks with a result
        for d in batch:
            t = d.transition
            if isinstance(t, AckJob):
                if t.result is None:
                    acks.append((d.job.id, d.job.token, t.note))
                else:
                    kept.append((d.job.id, d.job.token, t.note, t.result))
        if self._progress.has_news(d.job.id for d in batch):
            await self._progress.flush()  # a job's last report before it is settled
        if acks:
            outcomes = await self._persist(partial(jobs.ack_many, self.bus, self.queue, acks))
            self._count_settled(Counter(_leases.COUNTER[o] for o in outcomes))
        if kept:
            ack = partial(jobs.ack_with_results, self.bus, self.queue, kept)
            self._count_settled(Counter(_leases.COUNTER[o] for o in await self._persist(ack)))
        for d in batch:
            job = d.job
            match d.transition:
                case AckJob():
                    continue
                case _Forget(counter=counter):
                    if counter:
                        self._count_settled({counter: 1})
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
            self._count_settled({_leases.COUNTER[outcome]: 1})
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
            await _leases.renew(self.bus, self.queue, self._held, self.lease_ms, self._lost)

    def _lost(self, job_ids: Sequence[str]) -> None:
        """A renewal found these leases gone: stop their handlers (or never start them). A job
        settled meanwhile is not lost (a renewal sent while its ack was on its way, or answered
        after it, finds the lease gone because the ack ended it)."""
        lost = [j for j in job_ids if j in self._held and j not in self._settling]
        if lost:
            self._count(lost_leases=len(lost))
        for job_id in lost:
            self._stop_handler(job_id, _LOST)

    def _stop_handler(self, job_id: str, why: _Forget) -> None:
        if job_id in self._gone:
            return  # stopped already
        self._gone[job_id] = why
        scope = self._scopes.get(job_id)
        if scope is not None:
            scope.cancel()

    async def _cancel_watch(self, scope: trio.CancelScope) -> None:
        """While handlers run, ask every ``cancel_poll_s`` whether any of their jobs was
        cancelled (one ``ZMSCORE``), and stop those handlers; the marks seen are removed."""
        k = self.bus.keys(self.queue)
        with scope:
            while True:
                await trio.sleep(self.cancel_poll_s)
                running = [
                    (job_id, self._held[job_id].token)
                    for job_id in self._scopes
                    if job_id in self._held and job_id not in self._gone
                ]
                if not running:
                    continue
                try:
                    raw = await self.bus.transport.command(
                        *protocol.cancel_marks_command(k, running)
                    )
                    seen = [running[i] for i in protocol.cancelled_among(running, raw)]
                    for job_id, _ in seen:
                        if job_id in self._scopes:  # still running (else its ack is stale)
                            self._stop_handler(job_id, _CANCELLED)
                    if seen:
                        marks = [protocol.cancel_mark(i, t) for i, t in seen]
                        await self.bus.transport.command("ZREM", k.cancel_marks, *marks)
                except BusError as exc:
                    # the next poll asks again (a mark lasts past its lease's deadline)
                    log.log(level_of(exc), "cancel watch on %s failed: %s", self.queue, exc)

    async def _release_held(self) -> None:
        self._count(released=await _leases.release(self.bus, self.queue, self._held))
