"""A partitioned queue read and set as one queue (``PartitionedQueue``'s events, audit,
retention, expiry, bulk deletes and replays, recurring schedules, and its consumers' metrics):
the merge of streams' pages (pure, with a model), then each on a real server with 3 partitions,
where each answer must cover every partition."""

from __future__ import annotations

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from echomq_trio import Bus, Job, jobs, partitions, queues, retention
from echomq_trio._stream_merge import id_key, merge_page
from echomq_trio.metrics import BusMetrics
from echomq_trio.partitions import PartitionedQueue
from echomq_trio.results import AuditOutcome, AuditRecord
from tests.support import wait_for

# --- pure: merging streams' pages -----------------------------------------------------------------


@attrs.frozen
class Entry:
    stream_id: str


def _read(stream: list[Entry], after: str, count: int) -> list[Entry]:
    """A model of ``XRANGE`` after ``after`` (exclusive), ``count`` entries."""
    floor = (-1, -1) if after == "-" else id_key(after)
    return [e for e in stream if id_key(e.stream_id) > floor][:count]


ids_of_a_stream = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 2)), unique=True, max_size=12
).map(lambda keys: [Entry(f"{ms}-{seq}") for ms, seq in sorted(keys)])


@given(st.lists(ids_of_a_stream, min_size=1, max_size=4), st.integers(1, 5))
def test_paging_the_merge_reads_every_entry_once_in_time_order(
    streams: list[list[Entry]], count: int
) -> None:
    got: list[tuple[int, Entry]] = []
    after = "-"
    while True:
        page = merge_page([_read(s, after, count) for s in streams], count)
        if not page:
            break
        assert len(page) >= min(count, 1) and len(page) <= count + len(streams) - 1
        got += page
        after = page[-1][1].stream_id
    every = sorted(((id_key(e.stream_id), i, e) for i, s in enumerate(streams) for e in s),
                   key=lambda t: (t[0], t[1]))  # fmt: skip
    assert got == [(i, e) for _, i, e in every]


def test_a_bad_count_is_refused() -> None:
    with pytest.raises(ValueError, match="count"):
        merge_page([[Entry("1-0")]], 0)


# --- on a server ----------------------------------------------------------------------------------


@pytest.mark.cluster  # each partition's stream on its own primary
async def test_events_of_every_partition_read_in_time_order(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    admitted = [(await pq.enqueue(f"j{i}")).id for i in range(9)]  # three in each, in turn
    pairs = await pq.read_events()
    assert sorted(e.subject for _, e in pairs if e.kind == "enqueued") == sorted(admitted)
    assert {q for q, _ in pairs} == set(pq.names), "every partition's"
    times = [e.time_ms for _, e in pairs]
    assert times == sorted(times), "in time order"
    mine = [[e.stream_id for q, e in pairs if q == name] for name in pq.names]
    assert all(ids == sorted(ids, key=id_key) for ids in mine)
    paged: list[tuple[str, str]] = []
    after = "-"
    while page := await pq.read_events(after, 2):
        paged += [(q, e.stream_id) for q, e in page]
        after = page[-1][1].stream_id
    assert paged == [(q, e.stream_id) for q, e in pairs], "pages: each event once"
    with pytest.raises(ValueError, match="after"):
        await pq.read_events("nope")


@pytest.mark.cluster  # each partition's stream on its own primary
async def test_follow_events_follows_every_partition(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.enqueue("before")  # not followed: from now on
    seen: list[tuple[str, str, int]] = []
    sent: list[str] = []

    async def follow() -> None:
        async for where, event in pq.follow_events(poll_s=0.02):
            if event.kind == "enqueued":
                seen.append((where, event.subject, event.time_ms))

    async def started() -> bool:  # it follows from its start: enqueue until it shows one
        if not seen:
            await pq.enqueue("warm-up")
        return bool(seen)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        await wait_for(started, timeout=20, step=0.05)
        for i in range(9):
            sent.append((await pq.enqueue(f"j{i}")).id)
        await wait_for(lambda: set(sent) <= {s for _, s, _ in seen}, timeout=20)
        nursery.cancel_scope.cancel()
    subjects = [s for _, s, _ in seen]
    assert len(subjects) == len(set(subjects)), "each event once"
    times = [t for _, _, t in seen]
    assert times == sorted(times), "in time order, across partitions"
    assert {q for q, s, _ in seen if s in sent} == set(pq.names), "every partition's"


async def _run_until_acked(consumer: partitions.PartitionedConsumer, acked: int) -> None:
    """Run ``consumer`` until it has acknowledged ``acked`` jobs in all, then stop it."""
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked == acked, timeout=30)
        nursery.cancel_scope.cancel()


@pytest.mark.cluster  # each partition's stream on its own primary
async def test_the_audit_is_kept_read_and_trimmed_in_every_partition(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.enable_audit()
    assert await pq.create_audit_group("store")
    admitted = {(await pq.enqueue(f"j{i}")).id for i in range(9)}

    async def handler(job: Job) -> None:
        pass

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=2)
    await _run_until_acked(consumer, 9)
    records = await pq.read_audit("store", "reader-1")
    assert {r.job_id for _, r in records} == admitted
    assert {r.outcome for _, r in records} == {AuditOutcome.ACKED}
    assert {q for q, _ in records} == set(pq.names)
    done = await pq.ack_and_trim_audit("store", [(q, r.stream_id) for q, r in records])
    assert done.acked == 9
    assert await pq.read_audit("store", "reader-1", pending=True) == []
    with pytest.raises(ValueError, match="not a partition"):
        await pq.ack_and_trim_audit("store", [("elsewhere", "1-0")])
    await _a_crashed_reader_s_records_are_taken_over_and_it_is_forgotten(pq, consumer)
    await pq.enable_audit(False)
    await pq.enqueue("after")
    await _run_until_acked(consumer, 16)
    assert await pq.read_audit("store", "reader-1") == []


async def _a_crashed_reader_s_records_are_taken_over_and_it_is_forgotten(
    pq: PartitionedQueue, consumer: partitions.PartitionedConsumer
) -> None:
    """Records handed to a reader that never acknowledged them (it crashed) are taken over by
    another in every partition, and once it holds nothing it is forgotten everywhere."""
    admitted = {(await pq.enqueue(f"k{i}")).id for i in range(6)}
    await _run_until_acked(consumer, 15)
    held = await pq.read_audit("store", "crashed")
    assert {r.job_id for _, r in held} == admitted
    assert await pq.autoclaim_audit("store", "reader-2", 3_600_000) == []  # not idle yet
    # a reader idle for more than an hour: nobody goes (reader-2 holds nothing, but is not idle)
    assert await pq.forget_idle_audit_readers("store", 3_600_000) == []
    taken: list[tuple[str, AuditRecord]] = []

    async def took_over() -> bool:
        taken.extend(await pq.autoclaim_audit("store", "reader-2", 1))
        return {r.job_id for _, r in taken} == admitted

    await wait_for(took_over, timeout=20)
    assert len(taken) == len(held), "each record once"
    assert {(q, r.stream_id) for q, r in taken} == {(q, r.stream_id) for q, r in held}
    forgotten: list[tuple[str, str]] = []

    async def crashed_forgotten() -> bool:
        forgotten.extend(await pq.forget_idle_audit_readers("store", 1, keep="reader-2"))
        return {q for q, name in forgotten if name == "crashed"} == set(pq.names)

    await wait_for(crashed_forgotten, timeout=20)
    assert {name for _, name in forgotten} <= {"crashed", "reader-1"}
    done = await pq.ack_and_trim_audit("store", [(q, r.stream_id) for q, r in taken])
    assert done.acked == 6


async def test_retention_and_expiry_are_set_on_every_partition(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    kept = await pq.configure_retention(dead_max=5, events_max_len=100)
    assert (kept.dead_max, kept.events_max_len) == (5, 100)
    assert [await retention.get(bus, q) for q in pq.names] == [kept] * 3
    assert await pq.retention() == kept
    assert await pq.set_expired("drop") == "drop"
    assert [(await queues.control(bus, q)).expired for q in pq.names] == ["drop"] * 3
    with pytest.raises(ValueError):
        await pq.set_expired("later")


async def test_delete_all_deletes_in_every_partition_or_the_lane_s(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.enqueue_many([f"j{i}" for i in range(12)])
    await pq.lane_enqueue_many("chat1", [f"l{i}" for i in range(3)])
    assert await pq.delete_all("pending", limit=4, page=1) == 4, "the limit is exact"
    assert await pq.delete_all("pending", group="chat1") == 3
    assert await pq.delete_all("pending", page=2) == 8
    assert [(await jobs.counts(bus, q)).pending for q in pq.names] == [0, 0, 0]
    with pytest.raises(ValueError, match="limit"):
        await pq.delete_all("pending", limit=0)


async def _kill(pq: partitions.PartitionedQueue, queue: str, error: str) -> str:
    """A dead job in partition ``queue`` with last error ``error``."""
    job_id = (await jobs.enqueue(pq.bus, queue, "x")).id
    (job,) = await jobs.claim(pq.bus, queue, 1)
    await jobs.retry(pq.bus, queue, job.id, job.token, 0, 1, error)
    return job_id


async def test_replay_all_replays_the_dead_of_every_partition(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    blocked = {await _kill(pq, q, "Forbidden: bot was blocked") for q in pq.names}
    others = {await _kill(pq, q, "HTTP 502") for q in pq.names for _ in range(3)}
    assert await pq.replay_all("blocked", page=2) == 3
    assert {j.id for j in await pq.dead_jobs()} == others
    assert await pq.replay_all(page=2) == 9
    c = await pq.counts()
    assert (c.dead, c.pending) == (0, len(blocked) + len(others))


async def test_recurring_schedules_of_every_partition_are_listed(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    groups = [g for g in (f"chat{i}" for i in range(40))]
    chosen = {pq.partition_of(g): g for g in groups}  # a lane in each partition
    assert len(chosen) == 3
    for i, group in enumerate(sorted(chosen.values())):
        await pq.register(f"r{i}", every_ms=60_000 * (i + 1), template="x", group=group)
    listed = await pq.list_repeats()
    assert [r.name for r in listed] == ["r0", "r1", "r2"], "soonest first"
    assert [r.name for r in await pq.list_repeats(limit=1, offset=1)] == ["r1"]


async def test_a_partitioned_queue_s_consumers_count_under_its_name(bus: Bus, queue: str) -> None:
    pq = await partitions.create(bus, queue, 3)
    await pq.enqueue_many([f"j{i}" for i in range(9)])
    registry = CollectorRegistry()
    instruments = BusMetrics(registry)

    async def handler(job: Job) -> None:
        pass

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=2, metrics=instruments)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(
            partitions.PartitionedMetronome(pq, beat_ms=50, metrics=instruments).run
        )
        await wait_for(lambda: consumer.statistics().acked == 9, timeout=30)
        nursery.cancel_scope.cancel()
    acked = registry.get_sample_value(
        "echomq_consumer_jobs_total", {"queue": queue, "outcome": "acked"}
    )
    assert acked == 9, "one series for the queue, every partition's jobs in it"
    labels = {s.labels.get("queue") for m in registry.collect() for s in m.samples}
    assert labels <= {queue, None}, labels
    assert {s.queue for s in pq.serve(handler)} == set(pq.names)
    assert {s.metrics_queue for s in pq.serve(handler)} == {queue}
