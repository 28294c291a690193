"""Cancelling a consumer: unfinished jobs go back to pending at once, attempts unchanged, within
the grace period."""

import pytest
import trio

from echomq_trio import Bus, Consumer, Job, ids, jobs, open_bus
from tests.support import wait_for


async def test_cancel_returns_unfinished_jobs_at_once_without_spending_attempts(
    bus: Bus, queue: str
) -> None:
    all_ids = [ids.generate("JOB") for _ in range(40)]
    await jobs.enqueue_many(bus, queue, [(i, "x") for i in all_ids])
    started: list[str] = []
    finished: list[str] = []

    async def handler(job: Job) -> None:
        started.append(job.id)
        if len(started) <= 2:
            return None  # two quick ones finish before the shutdown
        await trio.sleep_forever()  # the rest never finish on their own
        finished.append(job.id)

    grace = 0.5
    consumer = Consumer(bus, queue, handler, concurrency=4, prefetch=8, grace_s=grace)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: len(started) >= 6 and consumer.statistics().acked == 2)
        t0 = trio.current_time()
        nursery.cancel_scope.cancel()
    took = trio.current_time() - t0
    assert took < grace + 2.0, f"shutdown took {took:.2f}s"
    assert not finished
    stats = consumer.statistics()
    assert stats.held == 0 and stats.released == stats.claimed - 2 >= 4
    c = await jobs.counts(bus, queue)
    assert (c.active, c.pending, c.completed_total) == (0, 38, 2)
    # Attempts unchanged: every job is back where it was, attempts 0.
    rows = await jobs.list_jobs(bus, queue, "pending", limit=100)
    assert all(r.attempts == 0 for r in rows) and len(rows) == 38


async def test_handlers_that_finish_within_the_grace_period_are_acked(bus: Bus, queue: str) -> None:
    await jobs.enqueue_many(bus, queue, [(ids.generate("JOB"), "x") for _ in range(3)])
    gate = trio.Event()
    running = 0

    async def handler(job: Job) -> None:
        nonlocal running
        running += 1
        await gate.wait()
        await trio.sleep(0.1)  # finishes inside the grace period

    consumer = Consumer(bus, queue, handler, concurrency=3, grace_s=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: running == 3)
        gate.set()
        nursery.cancel_scope.cancel()
    assert consumer.statistics().acked == 3
    c = await jobs.counts(bus, queue)
    assert (c.active, c.pending, c.completed_total) == (0, 0, 3)


async def test_cancel_of_an_idle_consumer_is_prompt(bus: Bus, queue: str) -> None:
    async def handler(job: Job) -> None:
        return None

    consumer = Consumer(bus, queue, handler, beat_ms=10_000, grace_s=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        t0 = trio.current_time()
        nursery.cancel_scope.cancel()
    assert trio.current_time() - t0 < 2


@pytest.mark.parametrize("transport", ["trio", "glide"])
async def test_a_shutdown_that_cancels_the_bus_too_still_hands_the_jobs_back(
    server_url: str, queue: str, transport: str
) -> None:
    """A shutdown that cancels everything at once (a SIGTERM cancels the whole program, the bus's
    own block with it): the consumer's release, under its shield, still reaches the server, on
    either transport, so the held jobs are pending at once and not after their leases."""
    held = trio.Event()

    async def handler(job: Job) -> None:
        held.set()
        await trio.sleep_forever()

    with trio.CancelScope() as everything:
        async with open_bus(server_url, transport=transport) as bus, trio.open_nursery() as n:
            await jobs.enqueue_many(bus, queue, [(ids.generate("JOB"), "x") for _ in range(5)])
            consumer = Consumer(bus, queue, handler, concurrency=2, prefetch=3, lease_ms=600_000)
            await n.start(consumer.run)
            await held.wait()
            everything.cancel()
    assert consumer.statistics().released == consumer.statistics().claimed == 5
    async with open_bus(server_url, transport=transport) as bus:
        c = await jobs.counts(bus, queue)
    assert (c.active, c.pending) == (0, 5)
