"""The shares of a partitioned queue's cap on jobs in flight (pure): how a queue-wide total is
split into one ordinary cap per partition, and which caps a round may lower and raise.

A round (``echomq_trio.partitions``) reads every partition's cap, its jobs in flight
(``active``) and its jobs waiting to be claimed, then asks ``targets`` for each partition's
share, lowers the caps above their share (``lowers``), reads again, and raises the caps below
their share within what the total leaves (``raises``). The invariant the round keeps at every
instant is ``sum(max(cap_i, active_i)) <= total`` (a missing cap counts as unbounded): a claim
never leases past its partition's cap, so only a raise can grow that sum, and ``raises`` spends
no more than the room the lowered reading shows.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["held", "lowers", "raises", "targets"]


def targets(total: int, active: Sequence[int], waiting: Sequence[int]) -> list[int]:
    """Each partition's share of ``total``: max-min fair on its need (``active + waiting``, by
    water-filling), then what no partition needs spread evenly (so new work anywhere starts
    without waiting a round). The shares add up to ``total``; each is >= 0; every need is met
    when the total allows; a partition whose need is not met has at least every other share
    less one (the odd units go to the lowest indices, so equal inputs give equal shares)."""
    if len(active) != len(waiting) or not active:
        raise ValueError("active and waiting must be equally long, and not empty")
    if total < 0 or min(active) < 0 or min(waiting) < 0:
        raise ValueError("total, active and waiting must be >= 0")
    n = len(active)
    need = [a + w for a, w in zip(active, waiting, strict=True)]
    out = [0] * n
    left = sorted(range(n), key=lambda i: (need[i], i))
    remaining = total
    while left:
        share = remaining // len(left)
        if need[left[0]] <= share:  # the least needy is met: the others share the rest
            out[left[0]] = need[left[0]]
            remaining -= need[left[0]]
            left.pop(0)
            continue
        extra = remaining - share * len(left)  # every one left needs more than the level
        for k, i in enumerate(sorted(left)):
            out[i] = share + (1 if k < extra else 0)
        return out
    for i in range(n):  # every need met: the spare spread evenly
        out[i] += remaining // n + (1 if i < remaining % n else 0)
    return out


def held(cap: int | None, active: int) -> int | None:
    """What a partition can hold in flight: ``max(cap, active)``, ``None`` when it has no cap."""
    return None if cap is None else max(cap, active)


def lowers(caps: Sequence[int | None], shares: Sequence[int]) -> list[int | None]:
    """The new cap of each partition whose cap is above its share (or missing), else ``None``:
    lowering takes nothing back and never grows what the partitions hold."""
    return [s if c is None or c > s else None for c, s in zip(caps, shares, strict=True)]


def raises(
    total: int,
    caps: Sequence[int | None],
    active: Sequence[int],
    waiting: Sequence[int],
    shares: Sequence[int],
) -> list[int | None]:
    """The new cap of each partition to raise toward its share, else ``None``, spending at most
    the room ``total - sum(max(cap_i, active_i))`` of the reading given (taken after the
    lowers): partitions with work waiting first, then the rest, each in index order. Nothing is
    raised while any cap is missing (the reading bounds nothing then)."""
    heights = [held(c, a) for c, a in zip(caps, active, strict=True)]
    if any(h is None for h in heights):
        return [None] * len(caps)
    room = total - sum(h for h in heights if h is not None)
    out: list[int | None] = [None] * len(caps)
    order = sorted(range(len(caps)), key=lambda i: (waiting[i] == 0, i))
    for i in order:
        cap, height = caps[i], heights[i]
        assert cap is not None and height is not None  # checked above
        if shares[i] <= cap:
            continue
        # raising to c costs max(c, active) - height: nothing while c stays within what runs
        # (a cap lowered below it), then one unit of room per unit
        new = min(shares[i], height + max(room, 0))
        if new > cap:
            out[i] = new
            room -= max(0, new - height)
    return out
