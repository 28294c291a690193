"""Which queues a server holds, and a queue's own controls.

Which queues: every queue that was ever used has its ``meta`` hash (written by the first script
that touches the queue), so the queues are the keys that match ``keys.META_GLOB``, found with
SCAN a cursor step at a time (no one call walks every key; on a cluster, every primary in turn).
Read only.

Controls (one script each, atomic; the settings live in the queue's ``meta`` hash, which the
claim reads anyway, so a queue that uses neither pays nothing for them):

* ``pause``/``resume``: while a queue is paused its claims answer nothing, for flat and lane
  jobs alike; enqueues, schedules, the metronome's promotions and the settlement of jobs already
  running go on. A consumer parks on a paused queue as on an empty one; ``resume`` wakes it.
* ``set_expired``: what a claim does with a job it meets past its expiry (``expires_at`` /
  ``expires_in`` at enqueue): keep it dead with the reason ``"expired"`` (the default) or delete
  it (``"drop"``); counted in ``Counts.expired_total`` either way. Read with the claim's read of
  ``meta``.
* ``set_limit``: a cap on the queue's jobs in flight (leased: in ``active``) across every consumer
  and process, enforced in the claim script beside each lane's own limit. Settling a job under
  the cap wakes a parked consumer, so the cap is used to the full.
"""

from __future__ import annotations

from echomq_trio import protocol
from echomq_trio._partition_cap import TOTAL_FIELD
from echomq_trio.bus import Bus
from echomq_trio.keys import META_GLOB, queue_of_meta
from echomq_trio.results import QueueControl

__all__ = [
    "QueueControl",
    "control",
    "expired_setting",
    "pause",
    "queue_names",
    "resume",
    "set_expired",
    "set_limit",
]


async def queue_names(bus: Bus, *, count: int = 1000) -> list[str]:
    """Every queue on the server, sorted by name; ``count`` keys looked at per SCAN step."""
    found = (queue_of_meta(key) for key in await bus.transport.scan(META_GLOB, count=count))
    return sorted(name for name in found if name is not None)


async def pause(bus: Bus, queue: str) -> bool:
    """Pause the whole queue: from now on no consumer claims anything from it (jobs already
    claimed run and settle). ``True`` if this call paused it, ``False`` if it was paused.

    Idempotent: a cancelled call may or may not have paused the queue; call again."""
    return await bus.run(protocol.queue_pause_call(bus.keys(queue)))


async def resume(bus: Bus, queue: str) -> bool:
    """End the queue's pause and wake its parked consumers; ``True`` if it was paused.

    A cancelled call may or may not have resumed the queue; call again (``False`` then means
    the first call resumed it)."""
    return await bus.run(protocol.queue_resume_call(bus.keys(queue)))


async def set_limit(bus: Bus, queue: str, max_active: int | None) -> tuple[int | None, int]:
    """Cap the queue's jobs in flight at ``max_active`` (>= 1) across every consumer and process,
    or clear the cap (``None``). A claim then leases at most the cap less the jobs leased now; a
    cap lowered below them takes nothing back (they finish, and claims wait until fewer run).
    Jobs claimed ahead of their handlers (a consumer's prefetch) count as in flight. Returns the
    cap in effect and the jobs in flight now. On a partition of a partitioned queue it caps
    that partition alone, and while the queue has a total (``PartitionedQueue.set_limit``) the
    next round of its shares overwrites it.

    Idempotent: a cancelled call may or may not have set the cap; call again."""
    return await bus.run(protocol.queue_limit_call(bus.keys(queue), max_active))


async def set_expired(bus: Bus, queue: str, action: str) -> str:
    """What a claim does with a job of ``queue`` it meets past its expiry: ``"dead"`` (the
    default: the dead set, last error ``"expired"``, listed, replayed and bounded like any dead
    job) or ``"drop"`` (its row deleted: nothing kept but the count). Returns the setting in
    effect; ``ValueError`` for another word, before any I/O.

    Idempotent: a cancelled call may or may not have set it; call again."""
    return await bus.run(protocol.queue_expired_call(bus.keys(queue), action))


async def expired_setting(bus: Bus, queue: str) -> str:
    """``"dead"`` or ``"drop"``: see ``set_expired``. Read only."""
    return await bus.run(protocol.queue_expired_call(bus.keys(queue)))


async def control(bus: Bus, queue: str) -> QueueControl:
    """Whether the queue is paused (since when), its cap on jobs in flight and what a claim does
    with an expired job. Read only (one ``HMGET``). Of a partitioned queue's name
    (``echomq_trio.partitions``), the cap is the whole queue's total (``pq.set_limit``), not
    partition 0's share of it; its pause is partition 0's (``pq.pause`` pauses every one)."""
    paused, cap, expired, total = await bus.transport.command(
        "HMGET", bus.keys(queue).meta, "paused", "max_active", "expired", TOTAL_FIELD
    )
    if total is not None:
        cap = total
    return QueueControl(
        None if paused is None else int(paused),
        None if cap is None else int(cap),
        "drop" if expired in (b"drop", "drop") else "dead",
    )
