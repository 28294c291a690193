"""How ``echomq``'s commands name a queue: by its name, a partitioned queue as one queue.

Every command that takes QUEUE opens it here (``open_queue``: one ``HMGET`` of its ``meta``)
and works through the ``partitions.PartitionedQueue`` it gets, which routes each call to the
partition that holds what it names, or to every partition. A plain queue is a handle of one
partition, whose calls are the plain functions of ``jobs``, ``lanes`` and ``repeat``: its
output is as it always was. A partition's own name (``q~p1.<k>``) still names that partition
alone, for an operator who needs one; a line on stderr says which queue it is part of.
"""

from __future__ import annotations

import sys

from echomq_trio import lanes
from echomq_trio._partition_meta import membership
from echomq_trio._partitioning import partition_names
from echomq_trio.bus import Bus
from echomq_trio.partitions import PartitionedQueue
from echomq_trio.results import LaneStatus

__all__ = ["lanes_of", "open_queue"]


async def open_queue(bus: Bus, name: str) -> PartitionedQueue:
    """The queue ``name`` as one queue: every partition of a partitioned queue, or (``name``
    is a partition's) that partition alone, said on stderr."""
    meta = await membership(bus, name)
    if meta.of is not None and meta.of != name:
        print(f"echomq: {name} is partition {meta.index} of queue {meta.of}: this command sees "
              f"that partition alone (name {meta.of} for the whole queue)",
              file=sys.stderr, flush=True)  # fmt: skip
        return PartitionedQueue(bus, name, (name,))
    return PartitionedQueue(bus, name, partition_names(name, meta.partitions or 1))


async def lanes_of(pq: PartitionedQueue, limit: int) -> list[LaneStatus]:
    """``limit`` lanes of the queue by name, from each partition's lane index's first pages
    (never every lane of a large queue): the first ``limit`` names of every partition, merged."""
    found: dict[str, LaneStatus] = {}
    for queue in pq.names:
        found |= {lane.group: lane for lane in await _lanes(pq.bus, queue, limit)}
    return [found[group] for group in sorted(found)][:limit]


async def _lanes(bus: Bus, queue: str, limit: int) -> list[LaneStatus]:
    """``limit`` lanes of one partition (its lane index's first pages), by name."""
    found: dict[str, LaneStatus] = {}
    after: str | None = ""
    while after is not None and len(found) < limit:
        page = await lanes.status_page(
            bus, queue, after, min(limit - len(found), lanes.LANE_PAGE_MAX)
        )
        found |= {lane.group: lane for lane in page.lanes}
        after = page.next
    return [found[group] for group in sorted(found)][:limit]
