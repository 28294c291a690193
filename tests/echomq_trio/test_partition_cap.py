"""A partitioned queue's cap on jobs in flight across its partitions, on a real server and on the
3-node cluster (its partitions in three slots, on three primaries): the handlers running at
once across every partition never pass the total, the cap follows the work, racing rounds (one
of them cut midway) keep every instant within the total, and a plain queue's cap is as it was.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio
import trio.lowlevel

from echomq_trio import Bus, Job, jobs, open_worker, partitions, protocol, queues
from echomq_trio.errors import ConnectionLost
from echomq_trio.results import QueueCap
from echomq_trio.testing import FaultyTransport, scripts
from echomq_trio.transport import Transport
from tests.support import wait_for

pytestmark = pytest.mark.cluster


class Running:
    """The handlers running at once, across every partition, and the most ever seen."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)

    def leave(self) -> None:
        self.now -= 1


def held(c: QueueCap, active: Sequence[int]) -> int:
    """What the partitions can hold in flight: sum of max(cap, active); a missing cap counts
    as far above any total."""
    return sum(10**9 if cap is None else max(cap, a) for cap, a in zip(c.shares, active,
                                                                     strict=True))  # fmt: skip


async def actives(bus: Bus, pq: partitions.PartitionedQueue) -> list[int]:
    return [int(await bus.command("ZCARD", bus.keys(q).active)) for q in pq.names]


@pytest.mark.parametrize("lanes", [False, True])
async def test_the_total_holds_across_every_partition_and_every_job_runs_once(
    bus: Bus, queue: str, lanes: bool
) -> None:
    pq = await partitions.create(bus, queue, 3)
    assert (await pq.set_limit(4)).total == 4
    if lanes:
        ids = [(await pq.lane_enqueue(f"chat{i % 12}", f"l{i}")).id for i in range(60)]
    else:
        ids = [a.id for a in await pq.enqueue_many([f"f{i}" for i in range(60)])]
    per_partition = [(await jobs.counts(bus, q)) for q in pq.names]
    assert all(c.pending or c.lanes for c in per_partition), "work in every partition"
    running, seen = Running(), []

    async def handler(job: Job) -> None:
        running.enter()
        try:
            await trio.sleep(0.01)  # the job's own work: a slow-ish job
            seen.append(job.id)
        finally:
            running.leave()

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=4)
    metronome = partitions.PartitionedMetronome(pq, beat_ms=50, share_ms=20)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(metronome.run)
        await wait_for(lambda: consumer.statistics().acked == 60, timeout=45)
        nursery.cancel_scope.cancel()
    assert sorted(seen) == sorted(ids), "each job once"
    assert 1 <= running.most <= 4, running.most
    assert metronome.rounds > 0
    c = await pq.limit()
    assert (c.total, c.active) == (4, 0) and sum(s or 0 for s in c.shares) <= 4


async def test_work_in_one_partition_gets_the_whole_total_after_a_round(
    bus: Bus, queue: str
) -> None:
    pq = await partitions.create(bus, queue, 3)
    c = await pq.set_limit(4)
    assert (c.total, c.active, sorted(s or 0 for s in c.shares)) == (4, 0, [1, 1, 2])
    busy = pq.names[1]
    before = c.shares[1]
    assert before is not None and before < 4
    await jobs.enqueue_many(bus, busy, [f"j{i}" for i in range(20)])
    running, go = Running(), trio.Event()

    async def handler(job: Job) -> None:
        running.enter()
        try:
            await go.wait()
        finally:
            running.leave()

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=8)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: running.now == before)  # its share of an idle queue
        assert await pq.share_cap() == [0, 4, 0]
        await wait_for(lambda: running.now == 4)  # the raise woke its consumer
        c = await pq.limit()
        assert (c.shares, c.active) == ((0, 4, 0), 4)
        # work arriving in a partition whose share is 0 waits for a round
        await jobs.enqueue(bus, pq.names[2], "late")
        assert (await pq.share_cap()) == [0, 3, 1]  # max-min fair: 4 + 16 against 1
        c = await pq.limit()
        assert c.shares == (0, 3, 0), "nothing taken back: 4 run, so no room to raise yet"
        go.set()
        await wait_for(lambda: consumer.statistics().acked >= 4)
        await pq.share_cap()
        await wait_for(lambda: consumer.statistics().acked == 21)
        assert running.most == 4
        nursery.cancel_scope.cancel()


async def test_lowering_takes_nothing_back_and_clearing_removes_every_cap(
    bus: Bus, queue: str
) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.set_limit(6)
    for q in pq.names:
        await jobs.enqueue_many(bus, q, [f"{q}-{i}" for i in range(4)])
    early, late, go = Running(), Running(), trio.Event()
    lowered = False

    async def handler(job: Job) -> None:
        if not lowered:
            early.enter()
            try:
                await go.wait()
            finally:
                early.leave()
            return
        late.enter()
        try:
            await trio.sleep(0.01)
        finally:
            late.leave()

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: early.now == 6)
        lowered = True
        c = await pq.set_limit(2)
        assert (c.total, c.active) == (2, 6), "six run on: nothing is taken back"
        assert sum(s or 0 for s in c.shares) <= 2
        await nursery.start(partitions.PartitionedMetronome(pq, beat_ms=50, share_ms=20).run)
        go.set()  # the six finish; claims wait until fewer than 2 run
        await wait_for(lambda: consumer.statistics().acked == 12)
        assert early.most == 6 and 1 <= late.most <= 2, (early.most, late.most)
        nursery.cancel_scope.cancel()
    c = await pq.set_limit(None)
    assert c == QueueCap(None, 0, (None, None, None))
    for q in pq.names:
        assert (await queues.control(bus, q)).max_active is None
    assert await pq.share_cap() is None, "a round without a total does nothing"
    assert (await pq.limit()).shares == (None, None, None)


async def test_a_change_of_the_total_is_one_queue_limit_event_the_rounds_none(
    bus: Bus, queue: str
) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.set_limit(6)
    await pq.set_limit(6)  # no change: no event
    for _ in range(3):
        assert await pq.share_cap() is not None  # rounds move shares: no event
    await pq.set_limit(2)
    await pq.set_limit(None)
    await pq.set_limit(None)
    limits = [(q, e.subject, e.fields["max_active"])
              for q, e in await pq.read_events() if e.kind == "queue_limit"]  # fmt: skip
    assert limits == [(queue, queue, "6"), (queue, queue, "2"), (queue, queue, "0")]


async def test_bad_totals_are_one_line_errors_before_any_io(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 2)
    faulty = FaultyTransport(bus.transport)
    quiet = partitions.PartitionedQueue(Bus(faulty), pq.name, pq.names)
    for bad in (0, -3, True, 2.5, "4"):
        with pytest.raises(ValueError, match="cap on jobs in flight must be") as caught:
            await quiet.set_limit(bad)  # type: ignore[arg-type]
        assert "\n" not in str(caught.value)
    assert faulty.calls == []
    with pytest.raises(ValueError, match="share_ms must be a positive int"):
        partitions.PartitionedMetronome(pq, share_ms=0)


class Stepped(FaultyTransport):
    """A real transport whose round steps (``cap_total``, ``cap_share``) each hold ``lock``
    while they run, so a reader holding it sees the caps between two steps of any round."""

    def __init__(self, inner: Transport, lock: trio.Lock) -> None:
        super().__init__(inner)
        self.lock = lock

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> object:
        if not name.startswith("cap_"):
            return await super().script(name, keys, args)
        async with self.lock:
            return await super().script(name, keys, args)


@pytest.mark.timeout_s(90)
async def test_racing_rounds_one_cut_midway_keep_every_instant_within_the_total(
    bus: Bus, queue: str
) -> None:
    total = 5
    pq = await partitions.create(bus, queue, 3)
    await pq.set_limit(total)
    lock = trio.Lock()
    a, b, cut = (Stepped(bus.transport, lock) for _ in range(3))
    # the third coordinator's connection drops at every fifth step of its rounds, before the
    # step or after it ran (its answer lost), at every kind of step in turn
    for nth in range(1, 400, 5):
        cut.fail(scripts("cap_share", "cap_total"), ConnectionLost("cut"), nth=nth,
                 after=nth % 2 == 0)  # fmt: skip
    coordinators = [partitions.PartitionedQueue(Bus(t), pq.name, pq.names) for t in (a, b, cut)]
    rng = random.Random(28)
    rounds = [0, 0, 0]
    checks: list[int] = []
    done = trio.Event()

    async def handler(job: Job) -> None:
        await trio.sleep(rng.random() * 0.02)

    async def coordinate(i: int) -> None:
        while not done.is_set():
            with contextlib.suppress(ConnectionLost):  # a round cut midway: the next begins
                await coordinators[i].share_cap()
            rounds[i] += 1
            await trio.lowlevel.checkpoint()

    async def produce() -> None:
        while not done.is_set():  # work moves from partition to partition
            q = pq.names[rng.randrange(3)]
            await jobs.enqueue_many(bus, q, [f"w{i}" for i in range(rng.randrange(1, 8))])
            await trio.sleep(0.01)

    async def check() -> None:
        while min(rounds) < 60:
            async with lock:  # no round step runs: claims and acks only lower what is held
                caps = await pq.limit()
                active = await actives(bus, pq)
                assert held(caps, active) <= total, (caps, active)
                checks.append(sum(active))
            await trio.lowlevel.checkpoint()
        done.set()

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        nursery.start_soon(produce)
        # the coordinators end by themselves once done is set (a cancel landing as a cut
        # fires would come out of a round as a group of both: not what this test is about)
        async with trio.open_nursery() as coordinating:
            for i in range(3):
                coordinating.start_soon(coordinate, i)
            await check()
        nursery.cancel_scope.cancel()
    cuts = [f for f in cut.faults if f.fired]
    assert len(cuts) > 10, "the third coordinator was cut midway, many times"
    assert any(checks) and len(checks) > 60
    assert max(checks) <= total


async def test_a_metronome_of_a_queue_without_a_total_looks_once_a_beat(
    bus: Bus, queue: str
) -> None:
    pq = await partitions.create(bus, queue, 2)
    faulty = FaultyTransport(bus.transport)
    watched = partitions.PartitionedQueue(Bus(faulty), pq.name, pq.names)
    metronome = partitions.PartitionedMetronome(watched, beat_ms=10_000, share_ms=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await wait_for(lambda: any(c.name == "cap_total" for c in faulty.calls))
        await wait_for(lambda: metronome.statistics().beats >= 2)  # a beat of each partition
        nursery.cancel_scope.cancel()
    looks = [c for c in faulty.calls if c.name.startswith("cap_")]
    assert [c.args[1] for c in looks] == ["begin"], "one look, no round, until the next beat"
    assert metronome.rounds == 0
    assert (await pq.limit()).shares == (None, None)


async def test_a_metronome_s_round_that_fails_is_run_again(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.set_limit(3)
    await jobs.enqueue_many(bus, pq.names[2], [f"j{i}" for i in range(5)])
    faulty = FaultyTransport(bus.transport)
    lost = faulty.fail(scripts("cap_share"), ConnectionLost("injected"), nth=2, after=True)
    watched = partitions.PartitionedQueue(Bus(faulty), pq.name, pq.names)
    metronome = partitions.PartitionedMetronome(watched, beat_ms=50, share_ms=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await wait_for(lambda: metronome.rounds >= 1)
        nursery.cancel_scope.cancel()
    assert lost.fired and metronome.round_failures == 1
    assert (await pq.limit()).shares == (0, 0, 3), "a later round moved the caps"


async def test_one_partition_is_a_plain_queue_with_its_cap(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 1)
    assert await pq.set_limit(3) == QueueCap(3, 0, (3,))
    assert (await queues.control(bus, queue)).max_active == 3
    assert await pq.set_limit(None) == QueueCap(None, 0, (None,))


async def test_a_worker_of_pq_serve_runs_the_rounds(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    assert sorted(s or 0 for s in (await pq.set_limit(4)).shares) == [1, 1, 2]
    await jobs.enqueue_many(bus, pq.names[2], [f"j{i}" for i in range(8)])
    running, go = Running(), trio.Event()

    async def handler(job: Job) -> None:
        running.enter()
        try:
            await go.wait()
        finally:
            running.leave()

    serves = pq.serve(handler, concurrency=8)
    assert len(serves[0].beside) == 1 and not any(s.beside for s in serves[1:])
    assert not any(s.beside for s in pq.serve(handler, metronome=False)), "rounds elsewhere"
    async with open_worker(bus, serves):  # no rounds started by hand: the worker runs them
        await wait_for(lambda: running.now == 4)  # the whole total, in the one busy partition
        assert (await pq.limit()).shares == (0, 0, 4)
        go.set()
    assert running.most == 4


async def test_one_coordinator_holds_the_lease_on_the_rounds(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 2)
    k0 = bus.keys(queue)

    async def begin(holder: str, lease_ms: int) -> tuple[int | None, int]:
        return await bus.run(protocol.cap_total_call(k0, "begin", holder, lease_ms))

    assert await begin("a", 60_000) == (None, 0), "no total: no round, no lease"
    await pq.set_limit(3)
    total, first = await begin("a", 60_000)
    assert total == 3 and first > 0
    assert await begin("b", 60_000) == (3, 0), "a's lease runs: b runs no round"
    assert (await begin("a", 1))[1] == first + 1, "a renews its lease (for 1 ms)"
    await wait_for(lambda: _begins(begin, "b"))  # a's lease ran out: b takes the rounds
    assert (await begin("a", 60_000))[1] == 0
    assert (await begin("", 0))[1] > 0, "a round without a holder (set_limit's) takes no lease"


async def _begins(begin: Any, holder: str) -> bool:
    return bool((await begin(holder, 60_000))[1])


async def test_cap_rounds_stopped_as_a_round_s_call_fails_stop_cleanly(
    bus: Bus, queue: str
) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.set_limit(3)
    faulty = FaultyTransport(bus.transport)
    rounds = partitions.CapRounds(partitions.PartitionedQueue(Bus(faulty), pq.name, pq.names))
    async with trio.open_nursery() as nursery:
        # the stop lands on one partition's stamp as another's connection drops
        stopped = faulty.cancel(scripts("cap_share"), nursery.cancel_scope, nth=2)
        lost = faulty.fail(scripts("cap_share"), ConnectionLost("injected"), nth=3)
        await nursery.start(rounds.run)
    assert stopped.fired and lost.fired
    assert (rounds.rounds, rounds.failures) == (0, 0)


class Interloper(FaultyTransport):
    """A real transport that runs ``hook`` once, just before the first ``lower`` of a round."""

    def __init__(self, inner: Transport, hook: Callable[[], Awaitable[None]]) -> None:
        super().__init__(inner)
        self.hook: Callable[[], Awaitable[None]] | None = hook

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> object:
        if name == "cap_share" and args[1] == "lower" and self.hook is not None:
            hook, self.hook = self.hook, None
            await hook()
        return await super().script(name, keys, args)


async def test_set_limit_fenced_off_by_a_round_cut_midway_begins_its_round_anew(
    bus: Bus, queue: str
) -> None:
    pq = await partitions.create(bus, queue, 3)
    for q in pq.names:
        await jobs.enqueue_many(bus, q, ["a", "b"])
    other = FaultyTransport(bus.transport)
    cut = other.fail(lambda c: c.name == "cap_share" and c.args[1] == "lower",
                     ConnectionLost("cut"), times=10)  # fmt: skip
    rival = partitions.PartitionedQueue(Bus(other), pq.name, pq.names)

    async def newer_round_cut_after_its_stamps() -> None:
        with pytest.raises(ConnectionLost):
            await rival.share_cap()

    mover = Interloper(bus.transport, newer_round_cut_after_its_stamps)
    c = await partitions.PartitionedQueue(Bus(mover), pq.name, pq.names).set_limit(4)
    assert cut.fired and mover.hook is None
    assert None not in c.shares and sum(s or 0 for s in c.shares) == 4, c
