"""Consumer: handler outcomes, concurrency, lease renewal, fatal stop."""

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio

from echomq_trio import (
    Bury,
    Bus,
    Consumer,
    ConsumerStats,
    DeferIn,
    Fixed,
    Job,
    Metronome,
    RetryIn,
    StopConsumer,
    ids,
    jobs,
)
from echomq_trio.consumer import ADAPTIVE_CLAIM_BATCH
from echomq_trio.testing import FaultyTransport
from echomq_trio.transport import Transport
from tests.support import wait_for


def jid() -> str:
    return ids.generate("JOB")


async def test_returns_ack_and_every_job_is_handled_once(bus: Bus, queue: str) -> None:
    all_ids = [jid() for _ in range(300)]
    await jobs.enqueue_many(bus, queue, [(i, i) for i in all_ids])
    seen: list[str] = []

    async def handler(job: Job) -> None:
        assert job.text == job.id
        seen.append(job.id)

    consumer = Consumer(bus, queue, handler, concurrency=8, claim_batch=16)
    before = consumer.statistics()
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked == 300)
        nursery.cancel_scope.cancel()
    assert sorted(seen) == sorted(all_ids)
    stats = consumer.statistics()
    assert (stats.claimed, stats.acked, stats.held) == (300, 300, 0)
    assert before == ConsumerStats()  # a snapshot: it never changes afterwards
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.acked = 0  # type: ignore[misc]
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active, c.completed_total) == (0, 0, 300)


async def test_picks_up_jobs_enqueued_while_parked(bus: Bus, queue: str) -> None:
    seen: list[str] = []

    async def handler(job: Job) -> None:
        seen.append(job.id)

    consumer = Consumer(bus, queue, handler, beat_ms=5_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        for _ in range(3):
            a = jid()
            await jobs.enqueue(bus, queue, "x", job_id=a)
            # Woken by the wake list, not by the 5 s beat.
            with trio.fail_after(2):
                await wait_for(lambda a=a: a in seen)  # type: ignore[misc]
        nursery.cancel_scope.cancel()


async def test_handler_runs_concurrently(bus: Bus, queue: str) -> None:
    await jobs.enqueue_many(bus, queue, [(jid(), "x") for _ in range(6)])
    running = 0
    peak = 0
    release = trio.Event()

    async def handler(job: Job) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    consumer = Consumer(bus, queue, handler, concurrency=6)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: peak == 6)
        release.set()
        await wait_for(lambda: consumer.statistics().acked == 6)
        nursery.cancel_scope.cancel()


async def test_raise_retries_with_backoff_then_dies_with_the_error_text(
    bus: Bus, queue: str
) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "x", job_id=a)
    attempts: list[int] = []

    async def handler(job: Job) -> None:
        attempts.append(job.attempts)
        raise RuntimeError(f"broken on {job.attempts}")

    consumer = Consumer(bus, queue, handler, max_attempts=3, backoff=Fixed(10))
    metronome = Metronome(bus, queue, beat_ms=100)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(metronome.run)
        await wait_for(lambda: consumer.statistics().dead == 1)
        nursery.cancel_scope.cancel()
    assert attempts == [1, 2, 3]
    (dead,) = await jobs.dead_jobs(bus, queue)
    assert dead.id == a and dead.attempts == 3
    assert dead.last_error == "RuntimeError: broken on 3"
    assert consumer.statistics().retried == 2


async def test_retry_in_asks_for_a_specific_delay(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "x", job_id=a)
    stamps: list[int] = []

    async def handler(job: Job) -> RetryIn | None:
        stamps.append(await bus.transport.server_time_ms())
        if job.attempts == 1:
            return RetryIn(400, "not yet")
        return None

    consumer = Consumer(bus, queue, handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(Metronome(bus, queue, beat_ms=1000).run)
        await wait_for(lambda: consumer.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    assert len(stamps) == 2 and stamps[1] - stamps[0] >= 400


async def test_leases_are_renewed_while_a_handler_runs(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "x", job_id=a)
    calls = 0

    async def handler(job: Job) -> None:
        nonlocal calls
        calls += 1
        await trio.sleep(1.0)  # the work itself: four leases long

    consumer = Consumer(bus, queue, handler, lease_ms=250)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(Metronome(bus, queue, beat_ms=50).run)  # reaps every 50 ms
        await wait_for(lambda: consumer.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    assert calls == 1 and consumer.statistics().lost_leases == 0


class _AckAwaitsARenewal(FaultyTransport):
    """Holds the first ack's answer until a lease renewal has run after it on the server: the
    renewal finds the lease gone (the ack ended it) while the job is still the consumer's."""

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self.acked = False
        self.renewed_after = trio.Event()

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        reply = await super().script(name, keys, args)
        if name == "extend" and self.acked:
            self.renewed_after.set()
        if name == "ack" and not self.acked:
            self.acked = True
            await self.renewed_after.wait()
        return reply


async def test_a_renewal_that_crosses_the_ack_loses_nothing(bus: Bus, queue: str) -> None:
    """A renewal sent while the job's ack is on its way finds no lease (the ack ended it): that
    job was settled, not lost (once, under load, a lease "lost" this way was counted)."""
    a = jid()
    await jobs.enqueue(bus, queue, "x", job_id=a)
    crossing = _AckAwaitsARenewal(bus.transport)
    consumer = Consumer(Bus(crossing), queue, _noop, lease_ms=300)  # renewed every 100 ms
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    assert crossing.renewed_after.is_set()  # a renewal of the job ran after its ack
    (last,) = [c for c in crossing.calls if c.name == "extend"][-1:]
    assert a in [x.decode() if isinstance(x, bytes) else x for x in last.args]
    stats = consumer.statistics()
    assert (stats.acked, stats.lost_leases) == (1, 0)


async def test_stop_consumer_stops_and_hands_the_job_back(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "x", job_id=a)

    async def handler(job: Job) -> None:
        raise StopConsumer("token revoked")

    consumer = Consumer(bus, queue, handler)
    with pytest.raises(StopConsumer, match="token revoked"):
        await consumer.run()
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and (info.state, info.attempts) == ("pending", 0)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"concurrency": 0}, ValueError),
        ({"lease_ms": -1}, ValueError),
        ({"max_attempts": 1.5}, TypeError),
        ({"grace_s": -1}, ValueError),
    ],
)
async def test_bad_settings(bus: Bus, kwargs: dict[str, object], error: type) -> None:
    async def handler(job: Job) -> None:
        return None

    with pytest.raises(error):
        Consumer(bus, "q", handler, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Consumer(bus, "bad queue", handler)


async def test_bury_and_defer_results(bus: Bus, queue: str) -> None:
    doomed, later = jid(), jid()
    await jobs.enqueue_many(bus, queue, [(doomed, "d"), (later, "l")])
    visits: dict[str, int] = {}

    async def handler(job: Job) -> Bury | DeferIn | None:
        visits[job.id] = visits.get(job.id, 0) + 1
        if job.id == doomed:
            return Bury("chat not found")
        if visits[job.id] == 1:
            return DeferIn(100, "no token")
        return None

    consumer = Consumer(bus, queue, handler, max_attempts=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(Metronome(bus, queue, beat_ms=50).run)
        await wait_for(lambda: consumer.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    (dead,) = await jobs.dead_jobs(bus, queue)
    assert (dead.id, dead.attempts, dead.last_error) == (doomed, 1, "chat not found")
    s = consumer.statistics()
    assert (s.dead, s.deferred, s.acked) == (1, 1, 1)
    assert visits[later] == 2


def test_handler_delays_are_rounded_up_and_kept_within_what_scores_hold() -> None:
    from echomq_trio._checks import MAX_DELAY_MS

    assert RetryIn(1.2).delay_ms == 2  # never early
    assert DeferIn(-5).delay_ms == 0
    assert RetryIn(10**30).delay_ms == DeferIn(2**60).delay_ms == MAX_DELAY_MS
    for bad in ("5", None, True, float("nan")):
        with pytest.raises(TypeError, match="delay_ms"):
            RetryIn(bad)  # type: ignore[arg-type]


async def test_a_huge_or_bad_delay_never_stops_the_consumer(bus: Bus, queue: str) -> None:
    huge, bad = jid(), jid()
    await jobs.enqueue_many(bus, queue, [(huge, "huge"), (bad, "bad")])
    tries: dict[str, int] = {}

    async def handler(job: Job) -> RetryIn | None:
        tries[job.text] = tries.get(job.text, 0) + 1
        if job.text == "huge":
            return RetryIn(10**20)  # clamped: scheduled for the far future
        if tries["bad"] == 1:
            return RetryIn("soon")  # type: ignore[arg-type]  # a handler bug: retried
        return None

    consumer = Consumer(bus, queue, handler, backoff=Fixed(10))
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(Metronome(bus, queue, beat_ms=50).run)
        await wait_for(lambda: consumer.statistics().acked == 1 and tries.get("huge") == 1)
        nursery.cancel_scope.cancel()
    info = await jobs.get_job(bus, queue, huge)
    assert info is not None and info.state == "scheduled"
    assert tries["bad"] == 2


async def test_an_untuned_consumer_claims_more_at_once_while_the_backlog_lasts(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue_many(bus, queue, [b"x"] * 3000)
    faulty = FaultyTransport(bus.transport)
    consumer = Consumer(Bus(faulty), queue, _noop, concurrency=4)  # no prefetch: adaptive
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().acked == 3000)
        nursery.cancel_scope.cancel()
    asked = [int(c.args[1]) for c in faulty.calls if c.name == "claim"]
    assert asked[0] == 8  # 2 x concurrency to start with (4 running, 4 ahead)
    # Fast handlers: more held ahead as their pace shows, and claims grown with the backlog
    # (the window starts at 8 and only doubling takes it past 8), never past the untuned bound.
    assert max(asked) >= 16, asked[:20]
    assert max(asked) <= ADAPTIVE_CLAIM_BATCH
    assert consumer.statistics().held == 0


async def test_an_untuned_consumer_holds_few_jobs_ahead_of_slow_handlers(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue_many(bus, queue, [b"x"] * 100)
    go_on = trio.Event()

    async def slow(job: Job) -> None:
        await go_on.wait()

    faulty = FaultyTransport(bus.transport)
    consumer = Consumer(Bus(faulty), queue, slow, concurrency=3)  # no prefetch: adaptive
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().held == 6)
        await trio.testing.wait_all_tasks_blocked()
        # 3 running and 3 ahead: no second claim while the handlers have finished nothing
        # (before, it held 3 + 128 of the 100 at once, leaving none to another consumer).
        assert [int(c.args[1]) for c in faulty.calls if c.name == "claim"] == [6]
        assert consumer.statistics().held == 6
        go_on.set()
        await wait_for(lambda: consumer.statistics().acked == 100)
        nursery.cancel_scope.cancel()
    assert consumer.statistics().held == 0


async def test_an_untuned_consumer_holds_fewer_ahead_once_its_handlers_slow_down(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue_many(bus, queue, [b"x"] * (FAST_JOBS + 20_000))  # slow: ~50 s of work
    held_fast = [0]  # the most held while the handlers were fast
    slowed = trio.Event()

    async def fast_then_slow(job: Job) -> None:
        if consumer.statistics().acked < FAST_JOBS:
            held_fast[0] = max(held_fast[0], consumer.statistics().held)
            return
        slowed.set()
        await trio.sleep(0.01)  # the work of a slow handler, not a wait for anything

    consumer = Consumer(bus, queue, fast_then_slow, concurrency=4)  # no prefetch: adaptive
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        with trio.fail_after(60):
            await slowed.wait()
        # At their fast pace the handlers had far more than 40 jobs held ahead of them (about
        # 50 ms of their work; its peak, as one instant may catch the window between claims);
        # at 10 ms a job, four of them finish about 400 a second, so the consumer keeps back
        # the slots they free until about 4 + 20 are held.
        assert held_fast[0] > 40
        await wait_for(lambda: consumer.statistics().held <= 40, timeout=15)
        assert (await jobs.counts(bus, queue)).pending > 10_000  # not for want of jobs
        nursery.cancel_scope.cancel()
    assert consumer.statistics().held == 0


FAST_JOBS = 2000


async def _noop(job: Job) -> None:
    return None
