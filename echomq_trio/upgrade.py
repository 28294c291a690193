"""Queues written by an earlier version of the bus: their bookkeeping brought up to date once.

The lane counters (``metrics.lane_pending`` and ``metrics.lanes_with_jobs``, read by ``counts``)
and the lane index (paged by ``lanes.status_page``) are kept by every script since they were
introduced (``meta.counted`` = 2). A queue created before lacks some of them (the version before
this one counted lanes with jobs as a set of lane groups): ``counts`` and a lane status page answer
``uncounted`` until ``count_lanes`` has counted and indexed its lanes, once (a walk of every lane,
the only one the bus ever does), and dropped that set. ``run_counted`` does that on demand, so
callers never see it. Every process that uses a queue should run this version: an earlier one moves
lane jobs without counting them.
"""

from __future__ import annotations

from typing import Any

from echomq_trio import protocol
from echomq_trio.bus import Bus
from echomq_trio.keys import QueueKeys

__all__ = ["run_counted"]


async def run_counted(bus: Bus, k: QueueKeys, call: protocol.Call) -> Any:
    """Run ``call`` (``counts`` or a lane status page); if the queue predates the lane counter,
    count its lanes once and run it again."""
    raw = await bus.run(call)
    if protocol.uncounted(raw):
        protocol.count_lanes_reply(await bus.run(protocol.count_lanes_call(k)))
        raw = await bus.run(call)
    return raw
