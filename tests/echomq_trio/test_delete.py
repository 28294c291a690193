"""Deleting waiting and scheduled jobs: one by id (a running job is refused and pointed at
cancel, a dead one at discard), or a page at a time by a filter (the flat pending set, a lane,
the schedule; a lane's scheduled jobs; jobs older than an age by the time in their id). A lane
keeps its order, and the counters and the lane index stay what a walk of every lane finds."""

import json
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from echomq_trio import Bus, events, ids, jobs, lanes, open_bus
from echomq_trio.jobs import Outcome
from tests.echomq_trio.test_counters import check_exact
from tests.support import echomq

pytestmark = pytest.mark.cluster

HOUR_MS = 3_600_000
OLD = ids.IdMinter(7)  # mints ids of a chosen time


def jid() -> str:
    return ids.generate("JOB")


def old_jid(ms_ago: int, now_ms: int) -> str:
    return OLD.generate("JOB", now_ms - ms_ago)


async def test_delete_one_pending_lane_and_scheduled_job(bus: Bus, queue: str) -> None:
    flat, sched = jid(), jid()
    a = [jid() for _ in range(4)]
    await jobs.enqueue(bus, queue, "f", job_id=flat)
    await lanes.enqueue_many(bus, queue, "A", [(i, "a") for i in a])
    await jobs.enqueue_in(bus, queue, "s", HOUR_MS, job_id=sched, group="A")
    assert await jobs.delete(bus, queue, flat) is Outcome.DELETED
    assert await jobs.delete(bus, queue, a[1]) is Outcome.DELETED  # from the middle of its lane
    assert await jobs.delete(bus, queue, sched) is Outcome.DELETED
    assert await jobs.delete(bus, queue, sched) is Outcome.GONE
    assert await jobs.get_job(bus, queue, flat) is None
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.scheduled, c.lanes) == (3, 0, 1)
    await check_exact(bus, queue)
    # The lane keeps its order.
    assert [j.id for j in await lanes.jobs(bus, queue, "A")] == [a[0], a[2], a[3]]
    claimed = [j.id for j in await jobs.claim(bus, queue, 10)]
    assert claimed == [a[0], a[2], a[3]]
    kinds = [(e.kind, e.subject) for e in await events.read(bus, queue, count=1000)]
    assert [k for k in kinds if k[0] == "deleted"] == [
        ("deleted", flat), ("deleted", a[1]), ("deleted", sched)
    ]  # fmt: skip


async def test_a_lane_s_last_job_deleted_leaves_its_counters_exact(bus: Bus, queue: str) -> None:
    only = jid()
    await lanes.enqueue(bus, queue, "B", "b", job_id=only, limit=1)
    await lanes.enqueue(bus, queue, "C", "c", job_id=jid())
    assert await jobs.delete(bus, queue, only) is Outcome.DELETED
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.lanes) == (1, 1)
    await check_exact(bus, queue)
    assert [s.group for s in await lanes.status(bus, queue)] == ["C"]  # B left the index
    (job,) = await jobs.claim(bus, queue, 10)  # B's turn on the ring is skipped
    assert job.group == "C"


async def test_a_waiting_lane_s_head_is_deleted_and_the_lane_keeps_its_wait(
    bus: Bus, queue: str
) -> None:
    head, behind = jid(), jid()
    await lanes.enqueue_many(bus, queue, "S", [(head, "1"), (behind, "2")], limit=1)
    (job,) = await jobs.claim(bus, queue, 1)
    assert await jobs.defer(bus, queue, job.id, job.token, HOUR_MS) is Outcome.DEFERRED
    assert await jobs.delete(bus, queue, head) is Outcome.DELETED
    (lane,) = await lanes.status(bus, queue, ["S"])
    assert (lane.depth, lane.in_flight, lane.wait_until_ms is not None) == (1, 0, True)
    assert await jobs.claim(bus, queue, 1) == []  # still waiting
    await check_exact(bus, queue)
    assert await lanes.resume(bus, queue, "S")
    assert [j.id for j in await jobs.claim(bus, queue, 1)] == [behind]


async def test_a_running_job_is_not_deleted_nor_a_dead_one(bus: Bus, queue: str) -> None:
    run, die = jid(), jid()
    await jobs.enqueue_many(bus, queue, [(run, "r"), (die, "d")])
    first, second = await jobs.claim(bus, queue, 2)
    assert await jobs.retry(bus, queue, second.id, second.token, 0, 1, "x") is Outcome.DEAD
    assert await jobs.delete(bus, queue, first.id) is Outcome.RUNNING
    assert await jobs.delete(bus, queue, second.id) is Outcome.NOT_WAITING
    assert await jobs.ack(bus, queue, first.id, first.token) is Outcome.ACKED
    c = await jobs.counts(bus, queue)
    assert (c.dead, c.completed_total) == (1, 1)


async def test_delete_pages_through_the_pending_set(bus: Bus, queue: str) -> None:
    await jobs.enqueue_many(bus, queue, [(jid(), "x") for _ in range(250)])
    pages, cursor = [], None
    while True:
        page = await jobs.delete_page(bus, queue, "pending", limit=100, cursor=cursor)
        pages.append(page.deleted)
        cursor = page.next
        if cursor is None:
            break
    assert pages == [100, 100, 50]
    assert (await jobs.counts(bus, queue)).pending == 0
    batch = [e for e in await events.read(bus, queue, count=1000) if e.kind == "deleted_many"]
    assert [int(e.fields["count"]) for e in batch] == [100, 100, 50]
    assert sum(len(e.fields["ids"].split()) for e in batch) == 250


async def test_delete_pages_through_a_lane(bus: Bus, queue: str) -> None:
    await lanes.enqueue_many(bus, queue, "A", [(jid(), "a") for _ in range(5)], limit=1)
    await lanes.enqueue_many(bus, queue, "B", [(jid(), "b") for _ in range(2)])
    first = await jobs.delete_page(bus, queue, "pending", group="A", limit=3)
    assert first.deleted == 3 and first.next is not None
    await check_exact(bus, queue)
    rest = await jobs.delete_page(bus, queue, "pending", group="A", limit=3, cursor=first.next)
    assert (rest.deleted, rest.next) == (2, None)
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.lanes) == (2, 1)
    await check_exact(bus, queue)
    assert {j.group for j in await jobs.claim(bus, queue, 10)} == {"B"}


async def test_delete_pages_a_lane_s_scheduled_jobs_at_one_time(bus: Bus, queue: str) -> None:
    """Scheduled jobs of two lanes and flat ones, all at the same run-at: the cursor steps past
    the jobs a page keeps, so each page looks at new ones and every match goes."""
    at = await bus.transport.server_time_ms() + HOUR_MS
    mine = [jid() for _ in range(7)]
    for i, job_id in enumerate(mine):
        await jobs.enqueue_at(bus, queue, "a", at, job_id=job_id, group="A")
        await jobs.enqueue_at(bus, queue, "b", at, job_id=jid(), group="B" if i % 2 else None)
    deleted, cursor, pages = 0, None, 0
    while True:
        page = await jobs.delete_page(bus, queue, "scheduled", group="A", limit=3, cursor=cursor)
        deleted, cursor, pages = deleted + page.deleted, page.next, pages + 1
        if cursor is None:
            break
    assert (deleted, pages) == (7, 5)  # 14 jobs looked at, 3 a page
    left = await jobs.list_jobs(bus, queue, "scheduled", 0, 100)
    assert len(left) == 7 and not {j.id for j in left} & set(mine)
    await check_exact(bus, queue)


async def test_delete_pages_only_jobs_older_than_an_age(bus: Bus, queue: str) -> None:
    now = await bus.transport.server_time_ms()
    old = [old_jid(2 * HOUR_MS - i, now) for i in range(3)]
    new = [jid() for _ in range(3)]
    await jobs.enqueue_many(bus, queue, [(i, "x") for i in old + new])
    page = await jobs.delete_page(bus, queue, "pending", older_than_ms=HOUR_MS, limit=100)
    assert (page.deleted, page.next) == (3, None)  # the first young id ends the walk
    assert [j.id for j in await jobs.list_jobs(bus, queue, "pending")] == new
    # Scheduled: old and young ids at interleaved run-at times.
    later = now + HOUR_MS
    olds = [old_jid(3 * HOUR_MS, now) for _ in range(4)]
    for i, job_id in enumerate(olds):
        await jobs.enqueue_at(bus, queue, "o", later + 2 * i, job_id=job_id)
        await jobs.enqueue_at(bus, queue, "n", later + 2 * i + 1, job_id=jid())
    page = await jobs.delete_page(bus, queue, "scheduled", older_than_ms=HOUR_MS, limit=5)
    rest = await jobs.delete_page(
        bus, queue, "scheduled", older_than_ms=HOUR_MS, limit=5, cursor=page.next
    )
    assert (page.deleted + rest.deleted, rest.next) == (4, None)
    left = {j.id for j in await jobs.list_jobs(bus, queue, "scheduled")}
    assert len(left) == 4 and not left & set(olds)
    await check_exact(bus, queue)


# A scheduled job: its run-at (minutes ahead; few values, so many share one), its lane (or
# none) and whether it was minted long ago.
scheduled_jobs = st.lists(
    st.tuples(st.integers(1, 3), st.sampled_from([None, "A", "B"]), st.booleans()),
    min_size=0, max_size=25,
)  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    plan=scheduled_jobs,
    group=st.sampled_from([None, "A"]),
    old_only=st.booleans(),
    limit=st.integers(1, 6),
    lost=st.booleans(),
)
async def test_pages_delete_exactly_the_scheduled_jobs_that_match(
    server_url: str, plan: list[tuple[int, str | None, bool]], group: str | None,
    old_only: bool, limit: int, lost: bool,
) -> None:  # fmt: skip
    """Whatever the run-ats (ties among them), the filter and the page size: paging to the end
    deletes every job that matches and no other, each page deletes at most ``limit`` jobs, and
    a page asked again with the same cursor (its answer lost) counts no job twice and misses
    none."""
    async with open_bus(server_url) as bus:  # one per example (see test_lanes)
        queue = "del." + ids.generate("JOB")
        now = await bus.transport.server_time_ms()
        matching, others = set(), set()
        for minutes, g, old in plan:
            job_id = old_jid(2 * HOUR_MS, now) if old else jid()
            await jobs.enqueue_at(bus, queue, "s", now + minutes * 60_000, job_id=job_id, group=g)
            fits = (group is None or g == group) and (old or not old_only)
            (matching if fits else others).add(job_id)
        older = HOUR_MS if old_only else None
        page_of = partial(jobs.delete_page, bus, queue, "scheduled", group=group,
                          older_than_ms=older, limit=limit)  # fmt: skip
        deleted, cursor = 0, None
        for step in range(2 * len(plan) + 2):
            page = await page_of(cursor=cursor)
            assert page.deleted <= limit
            deleted += page.deleted
            if lost and step % 2 == 0:  # its answer lost: the same page asked again
                page = await page_of(cursor=cursor)
                deleted += page.deleted
            cursor = page.next
            if cursor is None:
                break
        assert cursor is None
        left = {j.id for j in await jobs.list_jobs(bus, queue, "scheduled", 0, 100)}
        assert (deleted, left) == (len(matching), others)
        if plan:
            await check_exact(bus, queue)


async def test_bad_input_is_one_line_before_any_io(bus: Bus, queue: str) -> None:
    cases = [
        (dict(state="active"), "state must be one of ['pending', 'scheduled'], got 'active'"),
        (dict(limit=0), "limit must be >= 1, got 0"),
        (dict(limit=1001), "limit must be <= 1000, got 1001"),
        (dict(older_than_ms=-1), "older_than_ms must be >= 0, got -1"),
        (dict(cursor="1:2:x"), "cursor must be None or a page's next cursor, got '1:2:x'"),
        (dict(group="a b"), "group"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            await jobs.delete_page(bus, queue, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="JOB"):
        await jobs.delete(bus, queue, "nope")
    with pytest.raises(TypeError, match="limit must be an int, got str"):
        await jobs.delete_page(bus, queue, limit="5")  # type: ignore[arg-type]
    assert not (await jobs.counts(bus, queue)).exists


@pytest.mark.slow
async def test_the_cli_deletes_one_job_or_those_of_a_filter(
    bus: Bus, server_url: str, queue: str
) -> None:
    async def run(*args: str) -> tuple[int, str, str]:
        done = await echomq("--url", server_url, *args)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    running, one = jid(), jid()  # running first: claimed first
    await jobs.enqueue_many(bus, queue, [(running, "r"), (one, "o")])
    (job,) = await jobs.claim(bus, queue, 1)
    assert job.id == running
    assert await run("delete", queue, one) == (0, f"deleted {one}\n", "")
    code, _, err = await run("delete", queue, one)
    assert code == 1 and "no job" in err
    code, _, err = await run("delete", queue, running)
    assert code == 1 and "is running: it is not deleted (cancel it instead)" in err
    at = await bus.transport.server_time_ms() + HOUR_MS
    for g in ("A", "A", "A", "B"):
        await jobs.enqueue_at(bus, queue, "s", at, job_id=jid(), group=g)
    assert (await run("delete", queue, "--state", "scheduled", "--group", "A", "--limit", "2"))[
        :2
    ] == (0, "deleted 2 scheduled jobs\n")
    out = await run("--json", "delete", queue, "--state", "scheduled", "--older-than", "0")
    assert json.loads(out[1]) == {"deleted": 2}
    assert (await jobs.counts(bus, queue)).scheduled == 0
    code, _, err = await run("delete", queue)
    assert code == 2 and "delete needs a JOB_ID or --state (not both)" in err
    code, _, err = await run("delete", queue, one, "--group", "A")
    assert code == 2 and "go with --state" in err
