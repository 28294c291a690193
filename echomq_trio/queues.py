"""Which queues a server holds: every queue that was ever used has its ``meta`` hash (written by
the first script that touches the queue), so the queues are the keys that match
``keys.META_GLOB``, found with SCAN a cursor step at a time (no one call walks every key; on a
cluster, every primary in turn). Read only."""

from __future__ import annotations

from echomq_trio.bus import Bus
from echomq_trio.keys import META_GLOB, queue_of_meta

__all__ = ["queue_names"]


async def queue_names(bus: Bus, *, count: int = 1000) -> list[str]:
    """Every queue on the server, sorted by name; ``count`` keys looked at per SCAN step."""
    found = (queue_of_meta(key) for key in await bus.transport.scan(META_GLOB, count=count))
    return sorted(name for name in found if name is not None)
