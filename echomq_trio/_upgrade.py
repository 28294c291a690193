"""Queues written by an earlier version of the bus: their bookkeeping brought up to date once.

The lane counters (``metrics.lane_pending`` and ``metrics.lanes_with_jobs``, read by ``counts``)
and the lane index (a hash of each listed lane's jobs in flight, marked while jobs wait in it;
paged by ``lanes.status_page``) are kept by every script since they took their present form
(``meta.counted`` = 3). A queue created before lacks some of them (versions before counted lanes
with jobs as a set of lane groups, then listed lanes in a sorted set by name beside a hash of
jobs in flight): ``counts`` and a lane status page answer ``uncounted`` until ``count_lanes`` has
counted and indexed its lanes, once (a walk of every lane, the only one the bus ever does), and
dropped the old structures. ``run_counted`` does that on demand, so callers never see it. Every
process that uses a queue should run this version: an earlier one moves lane jobs without
counting them. Scripts of this version that run on a queue before its count keep its jobs in
flight right, and the count makes the rest exact.
"""

from __future__ import annotations

from typing import TypeVar

from echomq_trio import protocol
from echomq_trio.bus import Bus
from echomq_trio.keys import QueueKeys

__all__ = ["run_counted"]

T = TypeVar("T")


async def run_counted(bus: Bus, k: QueueKeys, call: protocol.Call[T]) -> T:
    """Run ``call`` (``counts`` or a lane status page); if the queue predates the lane counter
    (``protocol.Uncounted``), count its lanes once and run it again."""
    try:
        return await bus.run(call)
    except protocol.Uncounted:
        await bus.run(protocol.count_lanes_call(k))
        return await bus.run(call)
