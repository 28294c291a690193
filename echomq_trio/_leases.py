"""What every claimer of jobs does with what it holds (``Consumer``, and codemojex's notification
worker, which holds notices in per-chat tasks): claim a batch for the free slots, shielded so
that its answer is always seen; settle through connection trouble; renew the leases of every
held job each third of a lease; and on the way out release what is held in one round trip.

A held job is a ``Job`` in a ``dict`` by id that the caller owns: it adds what it claims and
removes what it settles; these functions only read it (``release`` clears it once released).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import NoReturn, TypeVar

import trio

from echomq_trio import jobs
from echomq_trio.backoff import reconnect_delay_s
from echomq_trio.bus import Bus
from echomq_trio.errors import BusError, ConnectionLost, RequestTimedOut, level_of
from echomq_trio.jobs import Job, Outcome

__all__ = ["COUNTER", "SETTLE_TIME_S", "claim_for_slots", "persist", "release", "renew", "shielded"]

log = logging.getLogger("echomq_trio.leases")

T = TypeVar("T")
SETTLE_TIME_S = 5.0  # on the way out, the longest a release takes

# Which counter of ``ConsumerStats`` (and of the ``echomq_consumer_jobs`` metric) a
# settlement's answer adds to.
COUNTER = {
    Outcome.ACKED: "acked",
    Outcome.SCHEDULED: "retried",
    Outcome.DEFERRED: "deferred",
    Outcome.DEAD: "dead",
    Outcome.STALE: "stale",
    Outcome.GONE: "stale",
}


async def shielded(bus: Bus, call: Callable[[], Awaitable[T]]) -> T:
    """Run a request whose answer must be seen (a claim: else jobs would be held unknowingly),
    shielded from cancellation for at most the wire's timeout and a second."""
    timeout = bus.transport.spec.timeout_ms / 1000 + 1
    with trio.CancelScope(shield=True, deadline=trio.current_time() + timeout):
        return await call()
    raise RequestTimedOut("shielded request passed its deadline")


async def claim_for_slots(
    bus: Bus, queue: str, slots: trio.Semaphore, batch: int, lease_ms: int
) -> tuple[list[Job], int]:
    """Wait for a free slot, take every free one up to ``batch`` and claim that many (shielded):
    the jobs claimed and how many were asked for (fewer claimed: the queue has no more now). The
    slots of what was not claimed are given back. Connection trouble gives every slot back and
    tries again after ``backoff.reconnect_delay_s``."""
    failures = 0
    while True:
        await slots.acquire()
        want = 1
        while want < batch and slots.value > 0:
            slots.acquire_nowait()
            want += 1
        try:
            claimed = await shielded(bus, partial(jobs.claim, bus, queue, want, lease_ms))
        except (ConnectionLost, RequestTimedOut) as exc:
            for _ in range(want):
                slots.release()
            failures += 1
            log.log(level_of(exc), "claim on %s failed (%s); retrying", queue, exc)
            await trio.sleep(reconnect_delay_s(failures))
            continue
        for _ in range(want - len(claimed)):
            slots.release()
        return claimed, want


async def persist(queue: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run a settlement until it goes through (connection trouble: wait and try again), or the
    caller's deadline cancels it. Trying twice is harmless: the lease token refuses a second
    settlement of a job already settled."""
    failures = 0
    while True:
        try:
            return await call()
        except (ConnectionLost, RequestTimedOut) as exc:
            failures += 1
            log.log(level_of(exc), "settling on %s failed (%s); retrying", queue, exc)
            await trio.sleep(reconnect_delay_s(failures))


async def renew(
    bus: Bus,
    queue: str,
    held: Mapping[str, Job],
    lease_ms: int,
    lost: Callable[[Sequence[str]], None],
) -> NoReturn:
    """Each third of a lease, extend the lease of every held job; ``lost(ids)`` hears the ids
    that were no longer held (reaped and claimed elsewhere, or cancelled), when there are any.
    A renewal that fails (the server unreachable, or refusing writes) is tried again sooner, after
    ``backoff.reconnect_delay_s``, so a lease is renewed soon after the server takes writes
    again. Runs until cancelled."""
    failures = 0
    while True:
        period = lease_ms / 3000
        await trio.sleep(min(period, reconnect_delay_s(failures)) if failures else period)
        items = [(j.id, j.token) for j in held.values()]
        if not items:
            failures = 0
            continue
        try:
            result = await jobs.extend(bus, queue, items, lease_ms)
        except BusError as exc:
            failures += 1
            log.log(level_of(exc), "lease renewal on %s failed: %s", queue, exc)
            continue
        failures = 0
        if result.lost:
            lost(result.lost)


async def release(bus: Bus, queue: str, held: dict[str, Job]) -> int:
    """Hand every held job back to pending in one round trip without spending an attempt
    (shielded, at most ``SETTLE_TIME_S``), and forget them; how many went back. When the server
    does not answer, they come back when their leases expire (0, logged)."""
    if not held:
        return 0
    items = [(j.id, j.token) for j in held.values()]
    with trio.CancelScope(shield=True, deadline=trio.current_time() + SETTLE_TIME_S):
        try:
            released = await jobs.release(bus, queue, items)
        except BusError as exc:
            log.warning("could not release %d jobs on %s (%s); they return when their leases "
                        "expire", len(items), queue, exc)  # fmt: skip
            return 0
        held.clear()
        return released
    return 0
