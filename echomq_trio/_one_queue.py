"""How the tools name a queue (``echomq``'s commands, the dashboard): by its name, a
partitioned queue as one queue.

A tool opens the queue it is given here (``open_one``: one ``HMGET`` of its ``meta``) and works
through the ``partitions.PartitionedQueue`` it gets, which routes each call to the partition
that holds what it names, or to every partition. A plain queue is a handle of one partition,
whose calls are the plain functions of ``jobs``, ``lanes`` and ``repeat``: what a tool shows of
it is as it always was. A partition's own name (``q~p1.<k>``) still names that partition alone,
for an operator who needs one (``open_queue`` says so on stderr).
"""

from __future__ import annotations

import sys

from echomq_trio import jobs, lanes
from echomq_trio._partition_meta import Membership, membership
from echomq_trio._partitioning import partition_names
from echomq_trio.bus import Bus
from echomq_trio.partitions import PartitionedQueue
from echomq_trio.results import JobInfo, LaneStatus
from echomq_trio.states import JobState

__all__ = ["handle", "lanes_of", "list_jobs", "open_one", "open_queue"]


def handle(bus: Bus, name: str, meta: Membership) -> PartitionedQueue:
    """The queue ``name`` whose ``meta`` is ``meta``, as one queue (pure): every partition of a
    partitioned queue, or, when ``name`` is a partition's, that partition alone."""
    if meta.of is not None and meta.of != name:
        return PartitionedQueue(bus, name, (name,))
    return PartitionedQueue(bus, name, partition_names(name, meta.partitions or 1))


async def open_one(bus: Bus, name: str) -> tuple[PartitionedQueue, Membership]:
    """``handle`` of the queue ``name``, and what its ``meta`` says (which queue a partition
    is of): one ``HMGET``. Read only."""
    meta = await membership(bus, name)
    return handle(bus, name, meta), meta


async def open_queue(bus: Bus, name: str) -> PartitionedQueue:
    """``open_one`` for a command: naming a partition's own name is said on stderr."""
    pq, meta = await open_one(bus, name)
    if meta.of is not None and meta.of != name:
        print(f"echomq: {name} is partition {meta.index} of queue {meta.of}: this command sees "
              f"that partition alone (name {meta.of} for the whole queue)",
              file=sys.stderr, flush=True)  # fmt: skip
    return pq


async def list_jobs(
    pq: PartitionedQueue, state: JobState | str, offset: int, limit: int
) -> list[JobInfo]:
    """``jobs.list_jobs`` of a plain queue (as it always was), or of a partitioned queue's
    partitions merged (``PartitionedQueue.list_jobs``). Read only."""
    if pq.n == 1:
        return await jobs.list_jobs(pq.bus, pq.name, state, offset, limit)
    return await pq.list_jobs(state, offset, limit)


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
