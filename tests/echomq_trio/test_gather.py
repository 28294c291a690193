"""Coalesced enqueues (``echomq_trio._gather``): single enqueues from many tasks share script calls;
each caller gets its own outcome or its own error, in its own order; a bad payload fails only
its caller; a cancelled caller either admitted nothing or gets its outcome."""

from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from echomq_trio import Admitted, Bus, ConnectionLost, Outcome, Transport, events, ids, jobs
from echomq_trio.testing import FaultyTransport, scripts
from tests.support import wait_for

pytestmark = pytest.mark.cluster


def enqueue_calls(faulty: FaultyTransport) -> int:
    return sum(1 for c in faulty.calls if c.name == "enqueue")


class Gate(FaultyTransport):
    """Holds the first ``enqueue`` call at a gate, so the callers after it gather behind it
    (trio runs tasks started together in any order). Wrapped in a ``FaultyTransport``, whose
    faults count the held call first."""

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self.open = trio.Event()
        self._first = True

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        if name == "enqueue" and self._first:
            self._first = False
            await self.open.wait()
        return await super().script(name, keys, args)


def gated_bus(bus: Bus) -> tuple[Gate, FaultyTransport, Bus]:
    """A bus whose first enqueue waits for ``gate.open``, with faults planned on ``faulty``."""
    gate = Gate(bus.transport)
    faulty = FaultyTransport(gate)
    return gate, faulty, Bus(faulty)


async def test_concurrent_enqueues_share_calls_and_each_caller_gets_its_own_answer(
    bus: Bus, queue: str
) -> None:
    faulty = FaultyTransport(bus.transport)
    fb = Bus(faulty)
    wanted = [ids.generate("JOB") for _ in range(40)]
    for job_id in wanted[::4]:  # every fourth id is taken already
        await jobs.enqueue(bus, queue, "first", job_id=job_id)
    before = enqueue_calls(faulty)
    got: dict[str, Admitted] = {}

    async def one(job_id: str) -> None:
        got[job_id] = await jobs.enqueue(fb, queue, f"p-{job_id}", job_id=job_id)

    async with trio.open_nursery() as nursery:
        for job_id in wanted:
            nursery.start_soon(one, job_id)
    # one alone, then the rest gathered: a batch holds at most half the callers in flight
    assert enqueue_calls(faulty) - before <= 6
    for i, job_id in enumerate(wanted):
        outcome = Outcome.DUPLICATE if i % 4 == 0 else Outcome.ENQUEUED
        assert got[job_id] == Admitted(job_id, outcome)
        info = await jobs.get_job(bus, queue, job_id)
        assert info is not None
        assert info.payload == (b"first" if i % 4 == 0 else f"p-{job_id}".encode())
    assert not fb._gatherers  # nothing left behind once idle


async def test_each_caller_keeps_its_order(bus: Bus, queue: str) -> None:
    mine: dict[int, list[str]] = {t: [] for t in range(8)}

    async def caller(t: int) -> None:
        for _ in range(15):
            mine[t].append((await jobs.enqueue(bus, queue, f"{t}")).id)

    async with trio.open_nursery() as nursery:
        for t in range(8):
            nursery.start_soon(caller, t)
    admitted = [e.subject for e in await events.read(bus, queue, count=1000)]
    assert len(admitted) == 120
    for ids_of_t in mine.values():
        assert [i for i in admitted if i in set(ids_of_t)] == ids_of_t


async def test_a_bad_payload_fails_only_its_caller(bus: Bus, queue: str) -> None:
    results: dict[int, object] = {}

    async def one(n: int, payload: object) -> None:
        try:
            results[n] = await jobs.enqueue(bus, queue, payload)  # type: ignore[arg-type]
        except (ValueError, TypeError) as exc:
            results[n] = exc

    too_big = b"x" * (bus.max_payload_bytes + 1)
    async with trio.open_nursery() as nursery:
        for n in range(12):
            payload: object = {3: too_big, 7: {"not": "bytes"}}.get(n, f"ok-{n}")
            nursery.start_soon(one, n, payload)
    assert isinstance(results.pop(3), ValueError)
    assert isinstance(results.pop(7), TypeError)
    assert all(isinstance(r, Admitted) and r.ok for r in results.values())
    assert (await jobs.counts(bus, queue)).pending == 10


async def test_a_failed_batch_gives_each_of_its_callers_its_own_error(bus: Bus, queue: str) -> None:
    gate, gated, fb = gated_bus(bus)
    fault = gated.fail(scripts("enqueue"), ConnectionLost("injected"), nth=2)
    outcomes: dict[int, object] = {}

    async def one(n: int) -> None:
        try:
            outcomes[n] = await jobs.enqueue(fb, queue, f"{n}")
        except ConnectionLost as exc:
            outcomes[n] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 0)  # sent alone, held at the gate
        await trio.testing.wait_all_tasks_blocked()
        for n in range(1, 6):
            nursery.start_soon(one, n)  # gathered into the second call, which fails
        await trio.testing.wait_all_tasks_blocked()
        gate.open.set()
    assert fault.fired
    assert isinstance(outcomes[0], Admitted) and outcomes[0].ok
    errors = [outcomes[n] for n in range(1, 6)]
    assert all(isinstance(e, ConnectionLost) and "injected" in str(e) for e in errors)
    assert len({id(e) for e in errors}) == 5  # each its own exception object
    assert (await jobs.counts(bus, queue)).pending == 1
    again = await jobs.enqueue(fb, queue, "after")  # the gatherer carries on
    assert again.ok and not fb._gatherers


async def test_a_cancelled_caller_admitted_nothing_unless_its_batch_went_out(
    bus: Bus, queue: str
) -> None:
    gate, _, fb = gated_bus(bus)
    first, a, b = (ids.generate("JOB") for _ in range(3))
    got: dict[str, Admitted] = {}
    raised: list[str] = []

    async def one(job_id: str, cancel: bool = False) -> None:
        with trio.CancelScope() as scope:
            if cancel:
                scope.cancel()  # cancelled as it calls
            try:
                got[job_id] = await jobs.enqueue(fb, queue, "x", job_id=job_id)
            except trio.Cancelled:
                raised.append(job_id)
                raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, first)  # sent alone, held at the gate
        await trio.testing.wait_all_tasks_blocked()
        # Both cancelled: the one that runs first leads the batch and sends it (a leader's
        # call is atomic: it returns its outcome); the other waits as a follower and leaves.
        nursery.start_soon(one, a, True)
        nursery.start_soon(one, b, True)
        await trio.testing.wait_all_tasks_blocked()
        gate.open.set()
    assert len(raised) == 1
    (left,) = raised
    (sent,) = {a, b} - {left}
    assert got == {first: Admitted(first, Outcome.ENQUEUED), sent: Admitted(sent, Outcome.ENQUEUED)}
    assert await jobs.get_job(bus, queue, left) is None


async def test_a_caller_cancelled_once_its_batch_went_out_gets_its_outcome(
    bus: Bus, queue: str
) -> None:
    gate, gated, fb = gated_bus(bus)
    scope = trio.CancelScope()
    # The second enqueue call is the gathered batch: the follower is cancelled as it goes out.
    cut = gated.cancel(scripts("enqueue"), scope, nth=2)
    follower = ids.generate("JOB")
    got: list[Admitted] = []
    went_on = False

    async def one() -> None:
        await jobs.enqueue(fb, queue, "x")

    async def cancelled_follower() -> None:
        nonlocal went_on
        with scope:
            got.append(await jobs.enqueue(fb, queue, "f", job_id=follower))
            await trio.lowlevel.checkpoint()  # the cancellation arrives here
            went_on = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)  # sent alone, held at the gate
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(one)  # with the follower, one batch (either may lead it)
        nursery.start_soon(cancelled_follower)
        await trio.testing.wait_all_tasks_blocked()
        gate.open.set()
    assert cut.fired and scope.cancelled_caught and not went_on
    assert got == [Admitted(follower, Outcome.ENQUEUED)]
    assert (await jobs.get_job(bus, queue, follower)) is not None


class Held(FaultyTransport):
    """Holds every ``enqueue`` call until the test releases it, noting how many jobs it
    carries."""

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self.gates: list[trio.Event] = []
        self.sizes: list[int] = []

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        if name == "enqueue":
            self.sizes.append((len(args) - 5) // 2)  # ARGV: 5 fixed (prefix ... expiry), pairs
            gate = trio.Event()
            self.gates.append(gate)
            await gate.wait()
        return await super().script(name, keys, args)


async def test_callers_woken_by_one_answer_gather_again_rather_than_one_going_alone(
    bus: Bus, queue: str
) -> None:
    held = Held(bus.transport)
    hb = Bus(held)
    done: list[str] = []

    async def caller(name: str, times: int) -> None:
        for _ in range(times):
            assert (await jobs.enqueue(hb, queue, name)).ok
        done.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller, "first", 1)  # sent alone: the others gather behind it
        await wait_for(lambda: len(held.gates) == 1)
        for t in range(8):
            nursery.start_soon(caller, f"t{t}", 2)
        await wait_for(lambda: len(held.gates) == 2)  # one batch of the eight
        held.gates[0].set()
        await wait_for(lambda: done == ["first"])  # nothing else in flight now
        held.gates[1].set()  # the eight wake together, and enqueue again together
        await wait_for(lambda: sum(held.sizes[2:]) == 8)
        for gate in held.gates[2:]:
            gate.set()
    assert held.sizes == [1, 8, 8]
    assert (await jobs.counts(bus, queue)).pending == 17


async def test_a_batch_leaves_while_the_one_before_is_out_and_holds_half_the_callers(
    bus: Bus, queue: str
) -> None:
    held = Held(bus.transport)
    hb = Bus(held)
    admitted: list[Admitted] = []

    async def caller(index: int) -> None:
        admitted.append(await jobs.enqueue(hb, queue, f"c{index}"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller, 0)  # sent alone; it stays out until the test lets it go
        await wait_for(lambda: len(held.gates) == 1)
        for index in range(1, 64):
            nursery.start_soon(caller, index)
        # Every caller's job goes out while the first call is still held: no batch waits for
        # the answer of the one before it.
        await wait_for(lambda: sum(held.sizes) == 64)
        assert not admitted
        for gate in held.gates:
            gate.set()
    assert len(admitted) == 64 and all(a.ok for a in admitted)
    assert len(held.sizes) >= 3  # the first alone and at least two batches
    assert max(held.sizes) <= 32  # none more than half the 64 callers in flight
    assert (await jobs.counts(bus, queue)).pending == 64
