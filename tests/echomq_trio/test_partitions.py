"""Partitioned queues: the partitions' names and the lane hash (pure), then a partitioned queue
on a real server and on the 3-node cluster: every job runs once, a lane keeps its order, counts
add up, and ``create`` is idempotent and refuses what it must."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
import trio
import trio.lowlevel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from echomq_trio import (
    Bus,
    Job,
    StopConsumer,
    events,
    ids,
    jobs,
    lanes,
    metrics,
    open_bus,
    open_worker,
    partitions,
    queues,
)
from echomq_trio._partitioning import MAX_PARTITIONED_NAME_BYTES, MAX_PARTITIONS, slot_range
from echomq_trio.errors import JobNotFound
from echomq_trio.jobs import Outcome
from echomq_trio.keys import queue_keys
from echomq_trio.resp._cluster import SLOTS, key_slot
from echomq_trio.results import Cancelled, Counts
from tests.support import wait_for

queue_names = st.text(
    st.characters(codec="utf-8", exclude_characters="{}"), min_size=1, max_size=40
).filter(lambda s: s.isprintable() and not any(c.isspace() for c in s))


def slot_of(queue: str) -> int:
    return key_slot(queue_keys(queue).meta)


# --- pure -----------------------------------------------------------------------------------------


def test_one_partition_is_the_plain_queue() -> None:
    assert partitions.partition_names("orders", 1) == ("orders",)


@given(queue=queue_names, n=st.integers(1, 12))
def test_names_are_valid_distinct_and_one_per_range_of_the_slots(queue: str, n: int) -> None:
    got = partitions.partition_names(queue, n)
    assert len(got) == n and got[0] == queue and len(set(got)) == n
    for name in got:
        queue_keys(name)  # a valid queue name: raises otherwise
        slots = {key_slot(k) for k in (queue_keys(name).meta, queue_keys(name).pending)}
        assert slots == {slot_of(name)}, "every key of a partition in its one slot"
    ranges = [slot_of(name) * n // SLOTS for name in got]
    assert sorted(ranges) == list(range(n)), "one partition in each of the n ranges"
    first = ranges[0]
    for i, name in enumerate(got[1:], 1):
        share = slot_range((first + i) % n, n)
        assert share.start < slot_of(name) < share.stop - 1, "one slot clear of the range's edges"


def test_three_partitions_land_on_the_three_primaries_of_an_even_split() -> None:
    # form_cluster's split (and redis-cli's, which rounds the other way at the edges)
    for split in ([(0, 5460), (5461, 10921), (10922, 16383)],
                  [(0, 5460), (5461, 10922), (10923, 16383)]):  # fmt: skip
        for queue in ("orders", "notify", "t.0123456789", "x" * MAX_PARTITIONED_NAME_BYTES):
            owners = {
                next(i for i, (lo, hi) in enumerate(split) if lo <= slot_of(name) <= hi)
                for name in partitions.partition_names(queue, 3)
            }
            assert owners == {0, 1, 2}, queue


def test_names_are_deterministic_fixed_values() -> None:
    # fixed expected values: a change of the naming rule strands every partitioned queue's data
    assert partitions.partition_names("orders", 3) == ("orders", "orders~p1.0", "orders~p2.3")
    assert partitions.partition_names("notify", 2) == partitions.partition_names("notify", 2)


def test_bad_counts_and_long_names_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="too long to partition"):
        partitions.partition_names("x" * (MAX_PARTITIONED_NAME_BYTES + 1), 2)
    partitions.partition_names("x" * (MAX_PARTITIONED_NAME_BYTES + 1), 1)  # a plain queue: fine
    with pytest.raises(ValueError, match="partitions must be from 1 to"):
        partitions.partition_names("orders", 0)
    with pytest.raises(ValueError, match="partitions must be from 1 to"):
        partitions.partition_names("orders", MAX_PARTITIONS + 1)
    with pytest.raises(TypeError, match="partitions must be an int"):
        partitions.partition_names("orders", True)
    with pytest.raises(ValueError, match="braces"):
        partitions.partition_names("a{b}", 2)


def test_the_lane_hash_is_crc32_fixed_values() -> None:
    assert [partitions.route(g, 3) for g in ("chat1", "-1001234567890", "A", "B")] == [2, 2, 2, 1]
    # zlib's CRC-32 of the UTF-8 bytes: chat1 3048880307, ü 1675192789, chat42 897520198
    assert [partitions.route(g, 7) for g in ("chat1", "A", "ü", "chat42")] == [4, 2, 4, 1]
    assert partitions.route("anything", 1) == 0


def test_the_lane_hash_is_the_same_in_another_process() -> None:
    groups = [f"chat{i}" for i in range(50)]
    here = [partitions.route(g, 5) for g in groups]
    code = ("from echomq_trio import partitions; "
            f"print([partitions.route(g, 5) for g in {groups!r}])")  # fmt: skip
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": "12345"})  # fmt: skip
    assert there.stdout.strip() == repr(here)


def test_sum_of_counts_adds_every_field() -> None:
    fields = [f.name for f in Counts.__attrs_attrs__ if f.name != "exists"]  # type: ignore[attr-defined]
    a = Counts(exists=False, **{f: 1 for f in fields})
    b = Counts(exists=True, **{f: i for i, f in enumerate(fields)})
    total = partitions.sum_counts([a, b])
    assert total.exists is True
    assert [getattr(total, f) for f in fields] == [1 + i for i in range(len(fields))]


# --- on a server ----------------------------------------------------------------------------------


@pytest.mark.cluster
async def test_create_is_idempotent_and_open_reads_the_count(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    assert pq.names == partitions.partition_names(queue, 3)
    again = await partitions.create(bus, queue, 3)
    assert again.names == pq.names
    opened = await partitions.open(bus, queue)
    assert opened.names == pq.names and opened.n == 3
    plain = await partitions.open(bus, queue + ".plain")
    assert plain.names == (queue + ".plain",)
    with pytest.raises(ValueError, match=r"has 3 partitions, not 2: .*dissolve"):
        await partitions.create(bus, queue, 2)
    with pytest.raises(ValueError, match="is partition 1 of queue"):
        await partitions.open(bus, pq.names[1])


@pytest.mark.cluster
async def test_create_refuses_a_queue_with_jobs_and_a_partition_name_in_use(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue(bus, queue, "x")
    with pytest.raises(ValueError, match=r"holds jobs: .*drain"):
        await partitions.create(bus, queue, 2)
    assert (await partitions.create(bus, queue, 1)).names == (queue,)  # a plain queue: fine
    other = queue + ".b"
    await jobs.enqueue(bus, partitions.partition_names(other, 3)[2], "squatter")
    with pytest.raises(ValueError, match=r"partition 2 of .* holds another queue's data"):
        await partitions.create(bus, other, 3)
    assert await bus.command("HGET", bus.keys(other).meta, "partitions") is None


@pytest.mark.cluster
async def test_dissolve_then_create_anew_changes_the_count(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.set_limit(5)
    await pq.lane_enqueue("chat1", "a")
    with pytest.raises(ValueError, match="still holds jobs"):
        await partitions.dissolve(bus, queue)
    (job,) = await jobs.claim(bus, pq.partition_of("chat1"), 1)
    assert await jobs.ack(bus, pq.partition_of("chat1"), job.id, job.token) == Outcome.ACKED
    assert await partitions.dissolve(bus, queue) == 3
    assert (await partitions.open(bus, queue)).n == 1
    # the queue-wide cap went with the partitions: the plain queue keeps no share of it
    assert [(await queues.control(bus, q)).max_active for q in pq.names] == [None] * 3
    assert (await partitions.create(bus, queue, 2)).n == 2


@pytest.mark.cluster
async def test_every_job_runs_once_and_counts_add_up(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    flat = [(await pq.enqueue(f"f{i}")).id for i in range(30)]
    batch = [a.id for a in await pq.enqueue_many([f"b{i}" for i in range(30)])]
    laned = [(await pq.lane_enqueue(f"chat{i % 6}", f"l{i}")).id for i in range(30)]
    later = (await pq.enqueue_in("s", 1)).id
    every = {*flat, *batch, *laned, later}
    assert len(every) == 91
    per_partition = [(await jobs.counts(bus, q)).pending for q in pq.names]
    assert all(p > 0 for p in per_partition), per_partition  # spread over all three
    c = await pq.counts()
    assert (c.exists, c.pending + c.scheduled, c.lanes) == (True, 91, 6)
    seen: list[str] = []

    async def handler(job: Job) -> None:
        seen.append(job.id)

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(partitions.PartitionedMetronome(pq, beat_ms=50).run)
        await wait_for(lambda: len(seen) >= len(every), timeout=30)
        await wait_for(lambda: consumer.statistics().acked == len(every), timeout=30)
        nursery.cancel_scope.cancel()
    assert sorted(seen) == sorted(every), "each job once"
    c = await pq.counts()
    assert (c.pending, c.scheduled, c.active, c.completed_total) == (0, 0, 0, 91)


@pytest.mark.cluster
async def test_a_lane_keeps_its_order_in_its_partition(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    groups = [f"chat{i}" for i in range(6)]
    sent: dict[str, list[str]] = {g: [] for g in groups}
    for i in range(60):
        g = groups[i % 6]
        sent[g].append((await pq.lane_enqueue(g, f"{g}:{i}", limit=1)).id)
    for g in groups:
        assert [j.id for j in await pq.lane_jobs(g)] == sent[g]
        assert [j.id for j in await lanes.jobs(bus, pq.partition_of(g), g)] == sent[g]
    (status,) = await pq.lane_status(["chat3"])
    assert (status.group, status.depth, status.limit) == ("chat3", 10, 1)
    got: dict[str, list[str]] = {g: [] for g in groups}

    async def handler(job: Job) -> None:
        assert job.group is not None
        got[job.group].append(job.id)
        await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        await nursery.start(partitions.PartitionedConsumer(pq, handler, concurrency=8).run)
        await wait_for(lambda: got == sent, timeout=30)
        nursery.cancel_scope.cancel()


@pytest.mark.cluster
async def test_a_job_is_found_and_cancelled_by_id_in_its_partition(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    given_id = ids.generate("JOB")
    a = await pq.enqueue("x", job_id=given_id)
    assert (await pq.enqueue("y", job_id=given_id)).outcome is Outcome.DUPLICATE
    b = await pq.lane_enqueue("chat9", "z")
    found = await pq.find(a.id)
    assert found is not None and found[0] == pq.partition_of(given_id)
    info = await pq.get_job(b.id)
    assert info is not None and info.payload == b"z"
    assert await pq.cancel(b.id, "no longer wanted") is Cancelled.CANCELLED
    assert await pq.cancel(b.id) is Cancelled.ALREADY_DONE
    assert await pq.cancel(ids.generate("JOB")) is Cancelled.NOT_FOUND
    assert await pq.get_job(ids.generate("JOB")) is None


@pytest.mark.cluster
async def test_a_recurring_schedule_fires_once_per_occurrence(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.register("tick", every_ms=100, template="t")
    await pq.register("lane-tick", every_ms=100, template="l", group="chat2")
    fired: list[tuple[str | None, bytes]] = []

    async def handler(job: Job) -> None:
        fired.append((job.group, job.payload))

    held = [(await jobs.counts(bus, q)).repeats for q in pq.names]
    assert held[0] >= 1 and sum(held) == 2, "each registration in one partition"
    assert (await jobs.counts(bus, pq.partition_of("chat2"))).repeats >= 1
    metronome = partitions.PartitionedMetronome(pq, beat_ms=20)
    async with trio.open_nursery() as nursery:
        await nursery.start(partitions.PartitionedConsumer(pq, handler, concurrency=2).run)
        await nursery.start(metronome.run)
        await wait_for(lambda: {p for _, p in fired} == {b"t", b"l"}, timeout=30)
        assert await pq.cancel_repeat("tick") and await pq.cancel_repeat("lane-tick")
        assert not await pq.cancel_repeat("tick")
        # every occurrence fired is one job, run once: none fired twice
        await wait_for(lambda: len(fired) == metronome.statistics().fired, timeout=30)
        nursery.cancel_scope.cancel()
    assert {g for g, p in fired if p == b"l"} == {"chat2"}
    assert {g for g, p in fired if p == b"t"} == {None}
    assert (await pq.counts()).repeats == 0


# --- against a model ----------------------------------------------------------------------------

# A plan: jobs admitted one by one to lanes (by index), flat or in batches, with priorities off.
plan_steps = st.lists(
    st.one_of(
        st.tuples(st.just("lane"), st.integers(0, 7), st.integers(1, 4)),
        st.tuples(st.just("flat"), st.just(0), st.integers(1, 5)),
        st.tuples(st.just("batch"), st.just(0), st.integers(1, 12)),
    ),
    min_size=1,
    max_size=14,
)


@pytest.mark.cluster
@pytest.mark.timeout_s(240)
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(n=st.integers(1, 4), steps=plan_steps)
async def test_lane_order_and_counters_agree_with_a_model(
    server_url: str, n: int, steps: list[tuple[str, int, int]]
) -> None:
    # A bus per example, not the async ``bus`` fixture (see test_lanes' property tests).
    async with open_bus(server_url) as bus:
        pq = await partitions.create(bus, "pm." + ids.generate("JOB"), n)
        model_lanes: dict[str, list[str]] = {}
        model_flat: set[str] = set()
        for kind, lane, count in steps:
            if kind == "lane":
                group = f"chat{lane}"
                for _ in range(count):
                    model_lanes.setdefault(group, []).append(
                        (await pq.lane_enqueue(group, group, limit=1)).id
                    )
            elif kind == "flat":
                model_flat |= {(await pq.enqueue("f")).id for _ in range(count)}
            else:
                model_flat |= {a.id for a in await pq.enqueue_many(["b"] * count)}
        total = len(model_flat) + sum(map(len, model_lanes.values()))
        c = await pq.counts()
        assert (c.pending, c.lanes, c.active, c.completed_total) == (total, len(model_lanes), 0, 0)
        for group, sent in model_lanes.items():
            assert [j.id for j in await pq.lane_jobs(group)] == sent
        depths = [s.depth for s in await pq.lane_status(list(model_lanes))]
        assert depths == [len(sent) for sent in model_lanes.values()]
        got_lanes: dict[str, list[str]] = {}
        got_flat: list[str] = []

        running: dict[str, int] = {}

        async def handler(job: Job) -> None:
            if job.group is None:
                got_flat.append(job.id)
                return
            running[job.group] = running.get(job.group, 0) + 1
            try:
                assert running[job.group] == 1, "a limit-1 lane ran two jobs at once"
                got_lanes.setdefault(job.group, []).append(job.id)
                await trio.lowlevel.checkpoint()
            finally:
                running[job.group] -= 1

        consumer = partitions.PartitionedConsumer(pq, handler, concurrency=3)
        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            await wait_for(lambda: consumer.statistics().acked == total, timeout=60)
            nursery.cancel_scope.cancel()
        assert got_lanes == model_lanes, "each lane in its order, each job once"
        assert sorted(got_flat) == sorted(model_flat) and len(got_flat) == len(model_flat)
        c = await pq.counts()
        assert (c.pending, c.lanes, c.active, c.completed_total) == (0, 0, 0, total)


# Recurring schedules: (every_ms, the lane they fire into by index, or None for flat jobs).
schedules = st.lists(
    st.tuples(st.sampled_from([60, 90, 150]), st.one_of(st.none(), st.integers(0, 5))),
    min_size=1,
    max_size=4,
)


@pytest.mark.cluster
@pytest.mark.timeout_s(240)
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(n=st.integers(1, 4), plan=schedules)
async def test_recurring_schedules_fire_once_per_occurrence_against_a_model(
    server_url: str, n: int, plan: list[tuple[int, int | None]]
) -> None:
    """Schedules every N ms, flat or into strictly ordered lanes, served by two processes'
    worth of metronomes (a ``PartitionedMetronome`` on each of two buses) on the server's own
    clock (real time: it cannot be made virtual here), until each has fired three times. The
    model: each registration is held by one partition (partition 0, or its lane's); each
    occurrence fires at most once (the fired ``at`` of a schedule are distinct, on its grid
    ``first + k * every_ms``; runs missed by late metronomes collapse, so none is required),
    into a job run exactly once, in its lane when it has one, where no two run at once and
    they run in the order they fired; the metronomes' ``fired`` counters, the fired events, the
    consumer's acks and the queue's counters all agree."""
    async with open_bus(server_url) as bus, open_bus(server_url) as other:
        pq = await partitions.create(bus, "pr." + ids.generate("JOB"), n)
        first: dict[str, int] = {}
        model_home: dict[str, str] = {}
        for i, (every, lane) in enumerate(plan):
            name, group = f"r{i}", None if lane is None else f"chat{lane}"
            if group is not None:
                await pq.configure_lane(group, limit=1)
            _, first[name] = await pq.register(name, every_ms=every, template=name, group=group)
            model_home[name] = pq.name if group is None else pq.partition_of(group)
        held = [(await jobs.counts(bus, q)).repeats for q in pq.names]
        assert held == [sum(h == q for h in model_home.values()) for q in pq.names]
        ran: list[tuple[str, str | None, str]] = []  # payload, lane, job id
        running: dict[str, int] = {}

        async def handler(job: Job) -> None:
            if job.group is not None:
                running[job.group] = running.get(job.group, 0) + 1
                assert running[job.group] == 1, "a limit-1 lane ran two jobs at once"
            ran.append((job.payload.decode(), job.group, job.id))
            await trio.lowlevel.checkpoint()
            if job.group is not None:
                running[job.group] -= 1

        def each_fired_thrice() -> bool:
            per = Counter(p for p, _, _ in ran)
            return all(per[name] >= 3 for name in first)

        consumer = partitions.PartitionedConsumer(pq, handler, concurrency=3)
        metronomes = [partitions.PartitionedMetronome(pq, beat_ms=20),
                      partitions.PartitionedMetronome(await partitions.open(other, pq.name),
                                                      beat_ms=20)]  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            for m in metronomes:
                await nursery.start(m.run)
            await wait_for(each_fired_thrice, timeout=60)
            for name in first:
                assert await pq.cancel_repeat(name)
            fired = [e for q in pq.names for e in await events.read(bus, q, count=100_000)
                     if e.kind == "fired"]  # fmt: skip
            await wait_for(lambda: consumer.statistics().acked == len(fired), timeout=30)
            await wait_for(lambda: sum(m.statistics().fired for m in metronomes) == len(fired),
                           timeout=10)  # fmt: skip
            nursery.cancel_scope.cancel()
        # Each occurrence at most once, on its grid, in its registration's partition.
        for name, every in ((f"r{i}", e) for i, (e, _) in enumerate(plan)):
            ats = [int(e.fields["at"]) for e in fired if e.fields["repeat"] == name]
            assert len(ats) == len(set(ats)) >= 3, "an occurrence fired twice"
            assert all(at >= first[name] and (at - first[name]) % every == 0 for at in ats)
        for q in pq.names:
            names = {e.fields["repeat"] for e in await events.read(bus, q, count=100_000)
                     if e.kind == "fired"}  # fmt: skip
            assert names == {m for m, home in model_home.items() if home == q}
        # Each fired job run once, in its lane, a lane's in the order they fired.
        occurrence = {e.subject: (int(e.fields["at"]), e.fields["repeat"]) for e in fired}
        assert sorted(j for _, _, j in ran) == sorted(occurrence)
        for payload, group, job_id in ran:
            name = occurrence[job_id][1]
            lane = plan[int(name[1:])][1]
            assert (payload, group) == (name, None if lane is None else f"chat{lane}")
        fire_order = {e.subject: i for i, e in enumerate(fired)}  # a lane is one stream's
        for group in {g for _, g, _ in ran if g is not None}:
            mine = [j for _, g, j in ran if g == group]
            assert mine == sorted(mine, key=fire_order.__getitem__), f"lane {group} out of order"
        c = await pq.counts()
        assert (c.pending, c.active, c.repeats, c.lanes) == (0, 0, 0, 0)
        assert c.completed_total == len(fired) == len(ran)


@pytest.mark.cluster
async def test_a_handler_s_stop_stops_every_partition_and_hands_its_jobs_back(
    bus: Bus, queue: str
) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.enqueue_many([f"j{i}" for i in range(30)])

    async def handler(job: Job) -> None:
        raise StopConsumer("credential revoked")

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=2)
    with pytest.raises(StopConsumer, match="credential revoked"):
        await consumer.run()  # raised as it is, as Consumer.run raises it
    c = await pq.counts()
    assert (c.pending, c.active, c.completed_total) == (30, 0, 0), "every job handed back"


@pytest.mark.cluster
async def test_a_key_or_a_debounce_key_meets_its_other_enqueues(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    first = await pq.enqueue("a", key="order:7")
    assert first.outcome is Outcome.ENQUEUED
    assert (await pq.enqueue("b", key="order:7")).outcome is Outcome.DUPLICATE
    d1 = await pq.enqueue("v1", debounce="user:1", debounce_ms=60_000)
    d2 = await pq.enqueue("v2", debounce="user:1", debounce_ms=60_000)
    assert (d2.outcome, d2.id, d2.absorbed) == (Outcome.DEBOUNCED, d1.id, 2)
    found = await pq.find(d1.id)
    assert found is not None and found[0] == pq.partition_of("user:1")
    assert found[1].payload == b"v2"
    batch = [(ids.generate("JOB"), f"p{i}") for i in range(12)]
    assert all(a.ok for a in await pq.enqueue_many(batch))
    again = await pq.enqueue_many(batch)  # a retried batch: each id meets itself
    assert [a.outcome for a in again] == [Outcome.DUPLICATE] * 12
    assert [a.id for a in again] == [job_id for job_id, _ in batch]


@pytest.mark.cluster
async def test_pause_and_resume_hold_every_partition(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.enqueue_many([f"j{i}" for i in range(9)])
    assert await pq.pause() is True
    assert await pq.pause() is False
    for name in pq.names:
        assert await jobs.claim(bus, name, 10) == []
    assert await pq.resume() is True
    claimed = [j for name in pq.names for j in await jobs.claim(bus, name, 10)]
    assert len(claimed) == 9


@pytest.mark.cluster
async def test_a_result_is_read_from_the_partition_that_holds_its_job(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    assert await pq.keep_results(60_000) == 60_000
    admitted = [await pq.enqueue(f"j{i}") for i in range(3)]  # one in each partition, in turn
    assert len({(await pq.find(a.id) or ("", None))[0] for a in admitted}) == 3

    async def handler(job: Job) -> bytes:
        return b"done:" + job.payload

    async with trio.open_nursery() as nursery:
        await nursery.start(partitions.PartitionedConsumer(pq, handler, concurrency=2).run)
        results = [await pq.result(a.id, timeout_s=30) for a in admitted]
        nursery.cancel_scope.cancel()
    assert results == [b"done:j0", b"done:j1", b"done:j2"]
    with pytest.raises(JobNotFound):
        await pq.result(ids.generate("JOB"), timeout_s=5)


@pytest.mark.cluster
async def test_a_worker_serves_every_partition(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.enqueue_many([f"j{i}" for i in range(12)])
    await pq.enqueue_in("later", 1)
    seen: list[bytes] = []

    async def handler(job: Job) -> None:
        seen.append(job.payload)

    async with open_worker(bus, pq.serve(handler, concurrency=2, beat_ms=50)):
        await wait_for(lambda: len(seen) == 13, timeout=30)
    assert sorted(seen) == sorted([f"j{i}".encode() for i in range(12)] + [b"later"])


@pytest.mark.cluster
async def test_bad_input_is_one_plain_error_and_admits_nothing(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    too_big = b"x" * (bus.max_payload_bytes + 1)
    with pytest.raises(ValueError, match="payload"):
        await pq.enqueue_many([f"j{i}" for i in range(9)] + [too_big])
    with pytest.raises(ValueError, match="priority"):
        await pq.enqueue_many([f"j{i}" for i in range(9)], priority=10**9)
    with pytest.raises(ValueError, match="group"):
        await pq.lane_enqueue("has space", "x")
    with pytest.raises(ValueError, match="group"):
        await pq.lane_enqueue(None, "x")  # type: ignore[arg-type]
    assert (await pq.counts()).pending == 0


@pytest.mark.cluster
async def test_dead_jobs_are_listed_replayed_and_discarded_across_partitions(
    bus: Bus, queue: str
) -> None:
    pq = await partitions.create(bus, queue, 3)
    admitted = [(await pq.enqueue(f"j{i}")).id for i in range(6)]

    async def handler(job: Job) -> None:
        raise RuntimeError("boom " + job.payload.decode())

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=1, max_attempts=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().dead == 6, timeout=30)
        nursery.cancel_scope.cancel()
    dead = await pq.dead_jobs()
    assert sorted(j.id for j in dead) == sorted(admitted)
    assert [(j.score_ms, j.id) for j in dead] == sorted((j.score_ms or 0, j.id) for j in dead)
    assert len({await pq.holder(j.id) for j in dead}) == 3, "dead in every partition"
    page = await pq.dead_jobs(offset=2, limit=3)
    assert [j.id for j in page] == [j.id for j in dead[2:5]]
    assert await pq.replay(dead[0].id) is Outcome.REPLAYED
    assert await pq.discard(dead[1].id) is Outcome.DISCARDED
    assert await pq.discard(dead[1].id) is Outcome.GONE
    assert await pq.holder(dead[1].id) == pq.name  # in no partition: partition 0 answers
    c = await pq.counts()
    assert (c.dead, c.pending) == (4, 1)
    (waiting,) = await pq.list_jobs("pending")
    assert waiting.id == dead[0].id
    with pytest.raises(ValueError, match="nope"):
        await pq.list_jobs("nope")


@pytest.mark.cluster
async def test_the_metrics_read_a_partitioned_queue_as_one(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.enqueue_many([f"j{i}" for i in range(7)])
    await pq.lane_enqueue("chat1", "x")
    readings = metrics.QueueReadings(bus, [queue])
    await readings.read()
    assert (readings.last()[queue].pending, readings.last()[queue].lanes) == (8, 1)
    assert (await jobs.counts(bus, queue)).pending < 8  # partition 0 alone holds fewer
