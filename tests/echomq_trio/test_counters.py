"""The bookkeeping that keeps every script O(batch): ``counts`` reads counters of the jobs
waiting in lanes and of the lanes with jobs, and lane status pages through a lane index, all
kept by the scripts where a job enters or leaves a lane. After every transition (and after a
worker holding lane jobs is killed) they must equal what a walk of every lane finds. The walk
is a test-only script run with EVAL: the bus itself never walks its lanes."""

import pytest
import trio

from echomq_trio import Bus, Outcome, ids, jobs, lanes, repeat
from echomq_trio.keys import queue_keys
from tests.conftest import wait_for
from tests.echomq_trio.workers import finish_with_a_second_worker, finished, kill_a_worker_mid_run

pytestmark = pytest.mark.cluster

# Every lane key of the queue, found by pattern (the queue lives in one slot, so on one node).
WALK = """
local qp = ARGV[1]
local waiting, nonempty, listed = 0, 0, {}
for _, key in ipairs(redis.call('KEYS', qp .. 'g:*')) do
  local n = redis.call('ZCARD', key)
  if n > 0 then
    waiting = waiting + n
    nonempty = nonempty + 1
    listed[#listed + 1] = string.sub(key, #qp + 3)
  end
end
for _, g in ipairs(redis.call('SMEMBERS', qp .. 'paused')) do listed[#listed + 1] = g end
for _, g in ipairs(redis.call('ZRANGE', qp .. 'gwait', 0, -1)) do listed[#listed + 1] = g end
for _, g in ipairs(redis.call('HKEYS', qp .. 'gactive')) do listed[#listed + 1] = g end
return {waiting, nonempty, listed}
"""


def jid() -> str:
    return ids.generate("JOB")


async def check_exact(bus: Bus, queue: str) -> None:
    """The counters (jobs waiting in lanes, lanes with jobs) and the lane index equal what a walk
    of every lane finds."""
    k = queue_keys(queue)
    waiting, nonempty, listed = await bus.wire.command("EVAL", WALK, "1", k.meta, k.prefix)
    flat = int(await bus.wire.command("ZCARD", k.pending))
    counts = await jobs.counts(bus, queue)
    assert counts.pending == flat + waiting, "metrics.lane_pending drifted"
    assert counts.lanes == nonempty, "metrics.lanes_with_jobs drifted"
    index = [g.decode() for g in await bus.wire.command("ZRANGE", k.lane_index, "0", "-1")]
    assert sorted(index) == sorted({g.decode() for g in listed}), "the lane index drifted"
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
    now_ms = int((await bus.wire.command("TIME"))[0]) * 1000
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


async def test_status_pages_every_lane_once_in_name_order(bus: Bus, queue: str) -> None:
    groups = [f"chat{n:04d}" for n in range(250)]
    for g in groups:
        await lanes.enqueue(bus, queue, g, "x", job_id=jid())
    seen: list[str] = []
    page = await lanes.status_page(bus, queue, count=100)
    while True:
        seen += [s.group for s in page.lanes]
        assert len(page.lanes) <= 100
        if page.next is None:
            break
        if len(seen) == 100:
            await lanes.enqueue(bus, queue, "chat0000a", "x", job_id=jid())  # behind the cursor
            await lanes.enqueue(bus, queue, "chat0200a", "x", job_id=jid())  # ahead of it: seen
        page = await lanes.status_page(bus, queue, page.next, 100)
    assert seen == sorted([*groups, "chat0200a"])
    assert [s.depth for s in await lanes.status(bus, queue, ["chat0000a"])] == [1]


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
    assert int(await bus.wire.command("LLEN", k.ring)) == 151  # still on the ring
    (status,) = await lanes.status(bus, queue, ["p000"])
    assert status.paused and not status.on_ring  # not served, whatever the ring holds
    await bus.wire.command("DEL", k.wake)
    assert await jobs.claim(bus, queue, 1) == []  # 100 paused lanes taken off, nothing claimed
    assert int(await bus.wire.command("LLEN", k.ring)) == 51
    assert int(await bus.wire.command("LLEN", k.wake)) >= 1  # the next claim is told to go on
    (job,) = await jobs.claim(bus, queue, 1)
    assert job.id == ready
    assert int(await bus.wire.command("LLEN", k.ring)) == 0
    await lanes.resume(bus, queue, "p007")
    (again,) = await jobs.claim(bus, queue, 1)
    assert again.group == "p007"
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
    await bus.wire.command("HDEL", k.meta, "counted")
    await bus.wire.command("HDEL", k.metrics, "lane_pending", "lanes_with_jobs")
    await bus.wire.command("DEL", k.lane_index)
    await bus.wire.command("SADD", k.lane_groups, "a", "b", "c", "emptied")
    await lanes.enqueue(
        bus, queue, "d", "z", job_id=jid()
    )  # written by this version before the count
    counts = await jobs.counts(bus, queue)
    assert (counts.pending, counts.lanes, counts.paused_lanes) == (7, 4, 1)
    assert await bus.wire.command("HGET", k.meta, "counted") == b"2"
    assert await bus.wire.command("EXISTS", k.lane_groups) == 0
    await check_exact(bus, queue)
    await bus.wire.command("HDEL", k.meta, "counted")
    await bus.wire.command("DEL", k.lane_index)
    await bus.wire.command("SADD", k.lane_groups, "a", "b", "c", "d")
    page = await lanes.status_page(bus, queue)  # a page counts it too
    assert [s.group for s in page.lanes] == ["a", "b", "c", "d", "idle-but-paused"]


async def test_a_queue_counted_by_the_version_with_the_lane_groups_set_is_recounted_once(
    bus: Bus, queue: str
) -> None:
    """The version before counted lanes with jobs as a set of lane groups (``counted`` 1, an
    exact lane index and ``lane_pending``, no ``lanes_with_jobs``): the first read that needs
    the counter counts them once and drops the set."""
    k = queue_keys(queue)
    for g in ("a", "b"):
        await lanes.enqueue_many(bus, queue, g, [(jid(), "x"), (jid(), "y")])
    (held,) = await jobs.claim(bus, queue, 1, lease_ms=60_000)  # lane a: one in flight
    await lanes.pause(bus, queue, "p")
    await bus.wire.command("HSET", k.meta, "counted", "1")
    await bus.wire.command("HDEL", k.metrics, "lanes_with_jobs")
    await bus.wire.command("SADD", k.lane_groups, "a", "b")
    counts = await jobs.counts(bus, queue)
    assert (counts.pending, counts.active, counts.lanes, counts.paused_lanes) == (3, 1, 2, 1)
    assert await bus.wire.command("HGET", k.meta, "counted") == b"2"
    assert await bus.wire.command("EXISTS", k.lane_groups) == 0
    await check_exact(bus, queue)
    await jobs.ack(bus, queue, held.id, held.token)
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
