"""Retention per queue: the dead set bounded by count and by age (trimmed a bounded number per
death), the events stream on or off and its length, totals always kept."""

import pytest

from echomq_trio import Bus, events, jobs, retention
from echomq_trio.results import Retention
from tests.support import wait_for

pytestmark = pytest.mark.cluster


async def bury(bus: Bus, queue: str, n: int) -> list[str]:
    """Enqueue ``n`` jobs and bury each at once; their ids in order of death."""
    buried = []
    for _ in range(n):
        job_id = (await jobs.enqueue(bus, queue, "x")).id
        (job,) = await jobs.claim(bus, queue)
        assert await jobs.retry(bus, queue, job.id, job.token, 0, 1, "no", buried=True) == "dead"
        buried.append(job_id)
    return buried


async def test_defaults_and_settings_round_trip(bus: Bus, queue: str) -> None:
    assert await retention.get(bus, queue) == Retention(None, None, True, 10_000)
    set_ = await retention.configure(
        bus, queue, dead_max=5, dead_max_age_ms=60_000, events=False, events_max_len=100
    )
    assert set_ == Retention(5, 60_000, False, 100) == await retention.get(bus, queue)
    assert await retention.configure(bus, queue) == Retention(None, None, True, 10_000)


async def test_the_dead_set_is_bounded_by_count_and_trimmed_rows_go(bus: Bus, queue: str) -> None:
    first = await bury(bus, queue, 6)
    await retention.configure(bus, queue, dead_max=3)
    later = await bury(bus, queue, 1)
    dead = [d.id for d in await jobs.dead_jobs(bus, queue)]
    assert dead == (first + later)[-3:]  # the oldest went, at most 16 per death
    for gone in first[:4]:
        assert await jobs.get_job(bus, queue, gone) is None
    c = await jobs.counts(bus, queue)
    assert (c.dead, c.dead_total) == (3, 7)  # the total is kept


async def test_a_death_trims_at_most_sixteen(bus: Bus, queue: str) -> None:
    await bury(bus, queue, 20)
    await retention.configure(bus, queue, dead_max=1)
    await bury(bus, queue, 1)
    assert (await jobs.counts(bus, queue)).dead == 21 - 16
    await bury(bus, queue, 1)
    assert (await jobs.counts(bus, queue)).dead == 1


async def test_the_dead_set_is_bounded_by_age(bus: Bus, queue: str) -> None:
    old = await bury(bus, queue, 2)
    await retention.configure(bus, queue, dead_max_age_ms=50)
    started = await bus.transport.server_time_ms()

    async def aged() -> bool:  # the old deaths are past the bound (server clock)
        return await bus.transport.server_time_ms() > started + 60

    await wait_for(aged)
    (fresh,) = await bury(bus, queue, 1)
    assert [d.id for d in await jobs.dead_jobs(bus, queue)] == [fresh]
    assert [await jobs.get_job(bus, queue, i) for i in old] == [None, None]


async def test_events_off_and_capped(bus: Bus, queue: str) -> None:
    await retention.configure(bus, queue, events=False)
    await jobs.enqueue(bus, queue, "quiet")
    assert await events.read(bus, queue) == []
    await retention.configure(bus, queue, events_max_len=10)
    for _ in range(300):
        await jobs.enqueue(bus, queue, "loud")
    length = await bus.command("XLEN", bus.keys(queue).events)
    assert isinstance(length, int) and 10 <= length < 300  # MAXLEN ~: trimmed by whole nodes
    assert (await jobs.counts(bus, queue)).pending == 301


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"dead_max": -1}, ValueError),
        ({"dead_max": 1.5}, TypeError),
        ({"dead_max_age_ms": 0}, ValueError),
        ({"events": "no"}, TypeError),
        ({"events_max_len": 0}, ValueError),
    ],
)
async def test_bad_settings_are_refused_before_any_io(
    bus: Bus, queue: str, kwargs: dict[str, object], error: type
) -> None:
    with pytest.raises(error):
        await retention.configure(bus, queue, **kwargs)  # type: ignore[arg-type]
    assert not (await jobs.counts(bus, queue)).exists
