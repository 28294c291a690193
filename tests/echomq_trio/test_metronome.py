"""Scheduled jobs: never claimed before their time, claimed soon after it with a metronome."""

import attrs
import pytest
import trio

from echomq_trio import (
    Bus,
    ConnectionLost,
    Consumer,
    Job,
    Metronome,
    MetronomeStats,
    ids,
    jobs,
    open_bus,
)
from echomq_trio.testing import FaultyTransport, scripts
from tests.support import wait_for


async def test_scheduled_job_is_claimed_after_its_run_at_never_before(bus: Bus, queue: str) -> None:
    now = await bus.transport.server_time_ms()
    run_ats = {}
    for offset in (300, 600, 900, 1500):
        a = ids.generate("JOB")
        run_ats[a] = now + offset
        await jobs.enqueue_at(bus, queue, "x", now + offset, job_id=a)
    handled: dict[str, int] = {}

    async def handler(job: Job) -> None:
        handled[job.id] = await bus.transport.server_time_ms()

    async with trio.open_nursery() as nursery:
        await nursery.start(Consumer(bus, queue, handler).run)
        await nursery.start(Metronome(bus, queue, beat_ms=1000).run)
        await wait_for(lambda: len(handled) == 4)
        nursery.cancel_scope.cancel()
    for a, at in run_ats.items():
        assert handled[a] >= at, "claimed before its run-at"
    # Loose bound: the metronome sleeps to the earliest due job, not to the next 1 s beat.
    assert max(handled[a] - at for a, at in run_ats.items()) < 900


@pytest.mark.cluster
async def test_scheduled_jobs_run_once_by_the_consumer_of_the_metronomes_bus_and_one_elsewhere(
    bus: Bus, queue: str, server_url: str
) -> None:
    """A consumer on the metronome's bus and one on another bus (another process's), both woken
    by the wake list: every job runs once, none before its run-at on the server's clock."""
    now = await bus.transport.server_time_ms()
    run_ats = {ids.generate("JOB"): now + 300 + 37 * i for i in range(20)}
    for job_id, at in run_ats.items():
        await jobs.enqueue_at(bus, queue, "x", at, job_id=job_id)
    handled: dict[str, list[int]] = {}

    async def handler(job: Job) -> None:
        handled.setdefault(job.id, []).append(await bus.transport.server_time_ms())

    async with open_bus(server_url) as other:
        near = Consumer(bus, queue, handler, concurrency=4)
        far = Consumer(other, queue, handler, concurrency=4)
        async with trio.open_nursery() as nursery:
            await nursery.start(Metronome(bus, queue, beat_ms=1000).run)
            await nursery.start(near.run)
            await nursery.start(far.run)
            await wait_for(lambda: len(handled) == len(run_ats))
            await wait_for(lambda: near.statistics().acked + far.statistics().acked == 20)
            nursery.cancel_scope.cancel()
    for job_id, at in run_ats.items():
        (started,) = handled[job_id]
        assert started >= at, "claimed before its run-at"
    assert near.statistics().claimed + far.statistics().claimed == len(run_ats)


async def test_an_earlier_job_scheduled_during_a_long_sleep_wakes_the_metronome(
    bus: Bus, queue: str
) -> None:
    handled: list[str] = []

    async def handler(job: Job) -> None:
        handled.append(job.id)

    async with trio.open_nursery() as nursery:
        await nursery.start(Consumer(bus, queue, handler).run)
        await nursery.start(Metronome(bus, queue, beat_ms=30_000).run)
        a = ids.generate("JOB")
        await jobs.enqueue_in(bus, queue, "x", 400, job_id=a)
        with trio.fail_after(10):  # far below the 30 s beat
            await wait_for(lambda: a in handled)
        nursery.cancel_scope.cancel()


async def test_metronome_reaps_expired_leases(bus: Bus, queue: str) -> None:
    a = ids.generate("JOB")
    await jobs.enqueue(bus, queue, "x", job_id=a)
    (job,) = await jobs.claim(bus, queue, lease_ms=100)  # a worker that then vanished
    metronome = Metronome(bus, queue, beat_ms=50)
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await wait_for(lambda: metronome.statistics().reaped == 1)
        nursery.cancel_scope.cancel()
    (again,) = await jobs.claim(bus, queue)
    assert again.id == a and again.attempts == job.attempts + 1


async def test_two_metronomes_promote_each_job_once(bus: Bus, queue: str) -> None:
    now = await bus.transport.server_time_ms()
    await jobs.enqueue_many(bus, queue, [])
    for i in range(200):
        await jobs.enqueue_at(bus, queue, "x", now + 100 + i)
    m1 = Metronome(bus, queue, beat_ms=100, batch=7)
    m2 = Metronome(bus, queue, beat_ms=100, batch=7)
    async with trio.open_nursery() as nursery:
        await nursery.start(m1.run)
        await nursery.start(m2.run)
        await wait_for(lambda: m1.statistics().promoted + m2.statistics().promoted >= 200)
        nursery.cancel_scope.cancel()
    assert m1.statistics().promoted + m2.statistics().promoted == 200
    assert (await jobs.counts(bus, queue)).pending == 200


@pytest.mark.parametrize(("kwargs"), [{"beat_ms": 0}, {"batch": 0}, {"beat_ms": 1.5}])
async def test_bad_settings(bus: Bus, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Metronome(bus, "q", **kwargs)  # type: ignore[arg-type]


async def test_statistics_are_frozen_snapshots_of_what_the_beats_did(bus: Bus, queue: str) -> None:
    now = await bus.transport.server_time_ms()
    for i in range(3):
        await jobs.enqueue_at(bus, queue, "x", now + i)
    await jobs.enqueue(bus, queue, "y")
    await jobs.claim(bus, queue, lease_ms=1)  # y: its lease ends at once
    faulty = FaultyTransport(bus.transport)
    down = faulty.fail(scripts("promote"), ConnectionLost("injected"), times=2)
    metronome = Metronome(Bus(faulty), queue, beat_ms=50)
    before = metronome.statistics()
    assert before == MetronomeStats()
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await wait_for(lambda: metronome.statistics().beats >= 2)
        nursery.cancel_scope.cancel()
    s = metronome.statistics()
    assert (s.promoted, s.reaped, s.errors, s.fired) == (3, 1, 2, 0)
    assert len(down.hits) == 2 and before == MetronomeStats()  # an old snapshot never changes
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        s.promoted = 0  # type: ignore[misc]
