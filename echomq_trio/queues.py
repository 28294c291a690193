"""Which queues a server holds: every queue that was ever used has its ``meta`` hash
(``emq:{q}:meta``, written by the first script that touches the queue), so the queues are the
keys that match ``emq:{*}:meta``, found with SCAN a cursor step at a time (no one call walks
every key; on a cluster, every primary in turn). Read only."""

from __future__ import annotations

from echomq_trio.bus import Bus
from echomq_trio.keys import queue_keys

__all__ = ["META_PATTERN", "queue_name", "queue_names"]

META_PATTERN = "emq:{*}:meta"


def queue_name(key: str) -> str | None:
    """The queue whose ``meta`` key ``key`` is, or ``None`` for any other key."""
    if not (key.startswith("emq:{") and key.endswith("}:meta")):
        return None
    try:
        name = key[len("emq:{") : -len("}:meta")]
        return name if queue_keys(name).meta == key else None
    except ValueError:  # not a name the bus gives a queue
        return None


async def queue_names(bus: Bus, *, count: int = 1000) -> list[str]:
    """Every queue on the server, sorted by name; ``count`` keys looked at per SCAN step."""
    found = (queue_name(key) for key in await bus.wire.scan(META_PATTERN, count=count))
    return sorted(name for name in found if name is not None)
