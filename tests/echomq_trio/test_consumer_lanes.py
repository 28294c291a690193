"""Consumer with per-lane dispatch: one task per lane on a memory channel, order within a lane,
the cap on handlers running across lanes, lane tasks that end when idle or when their lane waits,
the claim gate, and a handler's ``StopConsumer`` with other lanes' work settled."""

import pytest
import trio

from echomq_trio import Bus, Consumer, DeferIn, Job, Metronome, StopConsumer, jobs, lanes
from tests.support import wait_for


async def test_each_lane_runs_in_order_in_a_task_of_its_own_and_the_task_ends_when_idle(
    bus: Bus, queue: str
) -> None:
    groups = [f"chat{i}" for i in range(5)]
    for g in groups:
        await lanes.enqueue_many(bus, queue, g, [f"{g}:{n}" for n in range(6)], limit=1)
    seen: dict[str, list[int]] = {g: [] for g in groups}
    tasks: dict[str, set[int]] = {g: set() for g in groups}

    async def handler(job: Job) -> None:
        group, n = job.text.split(":")
        assert job.group == group
        seen[group].append(int(n))
        tasks[group].add(id(trio.lowlevel.current_task()))
        await trio.sleep(0.001)

    consumer = Consumer(bus, queue, handler, per_lane=True, concurrency=4, lane_idle_s=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked == 30)
        await wait_for(lambda: consumer.lanes() == [])  # idle: every lane's task ended
        nursery.cancel_scope.cancel()
    assert seen == {g: list(range(6)) for g in groups}
    # A lane with limit 1 has one job at a time: its task takes the next one as the lane gives it
    # (or the task ended while the ack was on its way and a new one began).
    assert consumer.statistics().lane_tasks >= len(groups)
    assert all(len(t) >= 1 for t in tasks.values())
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active, c.completed_total) == (0, 0, 30)


async def test_no_more_handlers_run_at_once_than_the_concurrency_across_lanes(
    bus: Bus, queue: str
) -> None:
    for i in range(8):
        await lanes.enqueue_many(bus, queue, f"g{i}", ["a", "b"], limit=2)
    running = 0
    most = 0

    async def handler(job: Job) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await trio.sleep(0.02)
        running -= 1

    consumer = Consumer(bus, queue, handler, per_lane=True, concurrency=3, prefetch=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked == 16)
        nursery.cancel_scope.cancel()
    assert most == 3  # reached, never passed


async def test_a_lane_whose_job_is_deferred_ends_its_task_and_keeps_its_place(
    bus: Bus, queue: str
) -> None:
    await lanes.enqueue_many(bus, queue, "slow", ["1", "2"], limit=1)
    seen: list[str] = []
    visits = 0

    async def handler(job: Job) -> DeferIn | None:
        nonlocal visits
        if job.text == "1":
            visits += 1
            if visits == 1:
                return DeferIn(300, "not yet")
        seen.append(job.text)
        return None

    consumer = Consumer(bus, queue, handler, per_lane=True, lane_idle_s=30)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(Metronome(bus, queue, beat_ms=50).run)
        await wait_for(lambda: consumer.statistics().deferred == 1)
        # Ended at once (its lane waits on the server), not after the 30 s idle time.
        await wait_for(lambda: consumer.lanes() == [], timeout=5)
        await wait_for(lambda: seen == ["1", "2"])
        nursery.cancel_scope.cancel()
    assert consumer.statistics().lane_tasks >= 2  # a new task when the lane had work again


async def test_a_closed_claim_gate_holds_every_claim(bus: Bus, queue: str) -> None:
    await lanes.enqueue(bus, queue, "g", "x")
    gate = trio.Event()
    waits = 0

    async def claim_gate() -> None:
        nonlocal waits
        waits += 1
        await gate.wait()

    async def handler(job: Job) -> None:
        return None

    consumer = Consumer(bus, queue, handler, per_lane=True, claim_gate=claim_gate)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: waits == 1)
        await trio.testing.wait_all_tasks_blocked()
        assert consumer.statistics().claimed == 0  # the gate is closed: nothing claimed
        assert (await jobs.counts(bus, queue)).active == 0
        gate.set()
        await wait_for(lambda: consumer.statistics().acked == 1)
        nursery.cancel_scope.cancel()


async def test_stop_consumer_in_one_lane_settles_what_other_lanes_finished(
    bus: Bus, queue: str
) -> None:
    await lanes.enqueue(bus, queue, "done", "ok")
    await lanes.enqueue(bus, queue, "fatal", "stop")
    finished = trio.Event()

    async def handler(job: Job) -> None:
        if job.text == "ok":
            finished.set()
            return None
        await finished.wait()  # the other lane's job has finished, its ack maybe not yet sent
        raise StopConsumer("token revoked")

    consumer = Consumer(bus, queue, handler, per_lane=True, concurrency=2, prefetch=0)
    with pytest.raises(StopConsumer, match="token revoked"):
        await consumer.run()
    stats = consumer.statistics()
    assert (stats.acked, stats.released, stats.held) == (1, 1, 0)
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active, c.completed_total) == (1, 0, 1)
    (status,) = await lanes.status(bus, queue, ["fatal"])
    assert status.depth == 1  # handed back to its lane, no attempt spent


async def test_bad_lane_idle_time(bus: Bus) -> None:
    async def handler(job: Job) -> None:
        return None

    with pytest.raises(ValueError, match="lane_idle_s must be positive"):
        Consumer(bus, "q", handler, per_lane=True, lane_idle_s=0)
