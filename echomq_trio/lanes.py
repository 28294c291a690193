"""Fair lanes: one lane per group (a chat, a tenant), served round-robin, FIFO within a lane
(highest priority first, where jobs have one).

A lane may have a concurrency limit (jobs in flight at once; limit 1 makes it strictly
ordered: a retried or deferred job returns to the head of its lane and the lane waits, while
other lanes go on), a weight (jobs per turn), a pause, and a wait until a time
(``pause_until``: the primitive for rate-limit deferral and Telegram 429 pauses; the metronome
brings the lane back by itself). Consumers claim lanes and the flat pending set together.

Each function builds its script's call with ``protocol`` (input checked before any I/O), runs
it and parses the reply. A script is atomic: a cancelled call has happened in full or not at
all, and each function says how to find out or why calling again is safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from echomq_trio import protocol
from echomq_trio._layouts import run_current
from echomq_trio.bus import Bus
from echomq_trio.protocol import DEFAULT_KEY_TTL_MS, LANE_PAGE_MAX, ExpiresAt, ExpiresIn, Item
from echomq_trio.results import Admitted, JobInfo, LanePage, LaneStatus
from echomq_trio.sequence import Seq

__all__ = [
    "DEFAULT_KEY_TTL_MS",
    "LANE_PAGE_MAX",
    "Admitted",
    "LanePage",
    "LaneStatus",
    "Seq",
    "configure",
    "enqueue",
    "enqueue_many",
    "jobs",
    "pause",
    "pause_until",
    "resume",
    "status",
    "status_page",
]


async def enqueue(
    bus: Bus,
    queue: str,
    group: str,
    payload: str | bytes,
    *,
    job_id: str | None = None,
    limit: int | None = None,
    key: str | None = None,
    key_ttl_ms: int = DEFAULT_KEY_TTL_MS,
    seq: Seq | None = None,
    timeout_ms: int | None = None,
    priority: int = 0,
    expires_at: ExpiresAt | None = None,
    expires_in: ExpiresIn | None = None,
    debounce: str | None = None,
    debounce_ms: int | None = None,
    max_wait_ms: int | None = None,
) -> Admitted:
    """Admit a job to ``group``'s lane: ``Admitted(id, ENQUEUED)`` or ``DUPLICATE``. The bus
    mints its ``JOB`` id unless ``job_id`` gives one. ``limit`` also sets the lane's
    concurrency limit in the same step (``limit=1``: strictly ordered). ``key`` is an
    idempotency key, as for ``jobs.enqueue``: used within ``key_ttl_ms`` → ``DUPLICATE``.
    ``seq`` is a number in a numbered stream (``Seq(scope, number)``, see
    ``echomq_trio.sequence``): a number the scope admitted lately, or one below its window, →
    ``DUPLICATE``; what the bus keeps for it grows with the scopes, not with the jobs.
    ``timeout_ms`` is the job's deadline per attempt, as for ``jobs.enqueue``, and
    ``expires_at``/``expires_in`` its expiry: an expired job is never leased and never holds up
    its lane (a strictly ordered lane goes on with the job behind it). ``priority`` orders the
    job within its lane (higher first, equal ones in id order, kept across retries, deferrals
    and releases), as for ``jobs.enqueue``; it does not move the lane's turn: other lanes are
    served round-robin as before.

    ``debounce``, ``debounce_ms`` and ``max_wait_ms`` as for ``jobs.enqueue``: one job per quiet
    period of the key, which waits on the schedule and then joins this lane (the key is the
    queue's: the lane of the period's first enqueue is the job's). Refused with ``job_id``,
    ``key``, ``seq`` and ``limit`` (``ValueError``).

    A cancelled call may or may not have admitted the job; call again with the same ``job_id``
    (or key, or seq): enqueue is idempotent, and ``DUPLICATE`` then means the first call went
    through."""
    expires = protocol.expiry_arg(expires_at, expires_in)
    wait = protocol.check_debounce(
        debounce, debounce_ms, max_wait_ms, job_id=job_id, key=key, seq=seq
    )
    if debounce is not None and wait is not None:
        if limit is not None:
            raise ValueError("debounce takes no limit: set the lane's with lanes.configure")
        ((job, body),) = protocol.with_ids([payload])
        debounced = protocol.debounce_call(
            bus.keys(queue), debounce, (job, body), bus.max_payload_bytes, debounce_ms=wait,
            max_wait_ms=max_wait_ms, group=group, timeout_ms=timeout_ms, expires=expires,
            priority=priority,
        )  # fmt: skip
        return await bus.run(debounced)
    items = protocol.with_ids([payload], job_id)
    call = protocol.lane_enqueue_call(
        bus.keys(queue), group, items, bus.max_payload_bytes, limit=limit, key=key,
        key_ttl_ms=key_ttl_ms, seq=seq, timeout_ms=timeout_ms, priority=priority,
        expires=expires,
    )  # fmt: skip
    (out,) = await bus.run(call)
    return out


async def enqueue_many(
    bus: Bus,
    queue: str,
    group: str,
    items: Iterable[Item],
    *,
    limit: int | None = None,
    timeout_ms: int | None = None,
    priority: int = 0,
    expires_at: ExpiresAt | None = None,
    expires_in: ExpiresIn | None = None,
) -> list[Admitted]:
    """Admit several jobs to one lane in one round trip, in order. Each item is a payload (the
    bus mints its id) or a ``(job_id, payload)`` pair; ``timeout_ms`` (each job's deadline per
    attempt), ``priority`` and ``expires_at``/``expires_in`` (as for ``jobs.enqueue``) apply to
    all of them.

    A cancelled call admitted all of them or none; call again with the same ids: they answer
    ``DUPLICATE`` if the first call went through."""
    expires = protocol.expiry_arg(expires_at, expires_in)
    pairs = protocol.with_ids(items)
    call = protocol.lane_enqueue_call(
        bus.keys(queue), group, pairs, bus.max_payload_bytes, limit=limit,
        timeout_ms=timeout_ms, priority=priority, expires=expires,
    )  # fmt: skip
    return await bus.run(call)


async def pause(bus: Bus, queue: str, group: str) -> None:
    """Hold a lane until ``resume``; its jobs stay in place, other lanes go on.

    Idempotent: a cancelled call may or may not have paused the lane; call again."""
    await bus.run(protocol.lane_pause_call(bus.keys(queue), group))


async def pause_until(bus: Bus, queue: str, group: str, at_ms: int) -> int:
    """Hold a lane until ``at_ms`` (Unix ms, server clock); it comes back by itself then (a
    metronome must run). A wait only ever extends; returns the wait's end in effect.

    Idempotent: a cancelled call may or may not have set the wait; call again."""
    call = protocol.lane_pause_until_call(bus.keys(queue), group, at_ms)
    return await bus.run(call)


async def resume(bus: Bus, queue: str, group: str) -> bool:
    """End a lane's pause and wait; ``True`` if it was held.

    A cancelled call may or may not have resumed the lane; call again (``False`` then means the
    first call resumed it, or the lane was not held)."""
    call = protocol.lane_resume_call(bus.keys(queue), group)
    return await bus.run(call)


async def configure(
    bus: Bus, queue: str, group: str, *, limit: int | None = None, weight: int | None = None
) -> tuple[int | None, int]:
    """Set a lane's concurrency ``limit`` (0 clears it) and weight (jobs per turn, >= 1);
    ``None`` keeps the current value. Returns the ``(limit, weight)`` in effect.

    Idempotent: a cancelled call may or may not have set them; call again."""
    call = protocol.lane_config_call(bus.keys(queue), group, limit=limit, weight=weight)
    return await bus.run(call)


async def status(bus: Bus, queue: str, groups: Sequence[str] = ()) -> list[LaneStatus]:
    """Lanes' depth, in-flight count, settings and holds: of the ``groups`` named (one call), or
    when none are named of every listed lane (with waiting jobs, jobs in flight, a pause or a
    wait), in name order, read a page at a time (``status_page``), so the server never walks
    them all in one call (a lane met on two pages is given once, as last read). Read only: a
    cancelled call changed nothing."""
    k = bus.keys(queue)
    if groups:
        return (await bus.run(protocol.lane_status_call(k, groups))).lanes
    found: dict[str, LaneStatus] = {}
    after: str | None = ""
    while after is not None:
        page = await status_page(bus, queue, after, protocol.LANE_PAGE_MAX)
        found |= {lane.group: lane for lane in page.lanes}
        after = page.next
    return [found[group] for group in sorted(found)]


async def status_page(bus: Bus, queue: str, after: str = "", count: int = 100) -> LanePage:
    """At most ``count`` (up to ``LANE_PAGE_MAX``, 1,000) more lanes of the lane index from the
    cursor ``after`` (``''``: the first page; else the ``next`` of the page before), each with
    its status, sorted by name within the page, and the cursor of the page after (``None``
    after the last). Listed lanes are those with waiting jobs, jobs in flight, a pause or a
    wait. The index is a hash paged by ``HSCAN``: pages come in its order, not by name, and a
    lane listed from the first page to the last is seen at least once (a resize of the hash
    while the pages go can repeat one, or rarely, shrinking it, miss one); a lane that comes or
    goes between pages may or may not be seen. O(count) on the server. Read only: a cancelled
    call changed nothing."""
    k = bus.keys(queue)
    call = protocol.lane_status_page_call(k, after, count)
    return await run_current(bus, k, call)


async def jobs(
    bus: Bus, queue: str, group: str, offset: int = 0, limit: int = 100
) -> list[JobInfo]:
    """The jobs waiting in a lane, in the order they will be claimed. Read only: a cancelled
    call changed nothing."""
    call = protocol.inspect_lane_call(bus.keys(queue), group, offset, limit)
    return await bus.run(call)
