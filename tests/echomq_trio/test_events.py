"""The events stream: written by the scripts in the same step as each transition, readable from a
point, followable, and shareable with a consumer group."""

import pytest
import trio

from echomq_trio import Bus, events, ids, jobs, lanes

pytestmark = pytest.mark.cluster


async def test_transitions_write_events_in_order(bus: Bus, queue: str) -> None:
    a, b = ids.generate("JOB"), ids.generate("JOB")
    await jobs.enqueue(bus, queue, "x", job_id=a)
    await lanes.enqueue(bus, queue, "g", "y", job_id=b)
    got = await jobs.claim(bus, queue, 2)
    ja = next(j for j in got if j.id == a)
    jb = next(j for j in got if j.id == b)
    await jobs.ack(bus, queue, a, ja.token)
    await jobs.retry(bus, queue, b, jb.token, 0, 5, "boom")
    await jobs.promote(bus, queue)
    (jb2,) = await jobs.claim(bus, queue, 1)
    await jobs.defer(bus, queue, b, jb2.token, 0, "later")
    (jb3,) = await jobs.claim(bus, queue, 1)
    await jobs.retry(bus, queue, b, jb3.token, 0, 1, "final")
    seen = [(e.kind, e.subject) for e in await events.read(bus, queue)]
    assert seen[:2] == [("enqueued", a), ("enqueued", b)]
    kinds_b = [k for k, s in seen if s == b]
    assert kinds_b == ["enqueued", "claimed", "retried", "claimed", "deferred", "claimed", "dead"]
    assert [k for k, s in seen if s == a] == ["enqueued", "claimed", "acked"]
    dead = next(e for e in await events.read(bus, queue) if e.kind == "dead")
    assert dead.fields["error"] == "final" and dead.time_ms > 0


async def test_consumer_group_shares_and_acks(bus: Bus, queue: str) -> None:
    for _ in range(5):
        await jobs.enqueue(bus, queue, "x")
    assert await events.create_group(bus, queue, "audit") is True
    assert await events.create_group(bus, queue, "audit") is False
    first = await events.read_group(bus, queue, "audit", "c1", count=3)
    second = await events.read_group(bus, queue, "audit", "c2", count=10)
    assert len(first) == 3 and len(second) == 2
    assert await events.ack(bus, queue, "audit", [e.stream_id for e in first]) == 3
    # c2 "crashes" without acking: its entries are still pending for it, and c1 can take them.
    assert len(await events.read_group(bus, queue, "audit", "c2", pending=True)) == 2
    taken = await events.autoclaim(bus, queue, "audit", "c1", min_idle_ms=0)
    assert [e.stream_id for e in taken] == [e.stream_id for e in second]
    assert await events.read_group(bus, queue, "audit", "c1") == []


async def test_follow_yields_new_events(bus: Bus, queue: str) -> None:
    # "From now on": the old event is never yielded. The reader takes its starting point at some
    # moment we cannot see, so the writer keeps writing until it reads one (no race, no sleep
    # as a guess).
    await jobs.enqueue(bus, queue, "old")
    fresh: list[str] = []
    got = []
    async with trio.open_nursery() as nursery:

        async def reader() -> None:
            async for event in events.follow(bus, queue, poll_s=0.02):
                got.append(event)
                nursery.cancel_scope.cancel()
                return

        async def writer() -> None:
            while True:
                fresh.append(ids.generate("JOB"))
                await jobs.enqueue(bus, queue, "new", job_id=fresh[-1])
                await trio.sleep(0.02)

        nursery.start_soon(reader)
        nursery.start_soon(writer)
    assert [e.kind for e in got] == ["enqueued"] and got[0].subject in fresh


async def test_follow_from_a_point_yields_what_came_after_it(bus: Bus, queue: str) -> None:
    await jobs.enqueue(bus, queue, "old")
    point = await events.last_id(bus, queue)
    fresh = ids.generate("JOB")
    await jobs.enqueue(bus, queue, "new", job_id=fresh)
    async for event in events.follow(bus, queue, after=point, poll_s=0.02):
        assert (event.kind, event.subject) == ("enqueued", fresh)
        break


async def test_the_stream_ids_the_checks_admit_are_the_server_s(bus: Bus, queue: str) -> None:
    await jobs.enqueue(bus, queue, "x")
    (first,) = await events.read(bus, queue, after="-")
    earlier = str(first.time_ms - 1)
    assert await events.read(bus, queue, after="0") == [first]
    assert await events.read(bus, queue, after=earlier) == [first]
    assert await events.read(bus, queue, after=f"{earlier}-0") == [first]
    assert await events.read(bus, queue, after=first.stream_id) == []
    for group, start, expected in [("all", "0", [first]), ("ms", earlier, [first]),
                                   ("id", first.stream_id, []), ("new", "$", [])]:  # fmt: skip
        assert await events.create_group(bus, queue, group, start=start)
        assert await events.read_group(bus, queue, group, "c") == expected, group
    assert await events.ack(bus, queue, "all", [first.stream_id]) == 1
