"""Recurring schedules: idempotent registration, server-clock firing anchored to the schedule,
missed runs collapsed, exactly once with several metronome processes."""

import pytest
import trio

from echomq_trio import Bus, Consumer, Job, Metronome, events, ids, jobs, lanes, repeat
from echomq_trio.repeat import Registered
from tests.support import read_line, spawn, wait_for

pytestmark = pytest.mark.cluster


async def test_register_twice_answers_exists_and_changes_nothing(bus: Bus, queue: str) -> None:
    first = await repeat.register(bus, queue, "digest", 86_400_000, "v1", first_in_ms=5_000)
    assert first[0] is Registered.REGISTERED
    again = await repeat.register(bus, queue, "digest", 1_000, "v2", first_in_ms=0)
    assert again == (Registered.EXISTS, first[1])
    (reg,) = await repeat.list_repeats(bus, queue)
    assert (reg.name, reg.every_ms, reg.template, reg.next_run_ms) == (
        "digest", 86_400_000, b"v1", first[1],
    )  # fmt: skip


@pytest.mark.slow
async def test_reregister_from_a_new_process_changes_nothing(
    bus: Bus, queue: str, server_url: str
) -> None:
    at = (await repeat.register(bus, queue, "boot", 60_000, "t", first_in_ms=60_000))[1]
    before = await repeat.list_repeats(bus, queue)
    async with spawn("register", server_url, queue, "boot", "1000", "other") as proc:
        assert await read_line(proc) == "exists"
    assert await repeat.list_repeats(bus, queue) == before
    assert before[0].next_run_ms == at


async def test_cancel_and_advance(bus: Bus, queue: str) -> None:
    await repeat.register(bus, queue, "x", 1000, "t", first_in_ms=0)
    nxt = await repeat.advance(bus, queue, "x")
    now = await bus.transport.server_time_ms()
    assert nxt is not None and now < nxt <= now + 1000
    assert await repeat.cancel(bus, queue, "x") is True
    assert await repeat.cancel(bus, queue, "x") is False
    assert await repeat.advance(bus, queue, "x") is None
    assert await repeat.list_repeats(bus, queue) == []


async def test_fire_makes_one_job_per_occurrence_and_anchors_the_next_run(
    bus: Bus, queue: str
) -> None:
    _, at = await repeat.register(bus, queue, "tick", 200, "payload", first_in_ms=0)
    due = await repeat.due(bus, queue)
    assert [d.name for d in due] == ["tick"]
    fired = await repeat.fire(bus, queue)
    assert fired.fired == 1
    (reg,) = await repeat.list_repeats(bus, queue)
    assert (reg.next_run_ms - at) % 200 == 0 and reg.next_run_ms > fired.server_now_ms - 200
    (job,) = await jobs.claim(bus, queue, 5)
    assert job.payload == b"payload" and ids.is_valid(job.id, "JOB")
    assert (await repeat.fire(bus, queue)).fired == 0  # not due again yet


async def test_missed_runs_collapse_into_one(bus: Bus, queue: str) -> None:
    _, at = await repeat.register(bus, queue, "often", 50, "p", first_in_ms=0)

    async def five_periods_passed() -> bool:
        return await bus.transport.server_time_ms() >= at + 260

    await wait_for(five_periods_passed)
    fired = await repeat.fire(bus, queue)
    assert fired.fired == 1
    assert fired.next_due_ms is not None and fired.next_due_ms > fired.server_now_ms
    assert (fired.next_due_ms - at) % 50 == 0
    assert (await jobs.counts(bus, queue)).pending == 1


async def test_a_repeat_with_a_group_fires_into_its_lane(bus: Bus, queue: str) -> None:
    await repeat.register(bus, queue, "room-digest", 60_000, "top10", group="-100777")
    await repeat.fire(bus, queue)
    (job,) = await lanes.jobs(bus, queue, "-100777")
    assert job.payload == b"top10"


async def test_metronome_fires_on_time_into_a_consumer(bus: Bus, queue: str) -> None:
    _, at = await repeat.register(bus, queue, "soon", 300, "x", first_in_ms=300)
    handled: list[int] = []

    async def handler(job: Job) -> None:
        handled.append(await bus.transport.server_time_ms())

    async with trio.open_nursery() as nursery:
        await nursery.start(Consumer(bus, queue, handler).run)
        await nursery.start(Metronome(bus, queue, beat_ms=5_000).run)
        await wait_for(lambda: len(handled) >= 3)
        nursery.cancel_scope.cancel()
    for n, t in enumerate(handled[:3]):
        assert t >= at + 300 * n


@pytest.mark.timeout_s(180)
@pytest.mark.slow
async def test_three_metronome_processes_fire_every_occurrence_once(
    bus: Bus, queue: str, server_url: str
) -> None:
    every = 100
    _, at = await repeat.register(bus, queue, "beat", every, "x", first_in_ms=1_000)
    async with (
        spawn("metronome", server_url, queue) as m1,
        spawn("metronome", server_url, queue) as m2,
        spawn("metronome", server_url, queue) as m3,
    ):
        for m in (m1, m2, m3):
            assert await read_line(m) == "ready"

        async def enough() -> bool:
            return (await jobs.counts(bus, queue)).pending >= 55

        await wait_for(enough, timeout=120)
    fired = [e for e in await events.read(bus, queue, count=10_000) if e.kind == "fired"]
    occurrences = [int(e.fields["at"]) for e in fired]
    assert len(occurrences) >= 55
    assert len(occurrences) == len(set(occurrences)), "an occurrence fired twice"
    assert all((o - at) % every == 0 for o in occurrences)
    assert (await jobs.counts(bus, queue)).pending == len(fired)


async def test_list_repeats_pages_in_next_run_order(bus: Bus, queue: str) -> None:
    for n in range(7):
        await repeat.register(bus, queue, f"r{n}", 60_000, "t", first_in_ms=1_000 * (n + 1))
    pages = [await repeat.list_repeats(bus, queue, limit=3, offset=o) for o in (0, 3, 6, 9)]
    assert [[r.name for r in page] for page in pages] == [
        ["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6"], [],
    ]  # fmt: skip
