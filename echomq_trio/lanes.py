"""Fair lanes: one lane per group (a chat, a tenant), served round-robin, FIFO within a lane.

A lane may have a concurrency limit (jobs in flight at once; limit 1 makes it strictly
ordered: a retried or deferred job returns to the head of its lane and the lane waits, while
other lanes go on), a weight (jobs per turn), a pause, and a wait until a time
(``pause_until``: the primitive for rate-limit deferral and Telegram 429 pauses; the metronome
brings the lane back by itself). Consumers claim lanes and the flat pending set together.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from echomq_trio.bus import Bus
from echomq_trio.jobs import (
    DEFAULT_KEY_TTL_MS,
    JobInfo,
    Outcome,
    _admitted,
    _guard,
    _inspect_set,
    _pairs,
)
from echomq_trio.keys import as_text, check_group, check_int, check_ms

__all__ = [
    "LaneStatus",
    "configure",
    "enqueue",
    "enqueue_many",
    "jobs",
    "pause",
    "pause_until",
    "resume",
    "status",
]


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


async def enqueue(
    bus: Bus,
    queue: str,
    group: str,
    job_id: str,
    payload: str | bytes,
    *,
    limit: int | None = None,
    key: str | None = None,
    key_ttl_ms: int = DEFAULT_KEY_TTL_MS,
) -> Outcome:
    """Admit a job to ``group``'s lane: ``ENQUEUED`` or ``DUPLICATE``. ``limit`` also sets the
    lane's concurrency limit in the same step (``limit=1``: strictly ordered). ``key`` is an
    idempotency key, as for ``jobs.enqueue``: used within ``key_ttl_ms`` → ``DUPLICATE``."""
    guard = _guard(key, key_ttl_ms)
    (out,) = await _enqueue(bus, queue, group, [(job_id, payload)], limit, guard)
    return out


async def enqueue_many(
    bus: Bus,
    queue: str,
    group: str,
    items: Iterable[tuple[str, str | bytes]],
    *,
    limit: int | None = None,
) -> list[Outcome]:
    """Admit several jobs to one lane in one round trip, in order."""
    return await _enqueue(bus, queue, group, items, limit, ["", ""])


async def _enqueue(
    bus: Bus,
    queue: str,
    group: str,
    items: Iterable[tuple[str, str | bytes]],
    limit: int | None,
    guard: list[str],
) -> list[Outcome]:
    k = bus.keys(queue)
    lane = k.lane(group)
    flat = _pairs(items, bus.max_payload_bytes)
    lim = "" if limit is None else str(check_int("limit", limit, 1))
    codes = await bus.wire.script("lane_enqueue", [lane], [k.prefix, group, lim, *guard, *flat])
    return _admitted(codes)


async def pause(bus: Bus, queue: str, group: str) -> None:
    """Hold a lane until ``resume``; its jobs stay in place, other lanes go on."""
    k = bus.keys(queue)
    await bus.wire.script(
        "lane_pause", [k.prefix + "ring"], [k.prefix, check_group(group), "pause", ""]
    )


async def pause_until(bus: Bus, queue: str, group: str, at_ms: int) -> int:
    """Hold a lane until ``at_ms`` (Unix ms, server clock); it comes back by itself then (a
    metronome must run). A wait only ever extends; returns the wait's end in effect."""
    k = bus.keys(queue)
    at = str(check_ms("at_ms", at_ms, absolute=True))
    return int(
        await bus.wire.script(
            "lane_pause", [k.prefix + "ring"], [k.prefix, check_group(group), "until", at]
        )
    )


async def resume(bus: Bus, queue: str, group: str) -> bool:
    """End a lane's pause and wait; ``True`` if it was held."""
    k = bus.keys(queue)
    code = await bus.wire.script("lane_resume", [k.prefix + "ring"], [k.prefix, check_group(group)])
    return bool(code)


async def configure(
    bus: Bus, queue: str, group: str, *, limit: int | None = None, weight: int | None = None
) -> tuple[int | None, int]:
    """Set a lane's concurrency ``limit`` (0 clears it) and ``weight`` (jobs per turn, >= 1);
    ``None`` keeps the current value. Returns the ``(limit, weight)`` in effect."""
    k = bus.keys(queue)
    lim = "" if limit is None else str(check_int("limit", limit, 0))
    wt = "" if weight is None else str(check_int("weight", weight, 1))
    got_limit, got_weight = await bus.wire.script(
        "lane_config", [k.prefix + "ring"], [k.prefix, check_group(group), lim, wt]
    )
    return (int(got_limit) or None, int(got_weight))


async def status(bus: Bus, queue: str, groups: Sequence[str] = ()) -> list[LaneStatus]:
    """Lanes' depth, in-flight count, settings and holds (all known lanes when none named)."""
    k = bus.keys(queue)
    names = [check_group(g) for g in groups]
    rows = await bus.wire.script("lane_status", [k.prefix + "ring"], [k.prefix, *names])
    return [
        LaneStatus(
            group=as_text(r[0]),
            depth=int(r[1]),
            in_flight=int(r[2]),
            limit=int(r[3]) or None,
            weight=int(r[4]),
            paused=bool(r[5]),
            wait_until_ms=int(r[6]) or None,
            on_ring=bool(r[7]),
        )
        for r in rows
    ]


async def jobs(
    bus: Bus, queue: str, group: str, offset: int = 0, limit: int = 100
) -> list[JobInfo]:
    """The jobs waiting in a lane, in the order they will be claimed."""
    return await _inspect_set(bus, queue, "g:" + check_group(group), offset, limit)
