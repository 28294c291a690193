"""Retention: how much history a queue keeps, stored in the queue's meta and applied by its
scripts. The dead set can be bounded by count and by age: the script that buries a job drops
the oldest dead jobs over a bound, at most 16 per call, so it stays O(log n) and the set
converges as jobs keep dying. The events stream can be turned off, or capped at another length
(about 10,000 entries by default). Completed, retried and dead totals are always kept
(``jobs.counts``)."""

from __future__ import annotations

from echomq_trio import protocol
from echomq_trio.bus import Bus
from echomq_trio.results import Retention

__all__ = ["Retention", "configure", "get"]


async def configure(
    bus: Bus,
    queue: str,
    *,
    dead_max: int | None = None,
    dead_max_age_ms: int | None = None,
    events: bool = True,
    events_max_len: int | None = None,
) -> Retention:
    """Set the queue's retention (every setting at once; ``None``: no bound, or for
    ``events_max_len`` the bus's default) and return it. Takes effect with the next script that
    applies it: a dead set over a new bound shrinks as jobs die, at most 16 per death. The
    cancelled jobs kept (``jobs.cancel``) have the same bounds, applied as jobs are cancelled.

    A cancelled call may or may not have set it; calling again is always safe."""
    call = protocol.retention_call(
        bus.keys(queue), dead_max=dead_max, dead_max_age_ms=dead_max_age_ms,
        events=events, events_max_len=events_max_len,
    )  # fmt: skip
    return await bus.run(call)


async def get(bus: Bus, queue: str) -> Retention:
    """The queue's retention. Read only: a cancelled call changed nothing."""
    call = protocol.retention_call(bus.keys(queue), read_only=True)
    return await bus.run(call)
