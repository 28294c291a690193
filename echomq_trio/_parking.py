"""A consumer's parking on its queue's wake list, and the nudge a metronome of its bus gives it.

Theory of operation:

* A consumer with nothing to claim parks: it blocks in ``BLPOP`` on the queue's wake list, on a
  connection of its own, for at most a beat; whatever pushes jobs claimable (an enqueue, a
  promote, a release) pushes a wake token, which ends the park of one consumer in any process.
* The pop runs in a task of its own (``Parking.run``) and outlives a park that ends another
  way: ``Parking.nudge`` ends the current park at once and leaves the pop in flight. Its reply
  is never dropped: a pop that answers while no park waits is kept, and ends the next park at
  once, so a wake token meant for this consumer always brings one more claim. At most one pop
  is in flight (the next starts only when a park finds none), so a busy consumer takes no token
  another consumer could have used, as when the consumer awaited the pop itself.
* The nudge: a metronome about to promote jobs it knows due (``metronome``) nudges the consumers
  of that queue on its own bus (``ParkingLot``), just before its promote is sent. A nudged
  consumer claims at once on the bus's connection, so its claim goes out right behind the
  promote and the server answers both in one round trip: from the due time to a claimed job is
  the promote's round trip, where the wake list's way costs its pop's answer and then a claim's
  round trip more. Correctness never rests on it: a claim that reached the server first finds
  nothing and the consumer parks again; the promote's wake token ends that park as before;
  consumers in other processes (or on other buses) are woken by the token alone.
"""

from __future__ import annotations

import attrs
import trio

from echomq_trio.errors import ConnectionLost, RequestTimedOut
from echomq_trio.transport import Transport

__all__ = ["Parking", "ParkingLot"]

RETRY_S = 0.5  # a pop that failed (connection trouble) is tried again after at most this


class Parking:
    """One consumer's parking on ``key`` (its queue's wake list) through ``parker`` (a
    connection of its own, for blocking pops): run ``run`` in the consumer's nursery, then
    ``await park(timeout_s)`` whenever there is nothing to claim."""

    def __init__(self, parker: Transport, key: str) -> None:
        self._parker = parker
        self._key = key
        self._timeout_s = 0.0
        self._start = trio.Event()  # set: the pop task starts a pop of _timeout_s
        self._popping = False  # a pop is in flight
        self._answered = False  # a pop answered while no park waited: the next park ends
        self._waiter: trio.Event | None = None  # the park that waits now
        self._nudged: trio.Event | None = None  # the last park a nudge ended

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Pop whenever a park asks for it, until cancelled."""
        task_status.started()
        while True:
            await self._start.wait()
            self._start = trio.Event()
            try:
                await self._parker.blpop(self._key, self._timeout_s)
            except (ConnectionLost, RequestTimedOut):
                await trio.sleep(min(self._timeout_s, RETRY_S))
            self._popping = False
            waiter = self._waiter
            if waiter is not None and not waiter.is_set():
                waiter.set()
            else:  # no park waits (or a nudge ended it first): the next park ends at once
                self._answered = True

    async def park(self, timeout_s: float) -> bool:
        """Wait until a wake token comes (or came since the last park), ``timeout_s`` passes (a
        pop in flight from an earlier park keeps its own timeout), or a nudge comes; whether a
        nudge ended it."""
        if self._answered:
            self._answered = False
            await trio.lowlevel.checkpoint()
            return False
        if not self._popping:
            self._popping = True
            self._timeout_s = timeout_s
            self._start.set()
        waiter = self._waiter = trio.Event()
        try:
            await waiter.wait()
        finally:
            if self._waiter is waiter:
                self._waiter = None
        return self._nudged is waiter

    def nudge(self) -> bool:
        """End the current park at once (the pop stays in flight); whether one was waiting."""
        waiter = self._waiter
        if waiter is None or waiter.is_set():
            return False
        self._nudged = waiter
        waiter.set()
        return True


@attrs.define(eq=False)
class ParkingLot:
    """A bus's consumers' parkings by queue, for the nudges of its metronomes."""

    _by_queue: dict[str, set[Parking]] = attrs.field(factory=dict)

    def add(self, queue: str, parking: Parking) -> None:
        self._by_queue.setdefault(queue, set()).add(parking)

    def remove(self, queue: str, parking: Parking) -> None:
        parkings = self._by_queue.get(queue)
        if parkings is not None:
            parkings.discard(parking)
            if not parkings:
                del self._by_queue[queue]

    def nudge(self, queue: str) -> int:
        """Nudge every consumer of ``queue`` parked now; how many were."""
        return sum(p.nudge() for p in self._by_queue.get(queue, ()))
