"""A consumer's parking (``echomq_trio._parking``) in virtual time, on the in-memory queue's wake
list (``tests/echomq_trio/inmemory.py``): a nudge ends a park at once and leaves its pop in
flight, whose answer is never lost; at most one pop is in flight; a bus's parking lot nudges
only the parkings of the queue it names. Its use by a consumer and a metronome on a real server
is ``test_metronome.py``'s."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from echomq_trio import ids
from echomq_trio._parking import Parking, ParkingLot
from tests.echomq_trio.inmemory import InMemoryQueue

WAKE = "emq:{q}:wake"


def _pops(q: InMemoryQueue) -> int:
    return len(q.times("BLPOP"))


async def test_a_nudge_ends_a_park_at_once_and_the_pop_answers_the_next_park(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    parking = Parking(q, WAKE)
    async with trio.open_nursery() as nursery:
        await nursery.start(parking.run)
        nudged: list[bool] = []

        async def park() -> None:
            nudged.append(await parking.park(10.0))

        nursery.start_soon(park)
        await trio.sleep(1)  # parked (the scenario, not a wait)
        assert nudged == [] and _pops(q) == 1
        assert parking.nudge()
        await trio.testing.wait_all_tasks_blocked()
        assert nudged == [True] and trio.current_time() == 1  # at once, the pop still waits
        q.enqueue(ids.generate("JOB"))  # its wake token answers the pop in flight
        await trio.sleep(1)
        at = trio.current_time()
        assert await parking.park(10.0) is False  # kept: the next park ends without a wait
        assert trio.current_time() == at and _pops(q) == 1  # and starts no pop
        nursery.cancel_scope.cancel()


async def test_parks_ended_by_nudges_share_one_pop_which_keeps_its_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    parking = Parking(q, WAKE)
    async with trio.open_nursery() as nursery:
        await nursery.start(parking.run)
        for _ in range(3):
            nursery.start_soon(parking.park, 5.0)
            await trio.sleep(1)
            assert parking.nudge()
            await trio.testing.wait_all_tasks_blocked()
        assert _pops(q) == 1  # one pop, started by the first park, still in flight
        assert trio.current_time() == pytest.approx(3.0)
        assert await parking.park(5.0) is False  # the pop's timeout, from its start at 0
        assert trio.current_time() == pytest.approx(5.0) and _pops(q) == 1
        assert await parking.park(5.0) is False  # a new pop, its own 5 s
        assert trio.current_time() == pytest.approx(10.0) and _pops(q) == 2
        nursery.cancel_scope.cancel()


async def test_a_nudge_with_nobody_parked_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    parking = Parking(q, WAKE)
    async with trio.open_nursery() as nursery:
        await nursery.start(parking.run)
        assert not parking.nudge()
        assert await parking.park(2.0) is False  # a full park: the nudge was not kept
        assert trio.current_time() == pytest.approx(2.0)
        nursery.cancel_scope.cancel()


async def test_a_parking_lot_nudges_the_parked_consumers_of_its_queue_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    lot = ParkingLot()
    a1, a2, b = Parking(q, WAKE), Parking(q, WAKE), Parking(q, "emq:{b}:wake")
    for queue, parking in (("a", a1), ("a", a2), ("b", b)):
        lot.add(queue, parking)
    ended: list[tuple[str, bool]] = []

    async def park(name: str, parking: Parking) -> None:
        ended.append((name, await parking.park(60.0)))

    async with trio.open_nursery() as nursery:
        for parking in (a1, a2, b):
            await nursery.start(parking.run)
        nursery.start_soon(park, "a1", a1)
        nursery.start_soon(park, "b", b)
        await trio.sleep(1)
        assert lot.nudge("a") == 1  # a2 is not parked
        assert lot.nudge("c") == 0
        await trio.sleep(1)
        assert ended == [("a1", True)]
        lot.remove("a", a1)
        lot.remove("a", a2)
        lot.remove("a", a2)  # twice: harmless
        assert lot.nudge("a") == 0
        assert lot.nudge("b") == 1
        await trio.testing.wait_all_tasks_blocked()
        assert ended == [("a1", True), ("b", True)]
        nursery.cancel_scope.cancel()
