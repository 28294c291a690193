"""Per-job timeouts: ``timeout_ms`` at enqueue (kept with the job, returned by the claim) and
``Consumer(timeout_s=...)`` as the default; a handler past its deadline is cancelled and the
attempt fails with "timed out after N ms", so ``max_attempts`` and the backoff apply. Deadlines
here are short and waited for with ``wait_for``; no test asserts a timing."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio import Bus, Consumer, Fixed, Job, Metronome, Serve, ids, jobs, lanes
from echomq_trio.jobs import JobState
from echomq_trio.settlement import RetryJob, SettlePolicy, TimedOut, decide
from tests.support import wait_for


def jid() -> str:
    return ids.generate("JOB")


# --- pure -----------------------------------------------------------------------------------------


@given(st.integers(1, 10**9), st.integers(1, 20), st.integers(0, 10**6))
def test_a_timed_out_attempt_is_a_failed_attempt(timeout: int, attempts: int, wait: int) -> None:
    job = Job("q", jid(), b"", attempts, 1, 0)
    got = decide(TimedOut(timeout), job, SettlePolicy(5, Fixed(wait)))
    assert got == RetryJob(wait, f"timed out after {timeout} ms", 5)


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-5, ValueError), (1.5, TypeError), (True, TypeError), ("9", TypeError)],
)
async def test_a_bad_timeout_is_refused_before_any_io(
    bus: Bus, queue: str, value: object, error: type
) -> None:
    calls = [
        lambda: jobs.enqueue(bus, queue, "x", timeout_ms=value),  # type: ignore[arg-type]
        lambda: jobs.enqueue_many(bus, queue, ["x"], timeout_ms=value),  # type: ignore[arg-type]
        lambda: jobs.enqueue_in(bus, queue, "x", 10, timeout_ms=value),  # type: ignore[arg-type]
        lambda: lanes.enqueue(bus, queue, "g", "x", timeout_ms=value),  # type: ignore[arg-type]
        lambda: lanes.enqueue_many(bus, queue, "g", ["x"], timeout_ms=value),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(error, match="timeout_ms") as caught:
            await call()
        assert "\n" not in str(caught.value)
    assert not (await jobs.counts(bus, queue)).exists


@pytest.mark.parametrize(
    "kwargs", [{"timeout_s": 0}, {"timeout_s": -1.0}, {"cancel_poll_s": 0}, {"cancel_poll_s": -1}]
)
async def test_bad_consumer_settings(bus: Bus, kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))) as caught:
        Consumer(bus, "q", _noop, **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


# --- kept with the job ---------------------------------------------------------------------------


async def test_the_claim_returns_each_job_s_timeout(bus: Bus, queue: str) -> None:
    flat = await jobs.enqueue(bus, queue, "flat", timeout_ms=100)
    none = await jobs.enqueue(bus, queue, "none")
    many = await jobs.enqueue_many(bus, queue, ["m1", "m2"], timeout_ms=200)
    lane = await lanes.enqueue(bus, queue, "g", "lane", timeout_ms=300)
    batch = await lanes.enqueue_many(bus, queue, "h", ["b1"], timeout_ms=400)
    later = await jobs.enqueue_in(bus, queue, "later", 0, timeout_ms=500)
    await jobs.promote(bus, queue)
    claimed = {j.id: j.timeout_ms for j in await jobs.claim(bus, queue, 10)}
    assert claimed == {
        flat.id: 100, none.id: None, many[0].id: 200, many[1].id: 200, lane.id: 300,
        batch[0].id: 400, later.id: 500,
    }  # fmt: skip


# --- the consumer ---------------------------------------------------------------------------------


async def test_a_handler_past_its_timeout_is_retried_then_dead(bus: Bus, queue: str) -> None:
    cleaned: list[int] = []

    async def handler(job: Job) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 5):
                await trio.sleep(0.01)  # cleanup under a shield with a deadline runs
                cleaned.append(job.attempts)

    a = await jobs.enqueue(bus, queue, "a", timeout_ms=200)
    consumer = Consumer(bus, queue, handler, max_attempts=2, backoff=Fixed(10))
    async with trio.open_nursery() as nursery:
        await nursery.start(Metronome(bus, queue, beat_ms=50).run)
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().dead == 1)
        nursery.cancel_scope.cancel()
    stats = consumer.statistics()
    assert (stats.retried, stats.dead, stats.acked) == (1, 1, 0)
    assert cleaned == [1, 2]
    info = await jobs.get_job(bus, queue, a.id)
    assert info is not None and info.state is JobState.DEAD
    assert info.last_error == "timed out after 200 ms"


@pytest.mark.parametrize("per_lane", [False, True])
async def test_the_consumer_s_timeout_is_the_default_and_a_job_s_own_wins(
    bus: Bus, queue: str, per_lane: bool
) -> None:
    async def handler(job: Job) -> None:
        await trio.sleep(0.4)  # past the consumer's 0.1 s, within the job's own 30 s

    own = await lanes.enqueue(bus, queue, "g1", "own", timeout_ms=30_000)
    default = await lanes.enqueue(bus, queue, "g2", "default")
    consumer = Consumer(bus, queue, handler, timeout_s=0.1, max_attempts=1, per_lane=per_lane)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked + consumer.statistics().dead == 2)
        nursery.cancel_scope.cancel()
    assert await jobs.get_job(bus, queue, own.id) is None  # acked
    info = await jobs.get_job(bus, queue, default.id)
    assert info is not None and info.last_error == "timed out after 100 ms"


async def test_serve_passes_the_timeout_to_its_consumers(bus: Bus, queue: str) -> None:
    from echomq_trio import open_worker

    async def handler(job: Job) -> None:
        await trio.sleep_forever()

    a = await jobs.enqueue(bus, queue, "a")
    serve = Serve(queue, handler, timeout_s=0.05, max_attempts=1, cancel_poll_s=0.1)
    async with open_worker(bus, [serve]) as worker:
        await wait_for(lambda: worker.statistics().of(queue).consumer.dead == 1)
    info = await jobs.get_job(bus, queue, a.id)
    assert info is not None and info.last_error == "timed out after 50 ms"


async def _noop(job: Job) -> None:
    pass


@pytest.mark.parametrize("per_lane", [False, True])
async def test_one_handler_task_goes_on_after_a_timeout_and_a_cancel(
    bus: Bus, queue: str, per_lane: bool
) -> None:
    """One handler task (the pool's one, or one lane's) meets a timeout, a cancel, and jobs that
    finish, in turn: each stop is its job's alone."""
    from echomq_trio.jobs import Cancelled

    ran: list[str] = []

    async def handler(job: Job) -> None:
        ran.append(job.text)
        if job.text != "quick":
            await trio.sleep_forever()

    items = ["slow", "quick", "cancel me", "quick", "slow", "quick"]
    await lanes.enqueue_many(bus, queue, "one", items[:2], limit=1, timeout_ms=300)
    target = await lanes.enqueue(bus, queue, "one", items[2])  # no deadline: only the cancel
    await lanes.enqueue_many(bus, queue, "one", items[3:], timeout_ms=300)
    consumer = Consumer(bus, queue, handler, concurrency=1, max_attempts=1, per_lane=per_lane,
                        cancel_poll_s=0.05)  # fmt: skip
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: ran[:3] == ["slow", "quick", "cancel me"])
        assert await jobs.cancel(bus, queue, target.id) is Cancelled.CANCELLED
        await wait_for(lambda: consumer.statistics().acked == 3)
        nursery.cancel_scope.cancel()
    stats = consumer.statistics()
    assert (stats.dead, stats.cancelled, stats.acked, stats.stale) == (2, 1, 3, 0)
    assert ran == items
