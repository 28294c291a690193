"""The consumer's loops in virtual time (``MockClock(autojump_threshold=0)`` through pytest-trio's
``autojump_clock``), on an in-memory queue (``tests/echomq_trio/inmemory.py``): when it renews
leases, how long it gives handlers at shutdown, how it parks while idle and looks for overdue
jobs, how it rides out a server that stops answering. Minutes of a consumer's life run in no
real time. What the scripts do with those calls is the real servers' part
(``test_consumer.py``, ``test_leases.py``, ``test_shutdown.py``, ``test_cancellations.py``)."""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from echomq_trio import Bus, Consumer, ids
from echomq_trio.backoff import reconnect_delay_s
from echomq_trio.consumer import OVERDUE_BEATS
from echomq_trio.jobs import Job
from tests.echomq_trio.inmemory import InMemoryQueue
from tests.support import wait_for

QUEUE = "q"


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


@pytest.mark.timeout_s(600)  # virtual seconds
async def test_a_handler_ten_leases_long_is_renewed_each_third_of_a_lease_and_never_lapses(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    job_id = ids.generate("JOB")
    q.enqueue(job_id)
    lease_ms = 3_000

    async def handler(job: Job) -> None:
        await trio.sleep(10 * lease_ms / 1000)

    consumer = Consumer(Bus(q), QUEUE, handler, concurrency=1, lease_ms=lease_ms)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: q.acked == [job_id], timeout=60)
        nursery.cancel_scope.cancel()
    renewals = q.times("extend")
    claimed_at = q.times("claim")[0]
    # From the claim, a renewal each third of a lease while the job is held (the renewer's
    # period runs from its start, with the claim in the same instant).
    assert renewals[0] - claimed_at == pytest.approx(lease_ms / 3000)
    assert set(_gaps(renewals)) == {lease_ms / 3000}
    assert len(renewals) >= 29
    assert q.lapsed == [] and consumer.statistics().lost_leases == 0


@pytest.mark.timeout_s(600)
async def test_a_renewal_the_server_refuses_is_tried_again_sooner_and_the_lease_holds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A 6 s lease, renewed each 2 s from the claim (at virtual 0); the server refuses renewals
    until 5.25 s: the renewal at 2 s is tried again after ``reconnect_delay_s`` of each failure
    in a row (2.1, 2.3, 2.7, 3.5, 4.5), sooner than the period, so the one at 5.5 s goes through
    before the lease lapses at 6 s; then the period again."""
    q = InMemoryQueue()
    job_id = ids.generate("JOB")
    q.enqueue(job_id)

    async def handler(job: Job) -> None:
        await trio.sleep(12)

    q.fail("extend", until=5.25)
    consumer = Consumer(Bus(q), QUEUE, handler, concurrency=1, lease_ms=6_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: q.acked == [job_id], timeout=60)
        nursery.cancel_scope.cancel()
    assert q.times("claim")[0] == 0
    expected, at = [2.0], 2.0
    for failures in range(1, 7):  # six fail, from 2.0 to 4.5; the seventh, at 5.5, goes through
        at += reconnect_delay_s(failures)
        expected.append(at)
    expected += [expected[-1] + 2, expected[-1] + 4]  # the period, once a renewal went through
    assert q.times("extend")[: len(expected)] == pytest.approx(expected)
    assert expected[6] == pytest.approx(5.5)
    assert q.lapsed == [] and consumer.statistics().lost_leases == 0


@pytest.mark.timeout_s(600)
async def test_shutdown_gives_a_running_handler_its_grace_then_cancels_it_and_hands_the_job_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    slow, quick = ids.generate("JOB"), ids.generate("JOB")
    q.enqueue(slow)
    cancelled_at: list[float] = []

    async def handler(job: Job) -> None:
        if job.id == quick:
            await trio.sleep(1)  # finishes within the grace period: settled
            return
        try:
            await trio.sleep(3600)
        except trio.Cancelled:
            cancelled_at.append(trio.current_time())
            raise

    consumer = Consumer(Bus(q), QUEUE, handler, concurrency=2, grace_s=2.0, lease_ms=60_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: slow in q.active)
        q.enqueue(quick)
        await wait_for(lambda: quick in q.active)
        stop_at = trio.current_time()
        nursery.cancel_scope.cancel()
    assert cancelled_at == [pytest.approx(stop_at + 2.0)]
    assert q.acked == [quick]  # the one that finished in its grace was settled
    assert q.released == [slow] and q.pending == [slow] and q.active == {}
    assert q.times("release")[-1] == pytest.approx(stop_at + 2.0)
    assert consumer.statistics().released == 1


@pytest.mark.timeout_s(600)
async def test_an_idle_consumer_parks_a_beat_at_a_time_looks_for_overdue_jobs_and_wakes_on_a_job(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    seen: list[tuple[str, float]] = []

    async def handler(job: Job) -> None:
        seen.append((job.id, trio.current_time()))

    beat_ms = 500
    consumer = Consumer(Bus(q), QUEUE, handler, beat_ms=beat_ms)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await trio.sleep(60)  # a minute of virtual idleness (the scenario, not a wait)
        parks = q.times("BLPOP")
        # One claim and one park per beat: not a busy loop, not asleep for longer.
        assert len(parks) == pytest.approx(60 / (beat_ms / 1000), abs=2)
        assert set(_gaps(parks)) == {beat_ms / 1000}
        looks = q.times("TIME")  # each look for overdue jobs reads the server clock first
        assert set(_gaps(looks)) == {OVERDUE_BEATS * beat_ms / 1000}
        job_id, at = ids.generate("JOB"), trio.current_time()
        q.enqueue(job_id)
        await wait_for(lambda: seen != [])
        nursery.cancel_scope.cancel()
    assert seen == [(job_id, at)]  # woken at once, not at the end of the beat


@pytest.mark.timeout_s(600)
async def test_claims_the_server_refuses_are_tried_again_backing_off_and_resume_when_it_answers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No claim answered for 20 s (from virtual 0): each is tried again after
    ``reconnect_delay_s`` of the failures in a row (0.1 s doubling to 1 s), and the first try
    after the server answers again claims the job."""
    q = InMemoryQueue()
    job_id = ids.generate("JOB")
    q.enqueue(job_id)

    async def handler(job: Job) -> None:
        return None

    q.fail("claim", until=20.0)
    consumer = Consumer(Bus(q), QUEUE, handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: q.acked == [job_id], timeout=60)
        nursery.cancel_scope.cancel()
    tries = q.times("claim")
    refused = [t for t in tries if t < 20.0]
    assert _gaps(tries[: len(refused) + 1]) == pytest.approx(
        [reconnect_delay_s(n) for n in range(1, len(refused) + 1)]
    )
    assert tries[len(refused)] - 20.0 <= 1.0  # at most the longest delay after it answered
    assert len(refused) >= 20


@pytest.mark.timeout_s(600)
async def test_a_lane_task_ends_after_its_idle_time_and_a_new_job_of_its_lane_starts_another(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Per-lane dispatch: a lane's task handles its jobs in order, ends ``lane_idle_s`` after
    its last job, and the next job of that lane starts a new task."""
    q = InMemoryQueue()
    handled: list[tuple[str, str, float]] = []

    async def handler(job: Job) -> None:
        assert job.group is not None
        handled.append((job.group, job.id, trio.current_time()))
        await trio.sleep(1)

    a1, a2, b1 = (ids.generate("JOB") for _ in range(3))
    for job_id, lane in ((a1, "a"), (b1, "b"), (a2, "a")):
        q.enqueue(job_id, group=lane)
    consumer = Consumer(Bus(q), QUEUE, handler, per_lane=True, lane_idle_s=5.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: len(q.acked) == 3)
        last_done = trio.current_time()
        assert sorted(consumer.lanes()) == ["a", "b"]
        await wait_for(lambda: consumer.lanes() == [], timeout=60)
        ended_after = trio.current_time() - last_done
        again = ids.generate("JOB")
        q.enqueue(again, group="a")
        await wait_for(lambda: again in q.acked)
        assert consumer.lanes() == ["a"]
        nursery.cancel_scope.cancel()
    # a's jobs one after the other, in order; b's beside them
    assert [(g, i) for g, i, _ in handled] == [("a", a1), ("b", b1), ("a", a2), ("a", again)]
    assert handled[2][2] - handled[0][2] == pytest.approx(1.0)
    assert handled[1][2] == pytest.approx(handled[0][2])
    assert ended_after == pytest.approx(5.0, abs=0.1)  # a's task: 5 s after its last job
    assert consumer.statistics().lane_tasks >= 3
