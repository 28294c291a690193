"""Job transitions: one function per Lua script, each one round trip, each returning typed values.

States: ``pending`` (ready), ``scheduled`` (waiting for a time), ``active`` (leased to a worker),
``dead`` (out of attempts), ``cancelled`` (``cancel``: never to run, or run on), ``completed``
(finished, kept with its result while the queue keeps results: ``keep_results``); the
transitions between them are the table in ``echomq_trio/scripts/README.md``. An acked job's row
is deleted (or, where results are kept, expires after the queue's results TTL), so a finished id
may be used again then. Each function builds its script's call with ``protocol`` (which checks
names, ids, payloads of at most the bus's ``max_payload_bytes``, and times and delays of at most
what a sorted-set score holds exactly, raising ``ValueError`` or ``TypeError`` before any I/O, so
nothing is written), runs it, and parses the reply.

Cancellation: a script is atomic, so a cancelled call has either happened in full or not at all
on the server, and the caller cannot tell which; each function says how to find out or why
calling again is safe.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from functools import partial

import attrs
import trio

from echomq_trio import audit, protocol
from echomq_trio._checks import PRIORITY_MAX, PRIORITY_MIN, check_job_id
from echomq_trio._layouts import run_current
from echomq_trio.bus import Bus
from echomq_trio.clock import REAP_GRACE_MS
from echomq_trio.errors import (
    BusError,
    JobCancelled,
    JobFailed,
    JobNotFound,
    ResultsNotKept,
    ResultTimedOut,
    raising_first,
)
from echomq_trio.protocol import (
    DEFAULT_KEY_TTL_MS,
    ENQUEUE_CHUNK,
    ExpiresAt,
    ExpiresIn,
    Item,
    When,
)
from echomq_trio.results import (
    Admitted,
    Cancelled,
    ClockCarried,
    Counts,
    DeletedPage,
    Extended,
    Job,
    JobInfo,
    Outcome,
    Promoted,
    Reaped,
    ResultState,
)
from echomq_trio.states import JobState
from echomq_trio.transport import Subscription

__all__ = [
    "DEFAULT_KEY_TTL_MS",
    "ENQUEUE_CHUNK",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "Admitted",
    "Cancelled",
    "ClockCarried",
    "Counts",
    "DeletedPage",
    "Extended",
    "Job",
    "JobHandle",
    "JobInfo",
    "JobState",
    "Outcome",
    "Promoted",
    "Reaped",
    "ack",
    "ack_many",
    "ack_with_results",
    "cancel",
    "carry_clock",
    "claim",
    "clock_total",
    "counts",
    "dead_jobs",
    "defer",
    "delete",
    "delete_page",
    "discard",
    "enqueue",
    "enqueue_at",
    "enqueue_in",
    "enqueue_many",
    "extend",
    "get_job",
    "keep_results",
    "list_jobs",
    "promote",
    "reap",
    "release",
    "replay",
    "result",
    "results_kept",
    "retry",
    "set_audit",
    "take_back",
    "write_progress",
]


async def enqueue(
    bus: Bus,
    queue: str,
    payload: str | bytes,
    *,
    job_id: str | None = None,
    key: str | None = None,
    key_ttl_ms: int = DEFAULT_KEY_TTL_MS,
    timeout_ms: int | None = None,
    priority: int = 0,
    expires_at: ExpiresAt | None = None,
    expires_in: ExpiresIn | None = None,
    debounce: str | None = None,
    debounce_ms: int | None = None,
    max_wait_ms: int | None = None,
) -> Admitted:
    """Admit one job to pending: ``Admitted(id, ENQUEUED)``, or ``DUPLICATE`` (a live job has
    this id). The bus mints a fresh ``JOB`` id unless ``job_id`` gives one (a branded ``JOB``
    id, e.g. ``ids.generate("JOB")``): give one to make a retried enqueue idempotent.

    ``key`` is an idempotency key: if it was used in the last ``key_ttl_ms`` (even by a job
    that has since finished) the answer is ``DUPLICATE`` and nothing changes; otherwise the job
    is admitted and the key remembered, in the same step. A retried fan-out uses it to admit
    each of its jobs once.

    ``timeout_ms`` is the job's deadline per attempt: a consumer cancels a handler that runs
    longer and the attempt fails with "timed out after N ms" (``max_attempts`` and the backoff
    apply); ``None`` leaves it to the consumer's ``timeout_s``. Kept with the job, also for
    ``enqueue_many``, ``enqueue_at``, ``enqueue_in`` and ``lanes.enqueue``.

    ``priority`` (an int from ``PRIORITY_MIN`` to ``PRIORITY_MAX``, -1,000,000 to 1,000,000;
    ``ValueError``/``TypeError`` outside it, before any I/O): higher is claimed first, equal
    priorities in id (mint) order, 0 the default; a job keeps it through retries, deferrals,
    releases, reaps and replays. Strict: a low priority waits while higher ones keep coming
    (no aging). It orders jobs within the flat pending set (and within a lane, for
    ``lanes.enqueue``); lanes keep their round-robin turns (see ``docs/howto/priorities.md``).
    Also for ``enqueue_many``, ``enqueue_at``, ``enqueue_in``, ``lanes.enqueue`` and
    ``repeat.register``.

    ``expires_at`` (Unix ms on the server's clock, or an aware ``datetime``, as ``enqueue_at``
    takes its time) or ``expires_in`` (ms from the server's now at admission, or a
    ``timedelta``) is the job's expiry: a job not claimed by then never runs. The claim that
    meets it moves it to the dead set with the last error ``"expired"`` instead of leasing it
    (or deletes it: ``queues.set_expired``), counted in ``Counts.expired_total``; a metronome's
    ``promote`` sweeps those no claim meets. It holds for
    every attempt: a retry or a reaped job not started again by then is not run again. Also for
    ``enqueue_many``, ``enqueue_at``, ``enqueue_in`` and ``lanes``' enqueues.

    ``debounce`` (a key) with ``debounce_ms`` admits one job per quiet period of the key: while
    the key's job waits (on the schedule, or due and not yet claimed) this enqueue is taken into
    it: its payload (and timeout and expiry) become this one's, and a job still on the schedule
    moves to now + ``debounce_ms`` (server clock), never past its period's first enqueue +
    ``max_wait_ms`` (``None``: no bound, so a steady stream would never let it run). Answers
    ``Admitted(id, SCHEDULED, run_at_ms, absorbed=1)`` for a new period (the job's id is minted
    then) or ``Admitted(id, DEBOUNCED, run_at_ms, absorbed=n)`` with the waiting job's id. Once
    the job is claimed, the next enqueue with the key starts a new period. Atomic on the server
    (one script), so any number of producers may share a key. ``job_id``, ``key`` are refused
    with ``debounce`` (``ValueError``: the debounce key decides which job takes the enqueue).

    Concurrent calls for one queue coalesce into shared script calls (``echomq_trio._gather``):
    each caller still gets its own answer or its own error. A call with a ``key``, a
    ``timeout_ms`` or a ``priority`` is its own script call.

    A cancelled call may or may not have admitted the job (one cancelled while its coalesced
    batch was still gathering admitted nothing; one whose batch had gone out returns its
    answer); call again with the same ``job_id`` (or key): enqueue is idempotent, and
    ``DUPLICATE`` then means the first call went through (without a ``job_id`` or key, a second
    call admits a second job). A cancelled debounced call may or may not have been taken in;
    calling again puts the same payload in the key's job, or starts a period if it ran."""
    if (key is None and timeout_ms is None and type(priority) is int and priority == 0
            and expires_at is None and expires_in is None and debounce is None
            and debounce_ms is None and max_wait_ms is None):  # fmt: skip
        # a plain job (most calls): coalesced with concurrent callers' (echomq_trio._gather)
        item = protocol.checked_job(payload, job_id, bus.max_payload_bytes)  # a bad one fails
        g = bus.gatherer(queue)
        try:
            return await g.enqueue(
                item, partial(_enqueue_batch, bus, queue), partial(_one, bus, queue)
            )
        finally:
            bus.release_gatherer(queue, g)
    protocol.priority_arg(priority)  # a bad priority raises here, before any I/O
    expires = protocol.expiry_arg(expires_at, expires_in)
    wait = protocol.check_debounce(debounce, debounce_ms, max_wait_ms, job_id=job_id, key=key)
    if debounce is not None and wait is not None:
        ((job, body),) = protocol.with_ids([payload])
        debounced = protocol.debounce_call(
            bus.keys(queue), debounce, (job, body), bus.max_payload_bytes, debounce_ms=wait,
            max_wait_ms=max_wait_ms, timeout_ms=timeout_ms, expires=expires, priority=priority,
        )  # fmt: skip
        return await bus.run(debounced)
    # its own script call: a key, a timeout, a priority or an expiry
    items = protocol.with_ids([payload], job_id)
    (call,) = protocol.enqueue_calls(
        bus.keys(queue), items, bus.max_payload_bytes, key=key, key_ttl_ms=key_ttl_ms,
        timeout_ms=timeout_ms, priority=priority, expires=expires,
    )  # fmt: skip
    (out,) = await bus.run(call)
    return out


async def _one(bus: Bus, queue: str, pair: tuple[str, bytes]) -> Admitted:
    return await bus.run(protocol.enqueue_one_call(bus.keys(queue), pair))


async def _enqueue_batch(
    bus: Bus,
    queue: str,
    pairs: Sequence[tuple[str, bytes]],
    timeout_ms: int | None = None,
    priority: int = 0,
    expires: str = "",
) -> list[Admitted]:
    out: list[Admitted] = []
    calls = protocol.enqueue_checked_calls(bus.keys(queue), pairs, timeout_ms, priority, expires)
    for call in calls:
        admitted = await bus.run(call)
        out += admitted
    return out


async def enqueue_many(
    bus: Bus,
    queue: str,
    items: Iterable[Item],
    *,
    timeout_ms: int | None = None,
    priority: int = 0,
    expires_at: ExpiresAt | None = None,
    expires_in: ExpiresIn | None = None,
) -> list[Admitted]:
    """Admit many jobs in one round trip (per ``ENQUEUE_CHUNK`` jobs); answers in input order.
    Each item is a payload (the bus mints its id) or a ``(job_id, payload)`` pair;
    ``timeout_ms``, ``priority`` and ``expires_at``/``expires_in`` (as for ``enqueue``) apply to
    all of them.

    A cancelled call may have admitted some chunks of ``ENQUEUE_CHUNK`` jobs (each chunk all or
    nothing); call again with the same ids: those admitted answer ``DUPLICATE``."""
    protocol.timeout_arg(timeout_ms)  # checked before any I/O
    protocol.priority_arg(priority)
    expires = protocol.expiry_arg(expires_at, expires_in)
    pairs = protocol.checked_pairs(protocol.with_ids(items), bus.max_payload_bytes)
    return await _enqueue_batch(bus, queue, pairs, timeout_ms, priority, expires)


async def _schedule(
    bus: Bus,
    queue: str,
    payload: str | bytes,
    when: When,
    job_id: str | None,
    relative: bool,
    group: str | None,
    timeout_ms: int | None,
    priority: int,
    expires: str,
) -> Admitted:
    ((job, body),) = protocol.with_ids([payload], job_id)
    call = protocol.schedule_call(
        bus.keys(queue), [(job, body, when)], bus.max_payload_bytes, relative=relative,
        group=group, timeout_ms=timeout_ms, priority=priority, expires=expires,
    )  # fmt: skip
    (out,) = await bus.run(call)
    return out


async def enqueue_at(
    bus: Bus,
    queue: str,
    payload: str | bytes,
    run_at_ms: int | float | datetime,
    *,
    job_id: str | None = None,
    group: str | None = None,
    timeout_ms: int | None = None,
    priority: int = 0,
    expires_at: ExpiresAt | None = None,
    expires_in: ExpiresIn | None = None,
) -> Admitted:
    """Schedule a job for an absolute time: ``Admitted(id, SCHEDULED, run_at_ms)``, or
    ``DUPLICATE``. The time is Unix ms (an int, or a float rounded UP to the next ms) or an
    aware ``datetime`` (rounded up to the next ms; a naive one raises ``ValueError``): rounding
    up means it never runs early. It is not claimable before then; a metronome moves it to
    pending (or into lane ``group``) when the server clock reaches it, at its ``priority``'s
    place. ``job_id`` and ``priority`` as for ``enqueue``. ``expires_at``/``expires_in`` as for
    ``enqueue`` (``expires_in`` counts from the admission, not from the run-at: a job whose run-at
    is past its expiry never runs).

    A cancelled call may or may not have scheduled the job; call again with the same
    ``job_id``: ``DUPLICATE`` then means the first call went through (``get_job`` shows its
    run-at)."""
    expires = protocol.expiry_arg(expires_at, expires_in)
    return await _schedule(
        bus, queue, payload, run_at_ms, job_id, False, group, timeout_ms, priority, expires
    )


async def enqueue_in(
    bus: Bus,
    queue: str,
    payload: str | bytes,
    delay_ms: int | float | timedelta,
    *,
    job_id: str | None = None,
    group: str | None = None,
    timeout_ms: int | None = None,
    priority: int = 0,
    expires_at: ExpiresAt | None = None,
    expires_in: ExpiresIn | None = None,
) -> Admitted:
    """Schedule a job ``delay_ms`` from now, where now is the server's clock, not this host's:
    ms (an int, or a float rounded UP to the next ms) or a ``timedelta`` (rounded up). Answers
    as ``enqueue_at``; ``expires_at``/``expires_in`` as there.

    A cancelled call may or may not have scheduled the job; call again with the same
    ``job_id``: ``DUPLICATE`` then means the first call went through (``get_job`` shows its
    run-at)."""
    expires = protocol.expiry_arg(expires_at, expires_in)
    return await _schedule(
        bus, queue, payload, delay_ms, job_id, True, group, timeout_ms, priority, expires
    )


async def promote(
    bus: Bus,
    queue: str,
    batch: int = 1000,
    *,
    lateness: bool = False,
    witness: tuple[str, str, str] | None = None,
) -> Promoted:
    """Move up to ``batch`` due scheduled jobs to pending (or their lanes), put lanes whose
    wait has ended back in rotation, and sweep up to ``batch`` waiting jobs past their expiry
    (``expires_at``/``expires_in``: dead, or dropped, as a claim would). With ``lateness`` the
    answer also says how late (server clock) each moved job was (``Promoted.lateness_ms``).
    With ``witness`` (``clock.Witness.args``) a step of the server clock since the caller's
    last reading is recorded; while a step's waits are being carried nothing is moved and the
    answer says so (``Promoted.carrying``: call ``carry_clock``).

    A cancelled call may or may not have moved them; calling again is always safe (each job is
    promoted exactly once)."""
    call = protocol.promote_call(bus.keys(queue), batch, lateness=lateness, witness=witness)
    return await bus.run(call)


async def carry_clock(
    bus: Bus,
    queue: str,
    witness: tuple[str, str, str] | None = None,
    batch: int = 1000,
    *,
    reap_grace_ms: int = REAP_GRACE_MS,
) -> ClockCarried:
    """Record a step of the server clock that ``witness`` (``clock.Witness.args``) shows, and
    carry up to ``batch`` of the queue's waits across the last recorded step: lane waits and
    relative scheduled waits keep their length, a lease is never shortened under a live holder
    and none is reaped for ``reap_grace_ms`` after the step is recorded, a recurring schedule
    runs within a period (see "When the server clock steps" in
    ``docs/design/how-the-bus-works.md``). The metronome calls
    it; call it until ``more`` is false.

    A cancelled call may or may not have carried a page; calling again is always safe (an
    entry carried is never carried twice)."""
    call = protocol.clock_call(bus.keys(queue), witness, batch, reap_grace_ms=reap_grace_ms)
    return await bus.run(call)


async def clock_total(bus: Bus, queue: str) -> int:
    """The sum of every step of the server clock recorded on ``queue`` (ms; 0 before any):
    note it with a time an application writes, and that time reads, after later steps, as
    itself plus what the sum grew by since. Read only (one ``HGET``)."""
    total = await bus.transport.command("HGET", bus.keys(queue).meta, "clock_total")
    return 0 if total is None else int(total)


async def claim(bus: Bus, queue: str, batch: int = 1, lease_ms: int = 30_000) -> list[Job]:
    """Lease up to ``batch`` jobs for ``lease_ms`` in one round trip: lanes round-robin,
    interleaved with the flat pending set, highest priority first within each, then oldest
    (id order).

    A cancelled call may have leased jobs that the caller never sees; they are not lost: when
    their lease expires the reaper returns them to pending, with that attempt counted."""
    call = protocol.claim_call(bus.keys(queue), batch, lease_ms, bus.holder)
    return await bus.run(call)


async def ack(bus: Bus, queue: str, job_id: str, token: int, note: str = "") -> Outcome:
    """Finish a job: ``ACKED``; ``STALE`` if another claim holds it now; ``GONE`` if no row.
    ``note`` goes into the queue's audit record, when it keeps one.

    A cancelled call may or may not have acked the job; call again: ``GONE`` then means the
    first call went through (the row is deleted on ack)."""
    (out,) = await ack_many(bus, queue, [(job_id, token, note)])
    return out


async def ack_many(
    bus: Bus, queue: str, items: Sequence[tuple[str, int] | tuple[str, int, str]]
) -> list[Outcome]:
    """Ack several jobs in one round trip: ``(id, token)`` or ``(id, token, note)`` each;
    answers in input order.

    A cancelled call acked all of them or none; call again: ``GONE`` then means acked."""
    call = protocol.ack_call(bus.keys(queue), items)
    if not items:
        return []
    return await bus.run(call)


async def ack_with_results(
    bus: Bus, queue: str, items: Sequence[tuple[str, int, str, bytes]]
) -> list[Outcome]:
    """Ack several jobs in one round trip, each with a result: ``(id, token, note, result)``
    each; answers as ``ack_many``. Where the queue keeps results (``keep_results``) each job is
    kept ``completed`` with its result for the queue's TTL and its waiters (``result``) are told;
    where it keeps none the results are dropped and this is ``ack_many``.

    A cancelled call acked all of them or none; call again: ``STALE`` (a kept job) or ``GONE``
    then means acked."""
    if not items:
        return []
    return await bus.run(protocol.ack_results_call(bus.keys(queue), items))


async def retry(
    bus: Bus,
    queue: str,
    job_id: str,
    token: int,
    delay_ms: int,
    max_attempts: int,
    error: str = "",
    *,
    buried: bool = False,
) -> Outcome:
    """Fail an attempt: ``SCHEDULED`` again after ``delay_ms``, or ``DEAD`` when the job has used
    ``max_attempts`` (kept with ``error``); ``STALE``/``GONE`` when the lease is not held.
    ``buried=True`` marks a deliberate bury (a permanent error): audited as ``dropped``.

    A job of a lane with limit 1 goes back to the head of its lane, which waits out the delay.

    A cancelled call may or may not have moved the job; call again with the same token: the
    job is then either moved by this call, or ``STALE`` (the first call went through: the job
    is no longer active under that lease).
    """
    call = protocol.retry_call(
        bus.keys(queue), job_id, token, delay_ms, max_attempts, error, buried=buried
    )
    return await bus.run(call)


async def set_audit(bus: Bus, queue: str, enabled: bool = True) -> None:
    """The same as ``audit.enable(bus, queue, enabled)``: make the queue keep an audit (or
    stop). Kept for callers of the first API."""
    await audit.enable(bus, queue, enabled)


async def defer(
    bus: Bus, queue: str, job_id: str, token: int, delay_ms: int, reason: str = ""
) -> Outcome:
    """Put a held job back to wait ``delay_ms`` without spending an attempt: ``DEFERRED``.

    A lane job keeps its place at the head of its lane and the lane waits (other lanes go on);
    a flat job waits on the schedule. ``STALE``/``GONE`` when the lease is not held.

    A cancelled call may or may not have deferred the job; call again with the same token:
    ``STALE`` then means the first call went through.
    """
    call = protocol.defer_call(bus.keys(queue), job_id, token, delay_ms, reason)
    return await bus.run(call)


async def extend(bus: Bus, queue: str, items: Sequence[tuple[str, int]], lease_ms: int) -> Extended:
    """Renew the leases of held jobs to ``lease_ms`` from now; reports those no longer held.

    A cancelled call renewed all of them or none; calling again is always safe."""
    return await bus.run(protocol.extend_call(bus.keys(queue), items, lease_ms))


async def write_progress(
    bus: Bus, queue: str, items: Sequence[tuple[str, int, object]]
) -> list[Outcome]:
    """Write the progress of held jobs in one round trip: ``(id, token, value)`` each, the value
    a number or a small JSON-able value (``protocol.encode_progress``: ``ValueError`` or
    ``TypeError`` before any I/O). Answers ``NOTED``, or ``STALE``/``GONE`` for a job whose
    lease the token does not hold (nothing written). A handler run by a ``Consumer`` calls
    ``await job.progress(value)`` instead, which coalesces.

    A cancelled call wrote all of them or none; calling again is always safe."""
    encoded = [(i, t, protocol.encode_progress(v)) for i, t, v in items]
    if not encoded:
        return []
    return await bus.run(protocol.progress_call(bus.keys(queue), encoded))


async def reap(bus: Bus, queue: str, batch: int = 1000) -> Reaped:
    """Return up to ``batch`` jobs whose lease expired to pending (attempts unchanged).

    A cancelled call may or may not have returned them; calling again is always safe."""
    return await bus.run(protocol.reap_call(bus.keys(queue), batch))


async def take_back(bus: Bus, queue: str, holder: str, batch: int = 1000) -> int:
    """Return to pending (or their lanes) every job ``holder`` (a ``Bus.holder``) leased on
    ``queue``, whatever their lease deadlines, as the reaper does when a lease expires
    (attempts unchanged): for a holder known to be gone, such as the previous owner of a data
    directory after a crash (``open_bus`` does this at start). Returns how many; reads
    ``active`` a page of ``batch`` at a time.

    A cancelled call may have returned some; calling again is always safe (a job another
    holder claimed since is not its any more)."""
    k = bus.keys(queue)
    taken, after = 0, ""
    while True:
        got = await bus.run(protocol.reap_holder_call(k, holder, after, batch))
        taken += got.reaped
        if got.next_from is None:
            return taken
        after = got.next_from


async def release(bus: Bus, queue: str, items: Sequence[tuple[str, int]]) -> int:
    """Hand held jobs back to pending at once without counting the interrupted attempt.

    A cancelled call released all of them or none; call again: jobs already released are
    left alone (their lease no longer holds), and the rest are released."""
    call = protocol.release_call(bus.keys(queue), items)
    if not items:
        return 0
    return await bus.run(call)


async def replay(bus: Bus, queue: str, job_id: str) -> Outcome:
    """Move a dead job back to pending with its attempts reset (its last error is kept).

    A cancelled call may or may not have replayed the job; call again: ``NOT_DEAD`` then means
    the first call went through."""
    return await bus.run(protocol.replay_call(bus.keys(queue), job_id))


async def discard(bus: Bus, queue: str, job_id: str) -> Outcome:
    """Delete a dead (or cancelled) job for good: ``DISCARDED``, ``NOT_DEAD`` or ``GONE``.

    A cancelled call may or may not have deleted the job; call again: ``GONE`` then means the
    first call went through."""
    return await bus.run(protocol.discard_call(bus.keys(queue), job_id))


async def delete(bus: Bus, queue: str, job_id: str) -> Outcome:
    """Delete a waiting job (pending, in a lane or not, or scheduled) for good: ``DELETED``; the
    job never runs. A lane job leaves its lane with the lane's order and counts exact. Not
    deleted: ``RUNNING`` (the job is leased to a worker: cancel it instead), ``NOT_WAITING`` (it
    is dead: ``discard`` deletes a dead job) or ``GONE`` (no such job). One ``deleted`` event.

    A cancelled call may or may not have deleted the job; call again: ``GONE`` then means the
    first call went through."""
    return await bus.run(protocol.delete_call(bus.keys(queue), job_id))


async def delete_page(
    bus: Bus,
    queue: str,
    state: JobState | str = "pending",
    *,
    group: str | None = None,
    older_than_ms: int | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> DeletedPage:
    """Delete a page of waiting jobs: look at up to ``limit`` (1 to 1,000) jobs of ``state``
    (``"pending"`` or ``"scheduled"``) from ``cursor`` (``None``: the start; else the ``next`` of
    the page before) and delete those that match. ``"pending"`` is the flat pending set, or with
    ``group`` that lane's jobs; ``"scheduled"`` with ``group`` only that lane's scheduled jobs.
    ``older_than_ms``: only jobs minted at least that long before the server's now (the time in
    their id: when they were first enqueued). Returns how many it deleted and the next page's
    cursor (``None`` after the last); bounded work per call, so loop::

        cursor = None
        while True:
            page = await jobs.delete_page(bus, q, "scheduled", group="g", cursor=cursor)
            cursor = page.next
            if cursor is None:
                break

    Lanes keep their order and counts exact; one ``deleted_many`` event per page names the ids.
    Running and dead jobs are never in these sets.

    A cancelled call may or may not have deleted its page; call again with the same cursor
    (the jobs it deleted are gone, so they are not counted twice)."""
    call = protocol.delete_page_call(
        bus.keys(queue), str(state), group=group, older_than_ms=older_than_ms, limit=limit,
        cursor=cursor,
    )  # fmt: skip
    return await bus.run(call)


async def cancel(bus: Bus, queue: str, job_id: str, reason: str = "", by: str = "") -> Cancelled:
    """Cancel a job, from any process: ``CANCELLED``, ``ALREADY_DONE`` (it is dead or cancelled
    already) or ``NOT_FOUND`` (no such job: never admitted, or acked, whose row is deleted).

    A waiting job (pending, in a lane, scheduled, a retry waiting out its backoff) is taken out
    and never runs; a lane keeps its order. An active job's lease is taken from its holder at
    once: its ack, retry or defer answers ``STALE`` and the reaper never runs it again, even if
    its holder dies; the holder's consumer sees the cancel within its ``cancel_poll_s`` and
    cancels that handler (the handler sees ``trio.Cancelled``), and the lane's slot is free at
    once. Either way the job is kept as ``cancelled`` (``get_job``, ``list_jobs(...,
    "cancelled")``, ``counts``; ``discard`` deletes it) with ``reason`` and ``by`` (who) in its
    ``last_error``, its event and, when the queue keeps an audit, its audit record. A cancel
    that races an ack has one winner: ``CANCELLED`` means the job's work was not acked.

    A cancelled call may or may not have cancelled the job; call again: ``ALREADY_DONE`` then
    means the first call went through (or that it died meanwhile: ``get_job`` tells)."""
    return await bus.run(protocol.cancel_call(bus.keys(queue), job_id, reason, by))


async def counts(bus: Bus, queue: str) -> Counts:
    """Jobs per state now, lanes, and running totals of completed, retried and dead jobs.
    O(1) on the server, whatever the number of lanes (a queue of an earlier layout is
    upgraded once first: ``echomq_trio._layouts``).

    Read only (but for that one count): a cancelled call changed nothing."""
    k = bus.keys(queue)
    return await run_current(bus, k, protocol.counts_call(k))


async def list_jobs(
    bus: Bus, queue: str, state: JobState | str, offset: int = 0, limit: int = 100
) -> list[JobInfo]:
    """Jobs in one state (``pending`` (the flat set; see ``lanes.jobs`` for a lane),
    ``scheduled``, ``active``, ``dead``), in set order. Read only: a cancelled call changed
    nothing."""
    call = protocol.inspect_state_call(bus.keys(queue), state, offset, limit)
    return await bus.run(call)


async def dead_jobs(bus: Bus, queue: str, offset: int = 0, limit: int = 100) -> list[JobInfo]:
    """Dead jobs, oldest death first, each with its attempts and last error. Read only: a
    cancelled call changed nothing."""
    return await list_jobs(bus, queue, "dead", offset, limit)


async def get_job(bus: Bus, queue: str, job_id: str) -> JobInfo | None:
    """One job's row, or ``None`` if there is none (never enqueued, or acked). Read only: a
    cancelled call changed nothing."""
    (info,) = await bus.run(protocol.inspect_ids_call(bus.keys(queue), [job_id]))
    return info


# --- results --------------------------------------------------------------------------------------


async def keep_results(bus: Bus, queue: str, ttl_ms: int) -> int:
    """Keep each job that finishes on ``queue`` from now on, with its handler's result
    (``Ack(result=...)``, or a returned ``str``/``bytes``), its finish time and attempts, for
    ``ttl_ms`` after it finishes (state ``completed``; the row expires by a key TTL), so that
    ``result`` and ``get_job`` can read it; ``0`` keeps none (the default: a finished job's row
    is deleted at once, and an ack costs what it always did). While results are kept, the end
    of each job (completed or dead) is published for ``result``'s waiters. Returns the TTL now
    in effect. A finished id cannot be enqueued again while its row is kept (``DUPLICATE``).

    A cancelled call may or may not have set it; calling again is always safe."""
    return await bus.run(protocol.keep_results_call(bus.keys(queue), ttl_ms))


async def results_kept(bus: Bus, queue: str) -> int:
    """How long ``queue`` keeps finished jobs with their results, ms (0: none). Read only."""
    return await bus.run(protocol.keep_results_call(bus.keys(queue)))


_READY = b"ready:"  # a waiter's own message: its subscription is live


def _ended(state: ResultState, queue: str, job_id: str) -> bool:
    """Whether the job ``state`` reads has ended with a result (``True``); ``False`` while it may
    still finish; raises the ``JobError`` of any other end."""
    match state.state:
        case "completed":
            return True
        case "dead":
            raise JobFailed(job_id, state.error or "")
        case "cancelled":  # a state another part of the bus writes; recognised by its word
            raise JobCancelled(job_id, state.error or "")
        case "":
            if not state.keeps_ms:
                raise ResultsNotKept(job_id, queue)
            raise JobNotFound(job_id, queue)
    if not state.keeps_ms:  # waiting, or running: nobody would be told when it finishes
        raise ResultsNotKept(job_id, queue)
    return False


_LIVE_FIRST_S, _LIVE_MOST_S = 0.01, 1.0  # a waiter's own message again after, doubling to


async def _live(bus: Bus, sub: Subscription, channel: str) -> None:
    """Return once ``sub`` (just subscribed to ``channel``) hears what is published on it: a
    message of the waiter's own, published after it subscribed, must come back to it. The bus's
    own transport returns from subscribing once the server has confirmed it, but a transport
    need not (glide's is not known to), and a message published before the server takes the
    subscription is heard by nobody: so a task publishes it again after 10 ms, 20 ms, ... at
    most a second apart, until it is heard (on the bus's own transport, the first time). The
    receive itself is never cancelled but to stop for good (glide's would lose the next
    message)."""
    mine = _READY + secrets.token_hex(8).encode()

    async def publish() -> None:
        wait_s = _LIVE_FIRST_S
        while True:
            await bus.command("PUBLISH", channel, mine)
            await trio.sleep(wait_s)
            wait_s = min(2 * wait_s, _LIVE_MOST_S)

    with raising_first(BusError):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(publish)
            while (await sub.receive()).data != mine:
                pass
            nursery.cancel_scope.cancel()


async def result(bus: Bus, queue: str, job_id: str, *, timeout_s: float) -> bytes | None:
    """Wait until job ``job_id`` of ``queue`` has finished and return its result (bytes; ``None``
    when its handler returned none), waiting at most ``timeout_s``. The queue must keep results
    (``keep_results``) from before the job finishes.

    No polling: it subscribes to the job's channel (on a client of its own), makes sure the
    subscription is live (a message of its own comes back), then reads the job's state (so a job
    that finished before the wait is found at once), then waits for the message its ack (or
    burial) publishes. Raises ``JobFailed`` (the job is dead; its
    ``error``), ``JobCancelled``, ``JobNotFound`` (no such job, or its result expired),
    ``ResultsNotKept`` and ``ResultTimedOut`` (``errors``; all ``JobError``), and ``BusError``
    for trouble with the server. ``ValueError``/``TypeError`` for a bad id or timeout, before
    any I/O.

    Read only: a cancelled wait changed nothing; wait again."""
    k = bus.keys(queue)
    channel = k.job(check_job_id(job_id))
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise TypeError(f"timeout_s must be a number of seconds, got {timeout_s!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    call = protocol.result_call(k, job_id)
    with trio.move_on_after(timeout_s):
        async with bus.subscribe(channels=[channel]) as sub:
            await _live(bus, sub, channel)
            while True:
                state = await bus.run(call)
                if _ended(state, queue, job_id):
                    return state.result
                while (await sub.receive()).data.startswith(_READY):
                    pass  # another waiter's; an end is any other word
    raise ResultTimedOut(job_id, timeout_s)


@attrs.frozen
class JobHandle:
    """A job to wait on or look at: ``JobHandle(bus, queue, (await enqueue(bus, queue,
    payload)).id)``. Holds no connection; plain ``enqueue`` costs nothing more for it."""

    bus: Bus = attrs.field(eq=False, repr=False)
    queue: str
    id: str

    async def result(self, timeout_s: float) -> bytes | None:
        """``jobs.result`` of this job."""
        return await result(self.bus, self.queue, self.id, timeout_s=timeout_s)

    async def info(self) -> JobInfo | None:
        """``jobs.get_job`` of this job."""
        return await get_job(self.bus, self.queue, self.id)
