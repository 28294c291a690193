"""What the bus answers (pure data): the typed results of its transitions and reads.

Scripts answer outcomes as words, and each enum's values are those words (``Outcome.ACKED`` is
``'acked'``), so ``protocol`` parses a reply by value. ``jobs``, ``lanes``, ``repeat`` and
``audit`` re-export the results they return.
"""

from __future__ import annotations

import enum
from typing import Protocol

import attrs
import trio

from echomq_trio.states import JobState

__all__ = [
    "Acknowledged",
    "Admitted",
    "AuditOutcome",
    "AuditRecord",
    "Cancelled",
    "CapShare",
    "ChildEnd",
    "ClockCarried",
    "Counts",
    "CronDue",
    "DeletedPage",
    "Extended",
    "Fired",
    "FlowRow",
    "Job",
    "JobInfo",
    "LanePage",
    "LaneStatus",
    "Outcome",
    "Promoted",
    "QueueCap",
    "QueueControl",
    "Reaped",
    "Registered",
    "Registration",
    "ResultState",
    "Retention",
]


class Outcome(enum.StrEnum):
    """What a transition did: the word its script answers. The vocabulary follows the original's
    return atoms."""

    ENQUEUED = "enqueued"
    SCHEDULED = "scheduled"
    DUPLICATE = "duplicate"
    ACKED = "acked"
    DEFERRED = "deferred"
    STALE = "stale"
    GONE = "gone"
    DEAD = "dead"
    REPLAYED = "replayed"
    NOT_DEAD = "not_dead"
    DISCARDED = "discarded"
    DELETED = "deleted"  # a waiting or scheduled job deleted (jobs.delete)
    RUNNING = "running"  # not deleted: the job is leased (running); cancel it instead
    NOT_WAITING = "not_waiting"  # not deleted: the job is dead (discard it), or not waiting
    NOTED = "noted"  # a job's progress was written (script ``progress``)
    DEBOUNCED = "debounced"  # taken into the waiting job of its debounce key (``debounce=``)


class Cancelled(enum.StrEnum):
    """What ``jobs.cancel`` did (the word its script answers): ``CANCELLED`` (the job will not
    run, or its holder is told to stop it: the cancel won), ``ALREADY_DONE`` (the job is dead or
    cancelled already: nothing changed) or ``NOT_FOUND`` (no such job: never admitted, or acked
    and its row deleted)."""

    CANCELLED = "cancelled"
    ALREADY_DONE = "already_done"
    NOT_FOUND = "not_found"


class Registered(enum.StrEnum):
    """What ``register`` did."""

    REGISTERED = "registered"
    EXISTS = "exists"
    REPLACED = "replaced"  # with ``replace=True``: a live name whose schedule differed


class AuditOutcome(enum.StrEnum):
    """How an audited job was settled: acked, buried on purpose (``dropped``), out of
    attempts (``dead``), or cancelled (``jobs.cancel``: the record's ``note`` names who, its
    ``error`` is the reason)."""

    ACKED = "acked"
    DROPPED = "dropped"
    DEAD = "dead"
    CANCELLED = "cancelled"


@attrs.frozen
class Admitted:
    """The answer of every way of admitting a job (``jobs.enqueue``, ``enqueue_at``,
    ``enqueue_in``, ``enqueue_many``, ``lanes.enqueue``, ``lanes.enqueue_many``): the job's ``id``
    (minted by the bus unless given), the ``outcome`` (``ENQUEUED``: ready in pending or its
    lane; ``SCHEDULED``: waiting for ``run_at_ms``, server clock; ``DUPLICATE``: a live job has
    this id, or the idempotency key was used, and nothing changed) and ``ok``, true unless a
    duplicate.

    A debounced enqueue (``debounce=``) answers ``SCHEDULED`` when it started a new quiet period
    (``id`` is the new job's) or ``DEBOUNCED`` when the key's waiting job took it in (``id`` is
    that job's); ``run_at_ms`` is when the job runs now, and ``absorbed`` how many enqueues the
    job stands for so far (1 for the first of its period; 0 for an enqueue without debounce): the
    enqueue that answers the highest ``absorbed`` is the one whose payload the job runs with."""

    id: str
    outcome: Outcome
    run_at_ms: int | None = None
    absorbed: int = 0

    @property
    def ok(self) -> bool:
        """The job was admitted by this call (not a duplicate)."""
        return self.outcome is not Outcome.DUPLICATE


class ProgressReporter(Protocol):
    """What a ``Job`` hands its handler's progress to (the consumer that claimed it)."""

    def report(self, job: Job, value: object) -> None: ...


@attrs.frozen
class Job:
    """A claimed job. ``token`` (the lease number) is the fencing token: present it to settle
    the job. ``attempts`` counts the attempts spent, this one included. ``group`` is its lane
    (``None``: flat), ``timeout_ms`` its deadline per attempt (``None``: the consumer's) and
    ``priority`` the priority it was admitted with (0: none), kept across retries, deferrals,
    releases and reaps.

    A job a ``Consumer`` hands its handler carries the consumer's progress reporter (private,
    set by the consumer, no part of equality or repr): ``await job.progress(value)``."""

    queue: str
    id: str
    payload: bytes
    attempts: int
    token: int
    lease_deadline_ms: int
    group: str | None = None
    timeout_ms: int | None = None  # the job's own deadline per attempt (``timeout_ms`` at enqueue)
    priority: int = 0  # its priority (``priority`` at enqueue or registration; 0: none)
    _reporter: ProgressReporter | None = attrs.field(
        default=None, eq=False, repr=False, kw_only=True
    )

    @property
    def text(self) -> str:
        """The payload decoded as UTF-8."""
        return self.payload.decode()

    async def progress(self, value: object) -> None:
        """Report how far the handler has come: a number, or a small JSON-able value (at most
        ``progress.MAX_PROGRESS_BYTES`` as JSON; else ``ValueError``/``TypeError``, before any
        I/O). Coalesced: the consumer keeps the latest value per job and writes every job's news
        in one round trip at most every ``progress_interval_s`` (a tight loop of reports costs
        no more); a job whose lease was lost is not written. Seen by ``jobs.get_job``
        (``JobInfo.progress``), the events stream (``progress``), ``echomq show`` and the
        dashboard. A checkpoint; a ``Job`` not handed out by a ``Consumer`` raises
        ``RuntimeError``."""
        if self._reporter is None:
            raise RuntimeError(
                f"job {self.id} has no consumer to report progress to (only a job a Consumer "
                "hands its handler reports progress)"
            )
        self._reporter.report(self, value)
        await trio.lowlevel.checkpoint()


@attrs.frozen
class Promoted:
    moved: int
    lanes_resumed: int  # lanes whose wait ended
    next_due_ms: int | None  # earliest run-at or lane wait still ahead
    server_now_ms: int
    # When asked for (``promote(lateness=True)``): per moved job, server now minus its score (its
    # run-at, or the end of its backoff or deferral), ms.
    lateness_ms: tuple[int, ...] = ()
    # The queue's waits are being carried across a step of the server clock: nothing was moved
    # (``jobs.carry_clock`` first).
    carrying: bool = False
    # The microseconds of the server clock past ``server_now_ms`` (0-999): the metronome sleeps
    # until the next due time to within the ms.
    server_now_us: int = 0


@attrs.frozen
class Reaped:
    reaped: int
    server_now_ms: int
    carrying: bool = False  # as ``Promoted.carrying``: nothing was reaped
    next_from: str | None = None  # reaping a dead holder's jobs: where the next page starts


@attrs.frozen
class ClockCarried:
    """What ``jobs.carry_clock`` did: the step it recorded (``recorded_ms``, 0 for none), the
    queue's last recorded step (``step_ms``, 0 for none, recorded at ``step_at_ms``), the waits
    it carried across, and whether carrying is left to do (``more``)."""

    recorded_ms: int
    step_ms: int
    step_at_ms: int | None
    carried: int
    more: bool
    server_now_ms: int


@attrs.frozen
class Extended:
    lease_deadline_ms: int
    lost: tuple[str, ...]  # ids whose lease this worker no longer holds


@attrs.frozen
class Counts:
    """Jobs per state now (``pending`` includes lane jobs), lanes, and running totals."""

    exists: bool  # the queue has been used
    pending: int
    scheduled: int
    active: int
    dead: int
    lanes: int  # lanes holding pending jobs
    paused_lanes: int
    waiting_lanes: int
    completed_total: int
    retried_total: int
    dead_total: int
    deferred_total: int
    repeats: int
    cancelled: int = 0  # cancelled jobs kept (``jobs.cancel``), like dead ones
    cancelled_total: int = 0
    expired_total: int = 0  # jobs a claim met past their expiry (kept dead, or dropped)
    waiting_children: int = 0  # flows' parents waiting for their children (``flows.add``)


@attrs.frozen
class JobInfo:
    """A job row as stored. ``score_ms`` is the run-at (scheduled), lease deadline (active),
    time of death (dead) or of the cancel (cancelled); a cancelled job's ``last_error`` says
    who cancelled it and why (``"cancelled by ops: duplicate order"``). ``progress`` is what its
    handler last reported (``Job.progress``, the JSON value decoded; ``None`` for none); a
    ``completed`` job (its queue keeps results) has its handler's ``result`` (``None`` for none)
    and ``finished_ms`` (server clock). ``priority``: higher runs first (0 when none was given;
    see ``jobs.enqueue``). ``expires_ms`` is the time (server clock) after which a
    claim never leases the job (``expires_at``/``expires_in``: an expired job is dead with the
    ``last_error`` ``"expired"``); ``debounce`` the debounce key a job admitted with ``debounce=``
    answers to."""

    id: str
    state: JobState
    attempts: int
    payload: bytes
    last_error: str | None
    score_ms: int | None
    group: str | None = None
    progress: object = None
    result: bytes | None = None
    finished_ms: int | None = None
    priority: int = 0
    expires_ms: int | None = None
    debounce: str | None = None


@attrs.frozen
class ResultState:
    """What ``jobs.result`` reads of a job (script ``result``): its ``state`` as the server
    words it (``''``: no row; a word this version does not know, such as another's
    ``cancelled``, is kept as it is), the queue's results TTL (``keeps_ms``, 0: none kept), its
    last ``error`` and its ``result`` (``None`` for none)."""

    state: str
    keeps_ms: int
    error: str | None
    result: bytes | None


@attrs.frozen
class LaneStatus:
    group: str
    depth: int  # jobs waiting in the lane
    in_flight: int
    limit: int | None
    weight: int
    paused: bool
    wait_until_ms: int | None
    on_ring: bool  # being served now


@attrs.frozen
class LanePage:
    """A page of ``lanes.status_page``: lanes sorted by name within the page, and the cursor of
    the next page (``None`` after the last)."""

    lanes: list[LaneStatus]
    next: str | None


@attrs.frozen
class Registration:
    """A recurring schedule: every ``every_ms``, or (``every_ms`` ``None``) at the occurrences of
    the cron expression ``cron`` in the zone ``tz`` (an IANA name). Times are server ms.
    ``priority``: the priority of every job it fires (0: none)."""

    name: str
    next_run_ms: int
    every_ms: int | None
    template: bytes
    group: str | None
    last_fired_ms: int | None
    cron: str | None = None
    tz: str | None = None
    priority: int = 0


@attrs.frozen
class CronDue:
    """A due cron registration that ``fire`` did not fire for want of its next run (Lua cannot
    compute cron): its name, the run it waits for (server ms), its expression and zone."""

    name: str
    at_ms: int
    cron: str
    tz: str


@attrs.frozen
class Fired:
    """What ``repeat.fire`` did: occurrences fired, the soonest next run of any registration
    (``None``: none), the server's now, and the due cron registrations it could not move
    (``wanted``; ``repeat.fire`` moves them in a second call, so it answers them only when that
    could not be done: another metronome's race, or a zone unknown here)."""

    fired: int
    next_due_ms: int | None
    server_now_ms: int
    wanted: tuple[CronDue, ...] = ()


@attrs.frozen
class AuditRecord:
    """A settled job's audit record, written by the script that settled it."""

    stream_id: str
    job_id: str
    outcome: AuditOutcome
    attempts: int  # attempts spent, the settling one included
    settled_ms: int  # server clock
    payload: bytes
    note: str  # what the handler left (``Ack(note)``), for an acked job
    error: str  # the reason, for a dropped or dead job


@attrs.frozen
class Acknowledged:
    """Answer of ``audit.ack_and_trim``: entries acknowledged, and entries removed from the
    stream (below what every reader of the group has acknowledged)."""

    acked: int
    trimmed: int


@attrs.frozen
class Retention:
    """How much history a queue keeps (``retention.configure``): at most ``dead_max`` dead jobs
    and none older than ``dead_max_age_ms`` (``None``: no bound), and its events stream when
    ``events``, capped at about ``events_max_len`` entries. Completed, retried and dead totals
    are always kept (``jobs.counts``)."""

    dead_max: int | None
    dead_max_age_ms: int | None
    events: bool
    events_max_len: int


@attrs.frozen
class CapShare:
    """One partition's reading in a round of its queue's cap (``protocol.cap_share_call``):
    whether the epoch fence refused the call (``fenced``), the partition's cap in effect
    (``max_active``, ``None`` for none), its jobs in flight (``active``) and its jobs waiting
    to be claimed (``waiting``: pending, flat and in lanes)."""

    fenced: bool
    max_active: int | None
    active: int
    waiting: int


@attrs.frozen
class QueueCap:
    """A partitioned queue's cap on jobs in flight across its partitions
    (``PartitionedQueue.limit``): the total (``None``: none), the jobs in flight now in every
    partition (``active``, a sum of readings, not one instant), and each partition's share in
    effect (``shares``, in partition order; ``None`` for a partition without a cap)."""

    total: int | None
    active: int
    shares: tuple[int | None, ...]


@attrs.frozen
class QueueControl:
    """A queue's own switches (``queues.control``): whether it is paused (``paused_since_ms``,
    server clock, ``None`` when not), its cap on jobs in flight across every consumer
    (``max_active``, ``None`` for none), and what a claim does with an expired job
    (``expired``: ``"dead"``, kept dead, or ``"drop"``, deleted; ``queues.set_expired``)."""

    paused_since_ms: int | None
    max_active: int | None
    expired: str = "dead"

    @property
    def paused(self) -> bool:
        """Claims answer nothing while the queue is paused."""
        return self.paused_since_ms is not None


@attrs.frozen
class DeletedPage:
    """What ``jobs.delete_page`` did: how many jobs it deleted, and the cursor of the next page
    (``None`` after the last)."""

    deleted: int
    next: str | None


@attrs.frozen
class ChildEnd:
    """One child of a flow's parent (``flows.children``): its ``queue`` and ``id``, its
    ``state`` now (the stored word; a child that has ended and whose row is gone reads as its
    end: ``completed``, or ``dead``/``cancelled`` for a failure its parent ignored), whether it has
    ``ended`` for its parent, its ``result`` (a completed child's; ``None`` for none) and its
    ``error`` (a failure the parent ignored: ``on_failure=IGNORE``; else ``None``)."""

    queue: str
    id: str
    state: str
    ended: bool
    result: bytes | None = None
    error: str | None = None


@attrs.frozen
class FlowRow:
    """A job's place in a flow (script ``flow``): its ``state`` (``''``: no row), its
    ``parent`` (``(queue, id)``; ``None`` for none), its ``on_failure`` word (``'fail'`` or
    ``'ignore'``: what its failure does to its parent), ``unfinished`` (children not yet ended;
    ``None`` for a job without children) and its ``children``."""

    state: str
    parent: tuple[str, str] | None
    on_failure: str
    unfinished: int | None
    children: tuple[ChildEnd, ...]
