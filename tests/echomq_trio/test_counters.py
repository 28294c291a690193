"""The bookkeeping that keeps every script O(batch): ``counts`` reads counters of the jobs
waiting in lanes and of the lanes with jobs, and lane status pages through a lane index, all
kept by the scripts where a job enters or leaves a lane. After every transition (and after a
worker holding lane jobs is killed) they must equal what a walk of every lane finds. The walk
is a test-only script run with EVAL: the bus itself never walks its lanes."""

import pytest
import trio

from echomq_trio import Bus, Outcome, ids, jobs, lanes, repeat
from echomq_trio.keys import QueueKeys, queue_keys
from tests.echomq_trio.workers import finish_with_a_second_worker, finished, kill_a_worker_mid_run
from tests.support import wait_for

pytestmark = pytest.mark.cluster

# Every lane key of the queue, found by pattern (the queue lives in one slot, so on one node).
WALK = """
local qp = ARGV[1]
local waiting, nonempty, listed = 0, 0, {}
local function list(g, add) listed[g] = (listed[g] or 0) + add end
for _, key in ipairs(redis.call('KEYS', qp .. 'g:*')) do
  local n = redis.call('ZCARD', key)
  if n > 0 then
    waiting = waiting + n
    nonempty = nonempty + 1
    list(string.sub(key, #qp + 3), 4294967296)
  end
end
for _, id in ipairs(redis.call('ZRANGE', qp .. 'active', 0, -1)) do
  local g = redis.call('HGET', qp .. 'job:' .. id, 'group')
  if g then list(g, 1) end
end
for _, g in ipairs(redis.call('SMEMBERS', qp .. 'paused')) do list(g, 0) end
for _, g in ipairs(redis.call('ZRANGE', qp .. 'gwait', 0, -1)) do list(g, 0) end
local flat = {}
for g, value in pairs(listed) do
  flat[#flat + 1] = g
  flat[#flat + 1] = tostring(value)
end
return {waiting, nonempty, flat}
"""


def jid() -> str:
    return ids.generate("JOB")


async def check_exact(bus: Bus, queue: str) -> None:
    """The counters (jobs waiting in lanes, lanes with jobs) and the lane index (each lane's
    jobs in flight, plus 2^32 while jobs wait in it) equal what a walk of every lane finds."""
    k = queue_keys(queue)
    waiting, nonempty, listed = await bus.transport.command("EVAL", WALK, "1", k.meta, k.prefix)
    flat = int(await bus.transport.command("ZCARD", k.pending))
    counts = await jobs.counts(bus, queue)
    assert counts.pending == flat + waiting, "metrics.lane_pending drifted"
    assert counts.lanes == nonempty, "metrics.lanes_with_jobs drifted"
    expected = {g.decode(): int(v) for g, v in zip(listed[::2], listed[1::2], strict=True)}
    raw = await bus.transport.command("HGETALL", k.lane_index)
    pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)
    index = {g.decode(): int(v) for g, v in pairs}
    assert index == expected, "the lane index drifted"
    paged = [s.group for s in await lanes.status(bus, queue)]
    assert paged == sorted(index)


async def test_counters_stay_exact_through_every_transition(bus: Bus, queue: str) -> None:
    await check_exact(bus, queue)  # a queue never used
    a, b = [jid() for _ in range(3)], [jid() for _ in range(2)]
    await lanes.enqueue_many(bus, queue, "A", [(i, "a") for i in a])
    await lanes.enqueue_many(bus, queue, "B", [(i, "b") for i in b], limit=1)
    await jobs.enqueue_many(bus, queue, [(jid(), "flat") for _ in range(2)])
    assert (await lanes.enqueue(bus, queue, "A", "again", job_id=a[0])).outcome is Outcome.DUPLICATE
    await check_exact(bus, queue)

    claimed = await jobs.claim(bus, queue, 4, lease_ms=60_000)  # claim
    await check_exact(bus, queue)
    by_id = {j.id: j for j in claimed}
    first_a = by_id[a[0]]
    await jobs.ack(bus, queue, first_a.id, first_a.token)  # ack
    await check_exact(bus, queue)
    head_b = by_id[b[0]]
    await jobs.retry(bus, queue, head_b.id, head_b.token, 60_000, 5, "boom")  # retry: lane holds
    await check_exact(bus, queue)
    await lanes.resume(bus, queue, "B")
    second = await jobs.claim(bus, queue, 10)
    (again_b,) = [j for j in second if j.group == "B"]
    await jobs.defer(bus, queue, again_b.id, again_b.token, 60_000)  # defer
    await check_exact(bus, queue)
    await lanes.resume(bus, queue, "B")

    settled = (first_a.id, head_b.id, again_b.id)
    leftover = [j for j in claimed + second if j.id not in settled]
    held = leftover + await jobs.claim(bus, queue, 10, lease_ms=60_000)
    await jobs.release(bus, queue, [(j.id, j.token) for j in held])  # release
    await check_exact(bus, queue)

    short = await jobs.claim(bus, queue, 10, lease_ms=1)  # reap after the lease ran out
    assert short
    await wait_for(lambda: _reaped(bus, queue), timeout=10)
    await check_exact(bus, queue)
    pending = await jobs.list_jobs(bus, queue, "pending")
    lane_jobs = await lanes.jobs(bus, queue, "A")
    # ack of a job reaped back to its lane but not claimed again: it leaves the lane
    stale_lane = next(j for j in short if j.id == lane_jobs[0].id) if lane_jobs else None
    if stale_lane is not None:
        await jobs.ack(bus, queue, stale_lane.id, stale_lane.token)
        await check_exact(bus, queue)
    assert pending or lane_jobs

    await lanes.pause(bus, queue, "C")  # a pause of an empty lane lists it
    await lanes.pause(bus, queue, "A")
    await check_exact(bus, queue)
    await lanes.resume(bus, queue, "C")
    await lanes.resume(bus, queue, "A")
    await check_exact(bus, queue)
    now_ms = int((await bus.transport.command("TIME"))[0]) * 1000
    await lanes.pause_until(bus, queue, "D", now_ms + 60_000)
    await check_exact(bus, queue)
    await lanes.resume(bus, queue, "D")

    await jobs.enqueue_in(bus, queue, "later", 1, job_id=jid(), group="E")  # scheduled into a lane
    await check_exact(bus, queue)
    await wait_for(lambda: _promoted(bus, queue), timeout=10)
    await check_exact(bus, queue)

    await repeat.register(bus, queue, "tick", 60_000, "t", group="F")  # repeat fire
    assert (await repeat.fire(bus, queue)).fired == 1
    await check_exact(bus, queue)

    # Bury: a job of lane G that runs out of attempts, then replay.
    dead = jid()
    await lanes.enqueue(bus, queue, "G", "d", job_id=dead)
    await _drain_except(bus, queue, keep={dead})
    await check_exact(bus, queue)
    await jobs.replay(bus, queue, dead)
    await check_exact(bus, queue)

    await _drain_except(bus, queue, keep=set(), ack=True)
    await check_exact(bus, queue)
    counts = await jobs.counts(bus, queue)
    assert (counts.pending, counts.active, counts.lanes) == (0, 0, 0)
    assert await lanes.status(bus, queue) == []


async def _reaped(bus: Bus, queue: str) -> bool:
    await jobs.reap(bus, queue)
    return (await jobs.counts(bus, queue)).active == 0


async def _promoted(bus: Bus, queue: str) -> bool:
    await jobs.promote(bus, queue)
    return (await jobs.counts(bus, queue)).scheduled == 0


async def _drain_except(bus: Bus, queue: str, keep: set[str], ack: bool = False) -> None:
    """Claim everything claimable: bury the jobs in ``keep`` (one attempt allowed), ack the
    rest."""
    while got := await jobs.claim(bus, queue, 50):
        for j in got:
            if j.id in keep:
                await jobs.retry(bus, queue, j.id, j.token, 0, 1, "no more")
            else:
                await jobs.ack(bus, queue, j.id, j.token)
        for g in {j.group for j in got if j.group}:
            await lanes.resume(bus, queue, g)
    if ack:
        assert (await jobs.counts(bus, queue)).pending == 0


async def _paged(bus: Bus, queue: str, count: int, between: object = None) -> list[str]:
    """Every page of lane status from the first, each at most ``count`` lanes sorted by name;
    ``between`` (an async callable) runs once, after the second page."""
    seen: list[str] = []
    page = await lanes.status_page(bus, queue, count=count)
    pages = 1
    while True:
        names = [s.group for s in page.lanes]
        assert len(names) <= count and names == sorted(names)
        seen += names
        if page.next is None:
            return seen
        if pages == 2 and callable(between):
            await between()
        page = await lanes.status_page(bus, queue, page.next, count)
        pages += 1


async def test_status_pages_every_lane_a_page_at_a_time(bus: Bus, queue: str) -> None:
    # A small index is one listpack, which HSCAN gives whole: the pages cut that call.
    small = [f"s{n}" for n in range(5)]
    for g in small:
        await lanes.enqueue(bus, queue, g, "x", job_id=jid())
    assert sorted(await _paged(bus, queue, 2)) == small

    async def forget_s0() -> None:  # unlisted between pages: the pages after it skip nothing
        (job,) = await jobs.claim(bus, queue, 1)
        assert job.group == "s0"
        await jobs.ack(bus, queue, job.id, job.token)

    assert sorted(await _paged(bus, queue, 2, forget_s0)) == small
    small.remove("s0")
    # A large one is a hash table that HSCAN walks a cursor at a time.
    k = queue_keys(queue)
    groups = [f"chat{n:04d}" for n in range(700)]
    await lanes.enqueue_many(bus, queue, groups[0], [(jid(), "x")])
    for g in groups[1:]:
        await lanes.enqueue(bus, queue, g, "x", job_id=jid())
    assert await bus.transport.command("OBJECT", "ENCODING", k.lane_index) == b"hashtable"

    async def late() -> None:  # comes between pages: it may or may not be seen
        await lanes.enqueue(bus, queue, "late", "x", job_id=jid())

    seen = await _paged(bus, queue, 100, late)
    # Each lane at least once; a lane twice only if the index was being rehashed (it may be: it
    # grew past 512 entries just now), so not many.
    assert set(seen) - {"late"} == {*small, *groups}
    assert len(seen) - len(set(seen)) < len(groups) // 2
    assert [s.group for s in await lanes.status(bus, queue)] == sorted({*small, *groups, "late"})
    assert [s.depth for s in await lanes.status(bus, queue, ["late"])] == [1]


async def test_a_pause_leaves_the_ring_lazily_and_a_claim_skips_at_most_a_bounded_number(
    bus: Bus, queue: str
) -> None:
    """Pausing does not scan the ring; a claim that meets paused lanes takes each off, at most
    100 per call, and leaves a wake token so the next claim goes on."""
    k = queue_keys(queue)
    paused = [f"p{n:03d}" for n in range(150)]
    for g in paused:
        await lanes.enqueue(bus, queue, g, "x", job_id=jid())
    ready = jid()
    await lanes.enqueue(bus, queue, "zz-ready", "y", job_id=ready)
    for g in paused:
        await lanes.pause(bus, queue, g)
    assert int(await bus.transport.command("LLEN", k.ring)) == 151  # still on the ring
    (status,) = await lanes.status(bus, queue, ["p000"])
    assert status.paused and not status.on_ring  # not served, whatever the ring holds
    await bus.transport.command("DEL", k.wake)
    assert await jobs.claim(bus, queue, 1) == []  # 100 paused lanes taken off, nothing claimed
    assert int(await bus.transport.command("LLEN", k.ring)) == 51
    assert int(await bus.transport.command("LLEN", k.wake)) >= 1  # the next claim is told to go on
    (job,) = await jobs.claim(bus, queue, 1)
    assert job.id == ready
    assert int(await bus.transport.command("LLEN", k.ring)) == 0
    await lanes.resume(bus, queue, "p007")
    (again,) = await jobs.claim(bus, queue, 1)
    assert again.group == "p007"
    await check_exact(bus, queue)


WAITING = 2**32  # in the lane index: jobs wait in the lane


async def _mark_old(bus: Bus, k: QueueKeys, counted: str | None) -> None:
    """Mark the queue as an earlier version did: no ``layout``, and ``counted`` (or nothing)."""
    await bus.transport.command("HDEL", k.meta, "layout")
    if counted is None:
        await bus.transport.command("HDEL", k.meta, "counted")
    else:
        await bus.transport.command("HSET", k.meta, "counted", counted)


async def _layout(bus: Bus, k: QueueKeys) -> tuple[object, object]:
    """The queue's ``layout`` mark and the old ``counted`` one."""
    return (
        await bus.transport.command("HGET", k.meta, "layout"),
        await bus.transport.command("HGET", k.meta, "counted"),
    )


async def _as_before_the_index_hash(bus: Bus, k: QueueKeys) -> None:
    """Rewrite the lane index as layouts before 3 kept it: a sorted set of the
    listed lanes by name, and a hash of each lane's jobs in flight alone."""
    raw = await bus.transport.command("HGETALL", k.lane_index)
    pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)
    await bus.transport.command("DEL", k.lane_index)
    for g, value in pairs:
        await bus.transport.command("ZADD", k.old_lane_index, "0", g)
        if int(value) % WAITING:
            await bus.transport.command("HSET", k.lane_index, g, str(int(value) % WAITING))


async def test_a_queue_counted_by_the_version_with_the_index_by_name_is_recounted_once(
    bus: Bus, queue: str
) -> None:
    """The version before listed lanes in a sorted set by name and kept their jobs in flight in
    a hash of their own (layout 2, marked ``counted`` 2): the first read that needs the index
    rebuilds it once as one hash, and drops the sorted set; scripts that ran in between lose
    nothing."""
    k = queue_keys(queue)
    for g in ("a", "b", "c"):
        await lanes.enqueue_many(bus, queue, g, [(jid(), "x"), (jid(), "y")])
    held = await jobs.claim(bus, queue, 4, lease_ms=60_000)  # a, b, c, a: a is empty
    await lanes.pause(bus, queue, "p")
    await _as_before_the_index_hash(bus, k)
    await _mark_old(bus, k, "2")
    # This version's scripts before the count: b's last waiting job claimed (WAITING taken off
    # a value that never had it), a new lane, an ack.
    (more,) = await jobs.claim(bus, queue, 1, lease_ms=60_000)
    assert more.group == "b"
    await lanes.enqueue(bus, queue, "d", "z", job_id=jid())
    await jobs.ack(bus, queue, held[1].id, held[1].token)
    assert [s.in_flight for s in await lanes.status(bus, queue, ["a", "b"])] == [2, 1]
    counts = await jobs.counts(bus, queue)
    assert (counts.pending, counts.active, counts.lanes, counts.paused_lanes) == (2, 4, 2, 1)
    assert await _layout(bus, k) == (b"3", None)
    assert await bus.transport.command("EXISTS", k.old_lane_index) == 0
    await check_exact(bus, queue)
    for job in [*held[:1], *held[2:], more]:
        await jobs.ack(bus, queue, job.id, job.token)
    await check_exact(bus, queue)
    assert [s.group for s in await lanes.status(bus, queue)] == ["c", "d", "p"]


async def test_a_limited_lane_of_a_queue_from_before_the_index_hash_goes_on_after_an_ack(
    bus: Bus, queue: str
) -> None:
    """A lane at its limit, its waiting jobs unmarked in the index (written by the version with
    the index by name): the ack that frees its slot puts it back on the ring all the same, and
    the count lists it again."""
    k = queue_keys(queue)
    first, second = jid(), jid()
    await lanes.enqueue_many(bus, queue, "L", [(first, "x"), (second, "y")], limit=1)
    (job,) = await jobs.claim(bus, queue, 5, lease_ms=60_000)
    assert job.id == first and await jobs.claim(bus, queue, 5) == []  # L at its limit
    await _as_before_the_index_hash(bus, k)
    await _mark_old(bus, k, "2")
    assert await jobs.ack(bus, queue, job.id, job.token) is Outcome.ACKED
    (again,) = await jobs.claim(bus, queue, 5, lease_ms=60_000)
    assert again.id == second
    await check_exact(bus, queue)


async def test_a_queue_from_before_the_counters_is_counted_once(bus: Bus, queue: str) -> None:
    """A queue written by an earlier version (no lane counters, no lane index, no counted mark;
    its lanes with jobs in the set of lane groups) is counted and indexed once by the first read
    that needs it."""
    k = queue_keys(queue)
    for g in ("a", "b", "c"):
        await lanes.enqueue_many(bus, queue, g, [(jid(), "x"), (jid(), "y")])
    await lanes.pause(bus, queue, "idle-but-paused")
    # What the earlier version left: none of the new bookkeeping, and its set of lane groups
    # (which could hold a lane that had emptied).
    await _mark_old(bus, k, None)
    await bus.transport.command("HDEL", k.metrics, "lane_pending", "lanes_with_jobs")
    await bus.transport.command("DEL", k.lane_index)
    await bus.transport.command("SADD", k.lane_groups, "a", "b", "c", "emptied")
    await lanes.enqueue(
        bus, queue, "d", "z", job_id=jid()
    )  # written by this version before the count
    counts = await jobs.counts(bus, queue)
    assert (counts.pending, counts.lanes, counts.paused_lanes) == (7, 4, 1)
    assert await _layout(bus, k) == (b"3", None)
    assert await bus.transport.command("EXISTS", k.lane_groups) == 0
    await check_exact(bus, queue)
    await _mark_old(bus, k, None)
    await bus.transport.command("DEL", k.lane_index)
    await bus.transport.command("SADD", k.lane_groups, "a", "b", "c", "d")
    page = await lanes.status_page(bus, queue)  # a page counts it too
    assert [s.group for s in page.lanes] == ["a", "b", "c", "d", "idle-but-paused"]


async def test_a_queue_counted_by_the_version_with_the_lane_groups_set_is_recounted_once(
    bus: Bus, queue: str
) -> None:
    """The version before counted lanes with jobs as a set of lane groups (layout 1, marked
    ``counted`` 1, an exact lane index and ``lane_pending``, no ``lanes_with_jobs``): the first
    read that needs the counter counts them once and drops the set."""
    k = queue_keys(queue)
    for g in ("a", "b"):
        await lanes.enqueue_many(bus, queue, g, [(jid(), "x"), (jid(), "y")])
    (held,) = await jobs.claim(bus, queue, 1, lease_ms=60_000)  # lane a: one in flight
    await lanes.pause(bus, queue, "p")
    await _as_before_the_index_hash(bus, k)
    await _mark_old(bus, k, "1")
    await bus.transport.command("HDEL", k.metrics, "lanes_with_jobs")
    await bus.transport.command("SADD", k.lane_groups, "a", "b")
    counts = await jobs.counts(bus, queue)
    assert (counts.pending, counts.active, counts.lanes, counts.paused_lanes) == (3, 1, 2, 1)
    assert await _layout(bus, k) == (b"3", None)
    assert await bus.transport.command("EXISTS", k.lane_groups) == 0
    await check_exact(bus, queue)
    await jobs.ack(bus, queue, held.id, held.token)
    await check_exact(bus, queue)


async def test_a_queue_marked_counted_by_the_version_before_layouts_is_only_re_marked(
    bus: Bus, queue: str
) -> None:
    """The version before ``meta.layout`` marked an up-to-date queue ``counted`` 3: the upgrade
    to layout 3 takes that mark over without a walk of the lanes (its counters stay as they
    are: a counter set wrong here would stay wrong, and the check below sees it)."""
    k = queue_keys(queue)
    for g in ("a", "b"):
        await lanes.enqueue_many(bus, queue, g, [(jid(), "x"), (jid(), "y")])
    await _mark_old(bus, k, "3")
    await bus.transport.command("HSET", k.metrics, "lane_pending", "99")  # not recounted
    counts = await jobs.counts(bus, queue)
    assert counts.pending == 99
    assert await _layout(bus, k) == (b"3", None)
    await bus.transport.command("HSET", k.metrics, "lane_pending", "4")
    await check_exact(bus, queue)


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_counters_are_exact_after_a_worker_holding_lane_jobs_is_killed(
    bus: Bus, queue: str, server_url: str
) -> None:
    """kill -9 of a worker holding lane jobs: at the kill and after a second worker finished
    everything, the counter and the index equal the walk; every job ran."""
    all_ids = []
    for chat in range(40):
        batch = [jid() for _ in range(5)]
        all_ids += batch
        await lanes.enqueue_many(bus, queue, f"chat{chat}", [(i, "x") for i in batch])
    await kill_a_worker_mid_run(bus, server_url, queue)
    assert (await jobs.counts(bus, queue)).active > 0, "the kill should leave leased jobs"
    await check_exact(bus, queue)
    await finish_with_a_second_worker(bus, server_url, queue)
    done = set(await finished(bus, queue))
    assert done == set(all_ids)
    await check_exact(bus, queue)
    assert await lanes.status(bus, queue) == []
    with trio.fail_after(5):
        assert (await jobs.counts(bus, queue)).lanes == 0
