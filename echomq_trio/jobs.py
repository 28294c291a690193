"""Job transitions: one function per Lua script, each one round trip, each returning typed values.

States: ``pending`` (ready), ``scheduled`` (waiting for a time), ``active`` (leased to a worker),
``dead`` (out of attempts), ``cancelled`` (``cancel``: never to run, or run on); the transitions
between them are the table in
``echomq_trio/scripts/README.md``. An acked job's row is deleted, so a finished id may be used
again. Each function builds its script's call with ``protocol`` (which checks names, ids,
payloads of at most the bus's ``max_payload_bytes``, and times and delays of at most what a
sorted-set score holds exactly, raising ``ValueError`` or ``TypeError`` before any I/O, so
nothing is written), runs it, and parses the reply.

Cancellation: a script is atomic, so a cancelled call has either happened in full or not at all
on the server, and the caller cannot tell which; each function says how to find out or why
calling again is safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from functools import partial

from echomq_trio import audit, protocol
from echomq_trio._upgrade import run_counted
from echomq_trio.bus import Bus
from echomq_trio.clock import REAP_GRACE_MS
from echomq_trio.protocol import DEFAULT_KEY_TTL_MS, ENQUEUE_CHUNK, Item, When
from echomq_trio.results import (
    Admitted,
    Cancelled,
    ClockCarried,
    Counts,
    Extended,
    Job,
    JobInfo,
    Outcome,
    Promoted,
    Reaped,
)
from echomq_trio.states import JobState

__all__ = [
    "DEFAULT_KEY_TTL_MS",
    "ENQUEUE_CHUNK",
    "Admitted",
    "Cancelled",
    "ClockCarried",
    "Counts",
    "Extended",
    "Job",
    "JobInfo",
    "JobState",
    "Outcome",
    "Promoted",
    "Reaped",
    "ack",
    "ack_many",
    "cancel",
    "carry_clock",
    "claim",
    "clock_total",
    "counts",
    "dead_jobs",
    "defer",
    "discard",
    "enqueue",
    "enqueue_at",
    "enqueue_in",
    "enqueue_many",
    "extend",
    "get_job",
    "list_jobs",
    "promote",
    "reap",
    "release",
    "replay",
    "retry",
    "set_audit",
    "take_back",
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

    Concurrent calls for one queue coalesce into shared script calls (``echomq_trio._gather``):
    each caller still gets its own answer or its own error.

    A cancelled call may or may not have admitted the job (one cancelled while its coalesced
    batch was still gathering admitted nothing; one whose batch had gone out returns its
    answer); call again with the same ``job_id`` (or key): enqueue is idempotent, and
    ``DUPLICATE`` then means the first call went through (without a ``job_id`` or key, a second
    call admits a second job)."""
    if key is not None or timeout_ms is not None:  # its own script call
        items = protocol.with_ids([payload], job_id)
        (call,) = protocol.enqueue_calls(
            bus.keys(queue), items, bus.max_payload_bytes, key=key, key_ttl_ms=key_ttl_ms,
            timeout_ms=timeout_ms,
        )  # fmt: skip
        (out,) = await bus.run(call)
        return out
    item = protocol.checked_job(payload, job_id, bus.max_payload_bytes)  # a bad job fails here
    g = bus.gatherer(queue)
    try:
        return await g.enqueue(item, partial(_enqueue_batch, bus, queue))
    finally:
        bus.release_gatherer(queue, g)


async def _enqueue_batch(
    bus: Bus, queue: str, pairs: Sequence[tuple[str, bytes]], timeout_ms: int | None = None
) -> list[Admitted]:
    out: list[Admitted] = []
    for call in protocol.enqueue_checked_calls(bus.keys(queue), pairs, timeout_ms):
        admitted = await bus.run(call)
        out += admitted
    return out


async def enqueue_many(
    bus: Bus, queue: str, items: Iterable[Item], *, timeout_ms: int | None = None
) -> list[Admitted]:
    """Admit many jobs in one round trip (per ``ENQUEUE_CHUNK`` jobs); answers in input order.
    Each item is a payload (the bus mints its id) or a ``(job_id, payload)`` pair;
    ``timeout_ms`` (as for ``enqueue``) applies to all of them.

    A cancelled call may have admitted some chunks of ``ENQUEUE_CHUNK`` jobs (each chunk all or
    nothing); call again with the same ids: those admitted answer ``DUPLICATE``."""
    protocol.timeout_arg(timeout_ms)  # checked before any I/O
    pairs = protocol.checked_pairs(protocol.with_ids(items), bus.max_payload_bytes)
    return await _enqueue_batch(bus, queue, pairs, timeout_ms)


async def _schedule(
    bus: Bus,
    queue: str,
    payload: str | bytes,
    when: When,
    job_id: str | None,
    relative: bool,
    group: str | None,
    timeout_ms: int | None,
) -> Admitted:
    ((job, body),) = protocol.with_ids([payload], job_id)
    call = protocol.schedule_call(
        bus.keys(queue), [(job, body, when)], bus.max_payload_bytes, relative=relative,
        group=group, timeout_ms=timeout_ms,
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
) -> Admitted:
    """Schedule a job for an absolute time: ``Admitted(id, SCHEDULED, run_at_ms)``, or
    ``DUPLICATE``. The time is Unix ms (an int, or a float rounded UP to the next ms) or an
    aware ``datetime`` (rounded up to the next ms; a naive one raises ``ValueError``): rounding
    up means it never runs early. It is not claimable before then; a metronome moves it to
    pending (or into lane ``group``) when the server clock reaches it. ``job_id`` as for
    ``enqueue``.

    A cancelled call may or may not have scheduled the job; call again with the same
    ``job_id``: ``DUPLICATE`` then means the first call went through (``get_job`` shows its
    run-at)."""
    return await _schedule(bus, queue, payload, run_at_ms, job_id, False, group, timeout_ms)


async def enqueue_in(
    bus: Bus,
    queue: str,
    payload: str | bytes,
    delay_ms: int | float | timedelta,
    *,
    job_id: str | None = None,
    group: str | None = None,
    timeout_ms: int | None = None,
) -> Admitted:
    """Schedule a job ``delay_ms`` from now, where now is the server's clock, not this host's:
    ms (an int, or a float rounded UP to the next ms) or a ``timedelta`` (rounded up). Answers
    as ``enqueue_at``.

    A cancelled call may or may not have scheduled the job; call again with the same
    ``job_id``: ``DUPLICATE`` then means the first call went through (``get_job`` shows its
    run-at)."""
    return await _schedule(bus, queue, payload, delay_ms, job_id, True, group, timeout_ms)


async def promote(
    bus: Bus,
    queue: str,
    batch: int = 1000,
    *,
    lateness: bool = False,
    witness: tuple[str, str, str] | None = None,
) -> Promoted:
    """Move up to ``batch`` due scheduled jobs to pending (or their lanes), and put lanes whose
    wait has ended back in rotation. With ``lateness`` the answer also says how late (server
    clock) each moved job was (``Promoted.lateness_ms``). With ``witness``
    (``clock.Witness.args``) a step of the server clock since the caller's last reading is
    recorded; while a step's waits are being carried nothing is moved and the answer says so
    (``Promoted.carrying``: call ``carry_clock``).

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
    runs within a period (see the README's "When the server clock steps"). The metronome calls
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
    interleaved with the flat pending set, oldest first within each.

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
    O(1) on the server, whatever the number of lanes (a queue written by an earlier version
    has its lanes counted once first: ``echomq_trio._upgrade``).

    Read only (but for that one count): a cancelled call changed nothing."""
    k = bus.keys(queue)
    return await run_counted(bus, k, protocol.counts_call(k))


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
