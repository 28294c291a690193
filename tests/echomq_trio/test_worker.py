"""``Worker``: several queues in one object; scheduled and recurring jobs run without a separate
metronome; shutdown hands held jobs back without spending attempts; a cancelled start-up leaves
nothing running. Plus the consumer's one log line when no metronome serves its queue."""

import logging

import pytest
import trio

from echomq_trio import (
    Bus,
    Consumer,
    Job,
    Serve,
    StopConsumer,
    Worker,
    WorkerState,
    ids,
    jobs,
    lanes,
    open_worker,
    repeat,
)
from echomq_trio.testing import FaultyTransport, scripts
from tests.support import wait_for

pytestmark = pytest.mark.cluster


async def test_serves_several_queues_each_with_its_handler(bus: Bus) -> None:
    names = [f"t.w{i}.{ids.generate('JOB')[-6:]}" for i in range(3)]
    seen: dict[str, list[str]] = {n: [] for n in names}

    def handler_for(name: str):  # type: ignore[no-untyped-def]
        async def handle(job: Job) -> None:
            seen[name].append(job.text)

        return handle

    for n in names:
        await jobs.enqueue_many(bus, n, [(ids.generate("JOB"), f"{n}/{i}") for i in range(20)])
    serves = [Serve(n, handler_for(n), concurrency=3, consumers=2) for n in names]
    async with open_worker(bus, serves, grace_s=1) as worker:
        assert worker.statistics().state is WorkerState.RUNNING
        assert worker.queues == tuple(names)
        await wait_for(lambda: all(len(v) == 20 for v in seen.values()))
        await wait_for(lambda: all(q.consumer.acked == 20 for q in worker.statistics().queues))
    for n in names:
        assert sorted(seen[n]) == sorted(f"{n}/{i}" for i in range(20))
        assert (await jobs.counts(bus, n)).completed_total == 20
    stats = worker.statistics()
    assert stats.state is WorkerState.STOPPED
    assert [(q.queue, q.consumers, q.consumer.claimed) for q in stats.queues] == [
        (n, 2, 20) for n in names
    ]
    assert stats.of(names[1]).metronome is not None
    with pytest.raises(KeyError):
        stats.of("t.nope")


async def test_scheduled_and_recurring_jobs_run_without_a_separate_metronome(
    bus: Bus, queue: str
) -> None:
    got: list[str] = []

    async def handle(job: Job) -> None:
        got.append(job.text)

    await jobs.enqueue_in(bus, queue, "delayed", 200)
    await repeat.register(bus, queue, "tick", 150, "again", first_in_ms=100)
    worker = Worker(bus, [Serve(queue, handle, beat_ms=100)])
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_for(lambda: "delayed" in got and got.count("again") >= 2)
        worker.stop()
    m = worker.statistics().of(queue).metronome
    assert m is not None and m.promoted >= 1 and m.fired >= 2


async def test_a_queue_served_per_lane_keeps_each_lanes_order(bus: Bus, queue: str) -> None:
    for g in ("a", "b", "c"):
        await lanes.enqueue_many(bus, queue, g, [f"{g}{n}" for n in range(5)], limit=1)
    got: dict[str, list[str]] = {"a": [], "b": [], "c": []}

    async def handle(job: Job) -> None:
        assert job.group is not None
        got[job.group].append(job.text)

    serve = Serve(queue, handle, per_lane=True, concurrency=2, lane_idle_s=0.1)
    async with open_worker(bus, [serve], grace_s=0) as worker:
        await wait_for(lambda: worker.statistics().of(queue).consumer.acked == 15)
    assert got == {g: [f"{g}{n}" for n in range(5)] for g in got}
    assert worker.statistics().of(queue).consumer.lane_tasks >= 3


async def test_shutdown_returns_held_jobs_without_spending_attempts(bus: Bus, queue: str) -> None:
    all_ids = [ids.generate("JOB") for _ in range(30)]
    await jobs.enqueue_many(bus, queue, [(i, "x") for i in all_ids])
    started: list[str] = []

    async def handle(job: Job) -> None:
        started.append(job.id)
        if len(started) <= 3:
            return
        await trio.sleep_forever()  # held until the grace period ends

    worker = Worker(bus, [Serve(queue, handle, concurrency=4, prefetch=6)], grace_s=0.3)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_for(lambda: worker.statistics().of(queue).consumer.acked == 3)
        await wait_for(lambda: worker.statistics().of(queue).consumer.held == 10)
        worker.stop()
    c = worker.statistics().of(queue).consumer
    assert (c.held, c.acked, c.released) == (0, 3, c.claimed - 3)
    counts = await jobs.counts(bus, queue)
    assert (counts.active, counts.pending, counts.completed_total) == (0, 27, 3)
    rows = await jobs.list_jobs(bus, queue, "pending", limit=100)
    assert len(rows) == 27 and all(r.attempts == 0 for r in rows)


async def test_cancelled_start_up_leaves_nothing_running_and_nothing_held(
    bus: Bus, queue: str
) -> None:
    other = queue + ".b"
    await jobs.enqueue_many(bus, queue, [(ids.generate("JOB"), "x") for _ in range(5)])
    faulty = FaultyTransport(bus.transport)
    handled: list[str] = []

    async def handle(job: Job) -> None:
        handled.append(job.id)
        await trio.sleep_forever()

    worker = Worker(
        Bus(faulty), [Serve(queue, handle, consumers=2), Serve(other, handle)], grace_s=0
    )
    running = False
    with trio.CancelScope() as scope:
        # The first claim is made while the worker still starts its other consumers.
        cut = faulty.cancel(scripts("claim"), scope, nth=1)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            running = True
    assert cut.fired and scope.cancelled_caught and not running
    assert worker.statistics().state is WorkerState.STOPPED
    counts = await jobs.counts(bus, queue)
    assert (counts.active, counts.pending) == (0, 5)
    assert all(r.attempts == 0 for r in await jobs.list_jobs(bus, queue, "pending"))


async def test_open_worker_lets_the_blocks_error_out_and_hands_jobs_back(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue_many(bus, queue, [(ids.generate("JOB"), "x") for _ in range(4)])

    async def handle(job: Job) -> None:
        await trio.sleep_forever()

    with pytest.raises(KeyError, match="boom"):
        async with open_worker(bus, [Serve(queue, handle, concurrency=4)], grace_s=0) as w:
            await wait_for(lambda: w.statistics().of(queue).consumer.held == 4)
            raise KeyError("boom")
    assert (await jobs.counts(bus, queue)).pending == 4


async def test_a_stop_consumer_stops_the_worker(bus: Bus, queue: str) -> None:
    await jobs.enqueue(bus, queue, "x")

    async def handle(job: Job) -> None:
        raise StopConsumer("revoked")

    worker = Worker(bus, [Serve(queue, handle), Serve(queue + ".b", handle)])
    with pytest.raises(StopConsumer, match="revoked"):
        await worker.run()
    assert worker.statistics().state is WorkerState.STOPPED
    assert (await jobs.counts(bus, queue)).pending == 1
    with pytest.raises(RuntimeError, match="runs once"):
        await worker.run()


async def test_bad_queue_lists_raise_before_anything_runs(bus: Bus, queue: str) -> None:
    async def handle(job: Job) -> None:
        pass

    with pytest.raises(ValueError, match="at least one"):
        Worker(bus, [])
    with pytest.raises(TypeError, match="sequence of Serve"):
        Worker(bus, Serve(queue, handle))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="served once"):
        Worker(bus, [Serve(queue, handle), Serve(queue, handle)])
    with pytest.raises(ValueError, match="consumers"):
        Worker(bus, [Serve(queue, handle, consumers=0)])
    with pytest.raises(ValueError, match="concurrency"):
        Worker(bus, [Serve(queue, handle, concurrency=0)])
    with pytest.raises(ValueError):
        Worker(bus, [Serve("bad{name}", handle)])


async def test_a_consumer_without_a_metronome_says_so_once(
    bus: Bus, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    now = await bus.transport.server_time_ms()
    await jobs.enqueue_at(bus, queue, "late", now - 60_000)
    faulty = FaultyTransport(bus.transport)

    async def handle(job: Job) -> None:
        raise AssertionError("nothing is claimable")

    def claims() -> int:
        return sum(1 for c in faulty.calls if c.name == "claim")

    def warnings() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "no metronome serves" in r.getMessage()]

    caplog.set_level(logging.WARNING, logger="echomq_trio.consumer")
    async with trio.open_nursery() as nursery:
        await nursery.start(Consumer(Bus(faulty), queue, handle, beat_ms=50).run)
        await wait_for(lambda: len(warnings()) == 1)
        seen = claims()
        await wait_for(lambda: claims() >= seen + 12)  # more than twice the check's period
        nursery.cancel_scope.cancel()
    (record,) = warnings()
    assert queue in record.getMessage() and "1 scheduled jobs" in record.getMessage()
