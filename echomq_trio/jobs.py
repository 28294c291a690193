"""Job transitions: one function per Lua script, each one round trip, each returning typed values.

States: ``pending`` (ready), ``scheduled`` (waiting for a time), ``active`` (leased to a worker),
``dead`` (out of attempts). An acked job's row is deleted, so a finished id may be used again.
Names, ids, payloads (at most the bus's ``max_payload_bytes``) and numbers (times and delays at
most what a sorted-set score holds exactly, see ``keys.check_ms``) are checked before any I/O;
bad ones raise ``ValueError`` or ``TypeError`` and nothing is written.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import attrs

from echomq_trio.bus import Bus
from echomq_trio.keys import (
    as_text,
    check_group,
    check_int,
    check_job_id,
    check_ms,
    check_name,
    check_payload,
)

__all__ = [
    "DEFAULT_KEY_TTL_MS",
    "ENQUEUE_CHUNK",
    "Counts",
    "Extended",
    "Job",
    "JobInfo",
    "Outcome",
    "Promoted",
    "Reaped",
    "Scheduled",
    "ack",
    "ack_many",
    "claim",
    "counts",
    "dead_jobs",
    "defer",
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
]

ENQUEUE_CHUNK = 10_000  # jobs per script call, so one call never holds the server for long
DEFAULT_KEY_TTL_MS = 86_400_000  # how long an idempotency key is remembered: one day


class Outcome(enum.StrEnum):
    """What a transition did. The vocabulary follows the original's return atoms."""

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


@attrs.frozen
class Scheduled:
    """Answer of ``enqueue_at``/``enqueue_in``: ``run_at_ms`` (server clock) unless a duplicate."""

    outcome: Outcome
    run_at_ms: int | None


@attrs.frozen
class Job:
    """A claimed job. ``token`` (the lease number) is the fencing token: present it to settle
    the job. ``attempts`` counts the attempts spent, this one included."""

    queue: str
    id: str
    payload: bytes
    attempts: int
    token: int
    lease_deadline_ms: int
    group: str | None = None

    @property
    def text(self) -> str:
        """The payload decoded as UTF-8."""
        return self.payload.decode()


@attrs.frozen
class Promoted:
    moved: int
    lanes_resumed: int  # lanes whose wait ended
    next_due_ms: int | None  # earliest run-at or lane wait still ahead
    server_now_ms: int


@attrs.frozen
class Reaped:
    reaped: int
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


@attrs.frozen
class JobInfo:
    """A job row as stored. ``score_ms`` is the run-at (scheduled), lease deadline (active) or
    time of death (dead)."""

    id: str
    state: str
    attempts: int
    payload: bytes
    last_error: str | None
    score_ms: int | None
    group: str | None = None


async def enqueue(
    bus: Bus,
    queue: str,
    job_id: str,
    payload: str | bytes,
    *,
    key: str | None = None,
    key_ttl_ms: int = DEFAULT_KEY_TTL_MS,
) -> Outcome:
    """Admit one job to pending: ``ENQUEUED``, or ``DUPLICATE`` (a live job has this id).

    ``key`` is an idempotency key: if it was used in the last ``key_ttl_ms`` (even by a job
    that has since finished) the answer is ``DUPLICATE`` and nothing changes; otherwise the job
    is admitted and the key remembered, in the same step. A retried fan-out uses it to admit
    each of its jobs once."""
    k = bus.keys(queue)
    args = [k.prefix, *_guard(key, key_ttl_ms), *_pairs([(job_id, payload)], bus.max_payload_bytes)]
    return _admitted(await bus.wire.script("enqueue", [k.pending], args))[0]


def _guard(key: str | None, key_ttl_ms: int) -> list[str]:
    """The script arguments of an optional idempotency key: ``[key, ttl]``, ``["", ""]``."""
    ttl = str(check_int("key_ttl_ms", key_ttl_ms, 1))
    return ["", ""] if key is None else [check_name("idempotency key", key), ttl]


def _pairs(items: Iterable[tuple[str, str | bytes]], max_bytes: int) -> list[str | bytes]:
    flat: list[str | bytes] = []
    for job_id, payload in items:
        flat.append(check_job_id(job_id))
        flat.append(check_payload(payload, max_bytes))
    return flat


def _admitted(codes: Sequence[int]) -> list[Outcome]:
    return [Outcome.ENQUEUED if c == 1 else Outcome.DUPLICATE for c in codes]


async def enqueue_many(
    bus: Bus, queue: str, items: Iterable[tuple[str, str | bytes]]
) -> list[Outcome]:
    """Admit many jobs in one round trip (per ``ENQUEUE_CHUNK`` jobs); answers in input order."""
    k = bus.keys(queue)
    flat = _pairs(items, bus.max_payload_bytes)
    out: list[Outcome] = []
    step = 2 * ENQUEUE_CHUNK
    for start in range(0, len(flat), step):
        codes = await bus.wire.script(
            "enqueue", [k.pending], [k.prefix, "", "", *flat[start : start + step]]
        )
        out.extend(_admitted(codes))
    return out


async def _schedule(
    bus: Bus,
    queue: str,
    mode: str,
    items: Sequence[tuple[str, str | bytes, int]],
    group: str | None,
) -> list[Scheduled]:
    k = bus.keys(queue)
    flat: list[str | bytes] = []
    for job_id, payload, when in items:
        flat += [check_job_id(job_id), check_payload(payload, bus.max_payload_bytes), str(when)]
    lane = "" if group is None else check_group(group)
    codes = await bus.wire.script("schedule", [k.schedule], [k.prefix, mode, lane, *flat])
    return [
        Scheduled(Outcome.DUPLICATE, None) if c < 0 else Scheduled(Outcome.SCHEDULED, int(c))
        for c in codes
    ]


async def enqueue_at(
    bus: Bus,
    queue: str,
    job_id: str,
    payload: str | bytes,
    run_at_ms: int,
    *,
    group: str | None = None,
) -> Scheduled:
    """Schedule a job for an absolute time (Unix ms). It is not claimable before then; a
    metronome moves it to pending (or into lane ``group``) when the server clock reaches it."""
    when = check_ms("run_at_ms", run_at_ms, absolute=True)
    (out,) = await _schedule(bus, queue, "at", [(job_id, payload, when)], group)
    return out


async def enqueue_in(
    bus: Bus,
    queue: str,
    job_id: str,
    payload: str | bytes,
    delay_ms: int,
    *,
    group: str | None = None,
) -> Scheduled:
    """Schedule a job ``delay_ms`` from now, where now is the server's clock, not this host's."""
    when = check_ms("delay_ms", delay_ms)
    (out,) = await _schedule(bus, queue, "in", [(job_id, payload, when)], group)
    return out


async def promote(bus: Bus, queue: str, batch: int = 1000) -> Promoted:
    """Move up to ``batch`` due scheduled jobs to pending (or their lanes), and put lanes whose
    wait has ended back in rotation."""
    k = bus.keys(queue)
    moved, lanes, nxt, now = await bus.wire.script(
        "promote", [k.schedule], [k.prefix, str(check_int("batch", batch, 1))]
    )
    return Promoted(int(moved), int(lanes), None if nxt < 0 else int(nxt), int(now))


async def claim(bus: Bus, queue: str, batch: int = 1, lease_ms: int = 30_000) -> list[Job]:
    """Lease up to ``batch`` jobs for ``lease_ms`` in one round trip: lanes round-robin,
    interleaved with the flat pending set, oldest first within each."""
    k = bus.keys(queue)
    raw = await bus.wire.script(
        "claim",
        [k.pending],
        [k.prefix, str(check_int("batch", batch, 1)), str(check_ms("lease_ms", lease_ms, 1))],
    )
    deadline = int(raw[0])
    return [
        Job(
            queue,
            as_text(raw[i]),
            raw[i + 1],
            int(raw[i + 2]),
            int(raw[i + 3]),
            deadline,
            as_text(raw[i + 4]) or None,
        )
        for i in range(1, len(raw), 5)
    ]


_ACK = {1: Outcome.ACKED, 0: Outcome.STALE, -1: Outcome.GONE}


def _noted(items: Sequence[tuple[str, int] | tuple[str, int, str]]) -> list[str]:
    flat: list[str] = []
    for item in items:
        job_id, token = item[0], item[1]
        note = item[2] if len(item) > 2 else ""
        flat += [check_job_id(job_id), str(check_int("token", token, 0)), str(note)]
    return flat


def _tokens(items: Sequence[tuple[str, int]]) -> list[str]:
    flat: list[str] = []
    for job_id, token in items:
        flat += [check_job_id(job_id), str(check_int("token", token, 0))]
    return flat


async def ack(bus: Bus, queue: str, job_id: str, token: int, note: str = "") -> Outcome:
    """Finish a job: ``ACKED``; ``STALE`` if another claim holds it now; ``GONE`` if no row.
    ``note`` goes into the queue's audit record, when it keeps one."""
    (out,) = await ack_many(bus, queue, [(job_id, token, note)])
    return out


async def ack_many(
    bus: Bus, queue: str, items: Sequence[tuple[str, int] | tuple[str, int, str]]
) -> list[Outcome]:
    """Ack several jobs in one round trip: ``(id, token)`` or ``(id, token, note)`` each;
    answers in input order."""
    k = bus.keys(queue)
    flat = _noted(items)
    if not flat:
        return []
    codes = await bus.wire.script("ack", [k.active], [k.prefix, *flat])
    return [_ACK[c] for c in codes]


_RETRY = {1: Outcome.SCHEDULED, 2: Outcome.DEAD, 0: Outcome.STALE, -1: Outcome.GONE}


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
    """
    k = bus.keys(queue)
    code = await bus.wire.script(
        "retry",
        [k.active],
        [
            k.prefix,
            check_job_id(job_id),
            str(check_int("token", token, 0)),
            str(check_ms("delay_ms", delay_ms)),
            str(check_int("max_attempts", max_attempts, 1)),
            str(error),
            "1" if buried else "0",
        ],
    )
    return _RETRY[code]


async def set_audit(bus: Bus, queue: str, enabled: bool = True) -> None:
    """Make the queue keep an audit: every job settled from now on (acked, or buried dead)
    appends its record to the stream ``emq:{q}:audit`` in the same script that settles it, so
    no job is settled without its record. Read it with ``events`` functions, ``stream="audit"``.
    The stream is never trimmed by the bus; its reader trims what it has stored."""
    k = bus.keys(queue)
    await bus.wire.script("audit_enable", [k.prefix + "meta"], ["1" if enabled else "0"])


_DEFER = {1: Outcome.DEFERRED, 0: Outcome.STALE, -1: Outcome.GONE}


async def defer(
    bus: Bus, queue: str, job_id: str, token: int, delay_ms: int, reason: str = ""
) -> Outcome:
    """Put a held job back to wait ``delay_ms`` without spending an attempt: ``DEFERRED``.

    A lane job keeps its place at the head of its lane and the lane waits (other lanes go on);
    a flat job waits on the schedule. ``STALE``/``GONE`` when the lease is not held.
    """
    k = bus.keys(queue)
    code = await bus.wire.script(
        "defer",
        [k.active],
        [
            k.prefix,
            check_job_id(job_id),
            str(check_int("token", token, 0)),
            str(check_ms("delay_ms", delay_ms)),
            str(reason),
        ],
    )
    return _DEFER[code]


async def extend(bus: Bus, queue: str, items: Sequence[tuple[str, int]], lease_ms: int) -> Extended:
    """Renew the leases of held jobs to ``lease_ms`` from now; reports those no longer held."""
    k = bus.keys(queue)
    flat = _tokens(items)
    raw = await bus.wire.script(
        "extend", [k.active], [k.prefix, str(check_ms("lease_ms", lease_ms, 1)), *flat]
    )
    return Extended(int(raw[0]), tuple(as_text(x) for x in raw[1:]))


async def reap(bus: Bus, queue: str, batch: int = 1000) -> Reaped:
    """Return up to ``batch`` jobs whose lease expired to pending (attempts unchanged)."""
    k = bus.keys(queue)
    n, now = await bus.wire.script(
        "reap", [k.active], [k.prefix, str(check_int("batch", batch, 1))]
    )
    return Reaped(int(n), int(now))


async def release(bus: Bus, queue: str, items: Sequence[tuple[str, int]]) -> int:
    """Hand held jobs back to pending at once without counting the interrupted attempt."""
    k = bus.keys(queue)
    flat = _tokens(items)
    if not flat:
        return 0
    return int(await bus.wire.script("release", [k.active], [k.prefix, *flat]))


_REPLAY = {1: Outcome.REPLAYED, 0: Outcome.NOT_DEAD, -1: Outcome.GONE}


async def replay(bus: Bus, queue: str, job_id: str) -> Outcome:
    """Move a dead job back to pending with its attempts reset (its last error is kept)."""
    k = bus.keys(queue)
    code = await bus.wire.script("replay", [k.dead], [k.prefix, check_job_id(job_id)])
    return _REPLAY[code]


async def counts(bus: Bus, queue: str) -> Counts:
    """Jobs per state now, lanes, and running totals of completed, retried and dead jobs."""
    k = bus.keys(queue)
    raw = await bus.wire.script("counts", [k.pending], [k.prefix])
    values = [int(x) for x in raw]
    return Counts(bool(values[0]), *values[1:])


_SETS = {"pending": "pending", "scheduled": "schedule", "active": "active", "dead": "dead"}


def _info(row: Sequence[object]) -> JobInfo:
    job_id, state, attempts, payload, last_error, score, group = row
    err = as_text(last_error)
    sc = as_text(score)
    return JobInfo(
        id=as_text(job_id),
        state=as_text(state),
        attempts=int(as_text(attempts)),
        payload=payload if isinstance(payload, bytes) else str(payload).encode(),
        last_error=err or None,
        score_ms=int(float(sc)) if sc else None,
        group=as_text(group) or None,
    )


async def _inspect_set(bus: Bus, queue: str, suffix: str, offset: int, limit: int) -> list[JobInfo]:
    k = bus.keys(queue)
    rows = await bus.wire.script(
        "inspect",
        [k.pending],
        [
            k.prefix,
            "set",
            suffix,
            str(check_int("offset", offset, 0)),
            str(check_int("limit", limit, 1)),
        ],
    )
    return [_info(r) for r in rows]


async def list_jobs(
    bus: Bus, queue: str, state: str, offset: int = 0, limit: int = 100
) -> list[JobInfo]:
    """Jobs in one state (``pending`` (the flat set; see ``lanes.jobs`` for a lane),
    ``scheduled``, ``active``, ``dead``), in set order."""
    if state not in _SETS:
        raise ValueError(f"state must be one of {sorted(_SETS)}, got {state!r}")
    return await _inspect_set(bus, queue, _SETS[state], offset, limit)


async def dead_jobs(bus: Bus, queue: str, offset: int = 0, limit: int = 100) -> list[JobInfo]:
    """Dead jobs, oldest death first, each with its attempts and last error."""
    return await list_jobs(bus, queue, "dead", offset, limit)


async def get_job(bus: Bus, queue: str, job_id: str) -> JobInfo | None:
    """One job's row, or ``None`` if there is none (never enqueued, or acked)."""
    k = bus.keys(queue)
    (row,) = await bus.wire.script("inspect", [k.pending], [k.prefix, "ids", check_job_id(job_id)])
    info = _info(row)
    return None if info.state == "" else info
