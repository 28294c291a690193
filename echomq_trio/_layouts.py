"""A queue's layout on the server, and the one registry of upgrades that bring a queue written
by an earlier version of the bus up to date (BullMQ's ``migrations.ts`` is the model).

A queue's ``meta.layout`` says which layout its bookkeeping has; a queue created by this version
has ``LAYOUT`` from its first write (``created`` in ``scripts/_bus.lua``). The scripts that read
bookkeeping an earlier layout lacks (``counts``, a ``lane_status`` page) answer ``outdated`` on
an older queue instead of a wrong count, and ``run_current`` then runs every upgrade in
``UPGRADES`` in order and asks again, so callers never see it. Each upgrade is one script, a
no-op on a queue at its layout or later, and sets ``meta.layout`` to its own number in the
same atomic step: any number of processes may run them at once. Adding a layout: a script with
an ``-- upgrade: layout N`` header line, its entry here, ``LAYOUT`` in ``_bus.lua``; a test
holds the three together.

Every process that uses a queue should run one version: an earlier one writes the earlier
layout's bookkeeping (an earlier version moves lane jobs without counting them). Scripts of this
version that run on a queue before its upgrade keep its jobs in flight right, and the upgrade
makes the rest exact.
"""

from __future__ import annotations

from typing import TypeVar

import attrs

from echomq_trio import protocol
from echomq_trio.bus import Bus
from echomq_trio.keys import QueueKeys

__all__ = ["LAYOUT", "UPGRADES", "Upgrade", "run_current", "upgrade"]

T = TypeVar("T")


@attrs.frozen
class Upgrade:
    """One step of the registry: ``script`` brings a queue to ``layout``."""

    layout: int
    script: str
    what: str


UPGRADES: tuple[Upgrade, ...] = (
    Upgrade(
        3,
        "count_lanes",
        "the lane counters (metrics.lane_pending, metrics.lanes_with_jobs) and the lane index "
        "as one hash, counted once; before: no counters (layout 0), lanes with jobs in the set "
        "lane_groups (1), the lane index a sorted set by name (2), marked in meta.counted",
    ),
)
LAYOUT = UPGRADES[-1].layout  # what this version writes (``LAYOUT`` in ``scripts/_bus.lua``)


async def upgrade(bus: Bus, k: QueueKeys) -> None:
    """Bring the queue to ``LAYOUT``: every upgrade in order, each a no-op where done."""
    for step in UPGRADES:
        await bus.run(protocol.upgrade_call(step.script, k))


async def run_current(bus: Bus, k: QueueKeys, call: protocol.Call[T]) -> T:
    """Run ``call`` (``counts`` or a lane status page); if the queue has an earlier layout
    (``protocol.Outdated``), upgrade it and run the call again."""
    try:
        return await bus.run(call)
    except protocol.Outdated:
        await upgrade(bus, k)
        return await bus.run(call)
