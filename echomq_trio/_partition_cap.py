"""A partitioned queue's cap on jobs in flight across its partitions: the rounds that share a
total out as one ordinary cap per partition (the I/O; the arithmetic is ``_cap_shares``).

No script can touch two slots, so the total cannot be one atomic check. Each partition keeps
its own cap (``meta.max_active``), which its claims enforce as any queue's do, and a round moves
the caps so that at every instant ``sum(max(cap_i, active_i)) <= total``: a claim never leases
past its partition's cap, so only a raise can grow that sum.

Theory of operation:

* The total and the epoch of the rounds live in partition 0's meta (``cap_total.lua``:
  ``partitions_cap``, ``partitions_epoch``). Setting, clearing and beginning a round each bump
  the epoch.
* A round of epoch E stamps every partition with E (``cap_share.lua``, refused where a newer
  epoch is stamped: then a newer round runs, and this one stops), reading each one's cap, jobs
  in flight and jobs waiting; computes the shares (``_cap_shares.targets``); lowers the caps
  above their share (fenced: refused unless the partition carries E), reading again; and
  raises the caps below their share, spending only the room that reading leaves (fenced the
  same way). A round begun later stamps every partition before it computes anything, so a raise
  of an earlier round either happened before its stamp (and is in its reading) or is refused:
  correct without a lock. A lease on the rounds (``cap_total``'s ``begin`` with a holder) only
  keeps several coordinators from fencing each other in turn.
* A round that stops midway (fenced, the connection lost, cancelled) leaves the invariant true:
  what it did were lowers, and raises that passed the fence within its room.
* Clearing removes the total, then every partition's cap, each stamped with the clearing's
  epoch, so an earlier round can put no cap back; a round that finds no total does nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from echomq_trio import protocol
from echomq_trio._cap_shares import lowers, raises, targets
from echomq_trio._partition_meta import each
from echomq_trio._replies import as_text
from echomq_trio.bus import Bus
from echomq_trio.results import CapShare, QueueCap

__all__ = ["START_TRIES", "TOTAL_FIELD", "check_total", "clear", "read", "share_round", "start"]

TOTAL_FIELD = "partitions_cap"  # partition 0's meta: the queue-wide cap on jobs in flight
START_TRIES = 10  # rounds set_limit begins when newer ones fence its own off


def check_total(total: object) -> int | None:
    """``total`` if it is ``None`` or an int >= 1 (not a bool); a one-line ``ValueError``
    otherwise."""
    if total is None:
        return None
    if isinstance(total, bool) or not isinstance(total, int):
        raise ValueError(f"a queue's cap on jobs in flight must be an int >= 1 or None, "
                         f"got {type(total).__name__}")  # fmt: skip
    if total < 1:
        raise ValueError(f"a queue's cap on jobs in flight must be >= 1 (or None to clear it), "
                         f"got {total}")  # fmt: skip
    return total


def _share(
    bus: Bus, queue: str, mode: str, epoch: int, cap: int = 0
) -> Callable[[], Awaitable[CapShare]]:
    return lambda: bus.run(protocol.cap_share_call(bus.keys(queue), mode, epoch, cap))


async def start(bus: Bus, names: Sequence[str], total: int) -> list[int] | None:
    """Record ``total`` on partition 0 and run a round at once (``share_round``). A round
    fenced off by a newer one (a metronome's, begun meanwhile) is begun anew, up to
    ``START_TRIES`` times, so that on return a round begun after the total was recorded has
    made its lowers (the newer one may not have yet); ``None`` when the total was cleared or
    replaced meanwhile."""
    k0 = bus.keys(names[0])
    _, epoch = await bus.run(protocol.cap_total_call(k0, "set", total))
    begun: tuple[int | None, int] = (total, epoch)
    for _ in range(START_TRIES):
        shares = await share_round(bus, names, begun=begun)
        if shares is not None:
            return shares
        begun = await bus.run(protocol.cap_total_call(k0, "begin", "", 0))
        if begun[0] != total:
            return None  # cleared or replaced by another call: that call's round rules
    return None


async def clear(bus: Bus, names: Sequence[str]) -> None:
    """Remove the total, then every partition's cap (concurrently), each fenced by the
    clearing's epoch. A cancelled call may have cleared some caps: call again."""
    _, epoch = await bus.run(protocol.cap_total_call(bus.keys(names[0]), "clear"))
    await each([_share(bus, q, "clear", epoch) for q in names])


async def share_round(
    bus: Bus,
    names: Sequence[str],
    *,
    holder: str = "",
    lease_ms: int = 0,
    begun: tuple[int | None, int] | None = None,
) -> list[int] | None:
    """One round: stamp every partition, lower the caps above their share, raise those below
    it within the room left. Returns the shares aimed at, or ``None`` when no round ran (no
    total, another ``holder``'s lease runs, or a newer round fenced this one off). ``begun``:
    the total and epoch of a round already begun (``start``). Each step is one script per
    partition, the partitions' concurrently; cancelled or failing between steps, the caps keep
    the invariant (see the module's docstring)."""
    k0 = bus.keys(names[0])
    if begun is None:
        begun = await bus.run(protocol.cap_total_call(k0, "begin", holder, lease_ms))
    total, epoch = begun
    if total is None or epoch == 0:
        return None
    seen = await each([_share(bus, q, "stamp", epoch) for q in names])
    if any(s.fenced for s in seen):
        return None
    shares = targets(total, [s.active for s in seen], [s.waiting for s in seen])
    lower = lowers([s.max_active for s in seen], shares)
    moved = [(i, c) for i, c in enumerate(lower) if c is not None]
    if moved:
        answers = await each([_share(bus, names[i], "lower", epoch, c) for i, c in moved])
        if any(a.fenced for a in answers):
            return None
        for (i, _), a in zip(moved, answers, strict=True):
            seen[i] = a
    up = raises(total, [s.max_active for s in seen], [s.active for s in seen],
                [s.waiting for s in seen], shares)  # fmt: skip
    moved = [(i, c) for i, c in enumerate(up) if c is not None]
    if moved:
        await each([_share(bus, names[i], "raise", epoch, c) for i, c in moved])
    return shares


async def read(bus: Bus, names: Sequence[str]) -> QueueCap:
    """The total, the jobs in flight of every partition and each partition's cap: one command
    per partition and one more on partition 0, concurrently. Read only."""

    def part(queue: str) -> Callable[[], Awaitable[tuple[int | None, int]]]:
        async def go() -> tuple[int | None, int]:
            k = bus.keys(queue)
            cap = await bus.command("HGET", k.meta, "max_active")
            active = await bus.command("ZCARD", k.active)
            return (None if cap is None else int(as_text(cap))), int(as_text(active))

        return go

    async def total() -> tuple[int | None, int]:
        got = await bus.command("HGET", bus.keys(names[0]).meta, TOTAL_FIELD)
        return (None if got is None else int(as_text(got))), 0

    first, *parts = await each([total, *(part(q) for q in names)])
    return QueueCap(first[0], sum(a for _, a in parts), tuple(c for c, _ in parts))
