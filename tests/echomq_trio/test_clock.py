"""Steps of the server clock: the pure witness and step rules, then a real server under
libfaketime whose clock the test steps an hour back or forward while a metronome runs. What must
hold: the step is noticed once and logged once with its size; a wait of a length (a lease, a lane
wait, a retry's backoff, ``enqueue_in``) keeps its length; a time given as a time
(``enqueue_at``) keeps its wall-clock meaning; a recurring schedule runs within its period; after
a step forward no lease from before it is reaped."""

from __future__ import annotations

import logging

import pytest
import trio

from echomq_trio import Bus, jobs, lanes, open_bus, repeat
from echomq_trio.clock import StepLog, Witness, describe_step
from echomq_trio.metronome import Metronome
from tests.support import SteppingServer, wait_for

HOUR_MS = 3_600_000

# --- pure ---------------------------------------------------------------------------------------


def test_a_witness_gives_its_reading_the_time_since_and_the_call_s_spread() -> None:
    w = Witness()
    assert w.args(5.0) == ("", "0", "0")
    w.observe(1_000_000, sent_at=10.0, answered_at=10.0105)
    assert w.args(12.5) == ("1000000", "2489", "11")  # elapsed rounded down, spread up
    assert w.args(10.0) == ("1000000", "0", "11")  # never negative


def test_steps_are_described_for_people() -> None:
    assert describe_step(-3_600_012) == "back 1 h (-3,600,012 ms)"
    assert describe_step(2_512) == "forward 3 s (2,512 ms)"  # to the nearest second
    assert describe_step(-5_430_000) == "back 1 h 30 min (-5,430,000 ms)"


def test_a_step_seen_on_several_queues_is_news_once() -> None:
    told = StepLog(memory_s=60)
    assert told.news(-3_600_000, now=0.0)
    assert not told.news(-3_600_700, now=1.0)  # the same step, recorded on another queue
    assert told.news(3_600_000, now=2.0)  # another step
    assert told.news(-3_600_000, now=100.0)  # long after: a new one


# --- a real server whose clock steps -------------------------------------------------------------


async def _job_score(bus: Bus, queue: str, job_id: str) -> int | None:
    info = await jobs.get_job(bus, queue, job_id)
    assert info is not None
    return info.score_ms


async def _lane_wait(bus: Bus, queue: str, group: str) -> int | None:
    (status,) = await lanes.status(bus, queue, [group])
    return status.wait_until_ms


async def _step_once_beaten(metronome: Metronome, server: SteppingServer, seconds: int) -> None:
    """Step the server's clock once the metronome has a reading of it."""
    await wait_for(lambda: metronome.statistics().beats >= 2)
    await server.step(seconds)


@pytest.mark.timeout_s(90)
async def test_after_a_step_back_waits_keep_their_length_and_times_their_meaning(
    stepping_server: SteppingServer, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "echomq_trio.metronome")
    async with open_bus(stepping_server.url) as bus:
        now = await bus.transport.server_time_ms()
        relative = (await jobs.enqueue_in(bus, queue, "in", 3_000)).id
        absolute = (await jobs.enqueue_at(bus, queue, "at", now + 3_000)).id
        # A lane job deferred 3 s: its lane waits; a flat job retried after 3 s.
        await lanes.enqueue(bus, queue, "chat", "lane", limit=1)
        await jobs.enqueue(bus, queue, "flat")
        claimed = {j.group: j for j in await jobs.claim(bus, queue, 2, lease_ms=60_000)}
        await jobs.defer(bus, queue, claimed["chat"].id, claimed["chat"].token, 3_000)
        await jobs.retry(bus, queue, claimed[None].id, claimed[None].token, 3_000, 5)
        # A job whose holder died: its lease ends in 4 s.
        dying = (await jobs.enqueue(bus, queue, "dying")).id
        (held,) = await jobs.claim(bus, queue, 1, lease_ms=4_000)
        assert held.id == dying
        await repeat.register(bus, queue, "often", 2_000, "tick", first_in_ms=2_000)
        # No lease is reaped for a grace after the step (holders renew on the new clock first).
        metronome = Metronome(bus, queue, beat_ms=200, reap_grace_ms=1_000)
        async with trio.open_nursery() as nursery:
            await nursery.start(metronome.run)
            await _step_once_beaten(metronome, stepping_server, -3600)
            # Every wait of a length ends within its length (and the beat), not in an hour.
            await wait_for(lambda: metronome.statistics().clock_steps == 1, timeout=10)
            await wait_for(lambda: metronome.statistics().fired >= 1, timeout=10)
            await wait_for(lambda: metronome.statistics().reaped == 1, timeout=10)
            await wait_for(lambda: _all_none(bus, queue, [relative, claimed[None].id]), timeout=10)
            assert await _lane_wait(bus, queue, "chat") is None
            # The time given as a time is an hour away again on the stepped clock.
            now = await bus.transport.server_time_ms()
            at = await _job_score(bus, queue, absolute)
            assert at is not None and HOUR_MS - 10_000 < at - now <= HOUR_MS + 3_000
            (reg,) = await repeat.list_repeats(bus, queue)
            assert reg.next_run_ms - now <= 2_000
            nursery.cancel_scope.cancel()
    told = [r for r in caplog.records if "server clock stepped" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in told]
    assert "stepped back 1 h (" in told[0].getMessage()


async def _all_none(bus: Bus, queue: str, ids: list[str]) -> bool:
    """Every job of ``ids`` has left the schedule (promoted: pending, no score)."""
    infos = [await jobs.get_job(bus, queue, i) for i in ids]
    return all(i is not None and i.state == "pending" for i in infos)


@pytest.mark.timeout_s(90)
async def test_after_a_step_forward_no_lease_is_reaped_and_waits_keep_their_length(
    stepping_server: SteppingServer, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "echomq_trio.metronome")
    async with open_bus(stepping_server.url) as bus:
        now = await bus.transport.server_time_ms()
        relative = (await jobs.enqueue_in(bus, queue, "in", 30_000)).id
        absolute = (await jobs.enqueue_at(bus, queue, "at", now + 30_000)).id
        await lanes.enqueue(bus, queue, "chat", "lane", limit=1)
        await jobs.enqueue(bus, queue, "held")
        claimed = {j.group: j for j in await jobs.claim(bus, queue, 2, lease_ms=30_000)}
        await jobs.defer(bus, queue, claimed["chat"].id, claimed["chat"].token, 30_000)
        held = claimed[None]
        lease_left = held.lease_deadline_ms - now
        metronome = Metronome(bus, queue, beat_ms=200)
        async with trio.open_nursery() as nursery:
            await nursery.start(metronome.run)
            await _step_once_beaten(metronome, stepping_server, 3600)
            await wait_for(lambda: metronome.statistics().clock_steps == 1, timeout=10)
            beats = metronome.statistics().beats
            await wait_for(lambda: metronome.statistics().beats >= beats + 3, timeout=10)
            # The time given as a time is due at once (its wall-clock time has passed).
            info = await jobs.get_job(bus, queue, absolute)
            assert info is not None and info.state == "pending"
            now = await bus.transport.server_time_ms()
            # The lease still has (about) what it had; nothing was reaped.
            assert metronome.statistics().reaped == 0
            deadline = await _job_score(bus, queue, held.id)
            assert deadline is not None and 0 < deadline - now <= lease_left
            assert deadline - now > lease_left - 15_000
            # The relative waits still wait (about) 30 s.
            at = await _job_score(bus, queue, relative)
            assert at is not None and 15_000 < at - now <= 30_000
            wait = await _lane_wait(bus, queue, "chat")
            assert wait is not None and 15_000 < wait - now <= 30_000
            nursery.cancel_scope.cancel()
    told = [r.getMessage() for r in caplog.records if "server clock stepped" in r.getMessage()]
    assert len(told) == 1 and "stepped forward 1 h (" in told[0], told


@pytest.mark.timeout_s(90)
async def test_two_metronomes_carry_a_step_once(
    stepping_server: SteppingServer, queue: str
) -> None:
    async with open_bus(stepping_server.url) as one, open_bus(stepping_server.url) as two:
        await jobs.enqueue_many(one, queue, ["a", "b", "c"])
        claimed = await jobs.claim(one, queue, 3, lease_ms=40_000)
        now = await one.transport.server_time_ms()
        m1, m2 = Metronome(one, queue, beat_ms=100), Metronome(two, queue, beat_ms=100)
        async with trio.open_nursery() as nursery:
            await nursery.start(m1.run)
            await nursery.start(m2.run)
            await wait_for(lambda: m2.statistics().beats >= 2)
            await _step_once_beaten(m1, stepping_server, -3600)
            await wait_for(lambda: m1.statistics().carried + m2.statistics().carried >= 3)
            beats = m1.statistics().beats + m2.statistics().beats
            await wait_for(lambda: m1.statistics().beats + m2.statistics().beats >= beats + 6)
            nursery.cancel_scope.cancel()
        assert m1.statistics().carried + m2.statistics().carried == 3
        after = await one.transport.server_time_ms()
        for job in claimed:  # carried once: still about 40 s from when it was claimed
            deadline = await _job_score(one, queue, job.id)
            assert deadline is not None
            assert 40_000 - 15_000 < deadline - after <= job.lease_deadline_ms - now


async def _witnessed(bus: Bus) -> Witness:
    """A witness of the server clock now (as a metronome's last beat would be)."""
    w = Witness()
    t = trio.current_time()
    w.observe(await bus.transport.server_time_ms(), t, trio.current_time())
    return w


@pytest.mark.timeout_s(60)
async def test_recurring_schedules_that_share_a_next_run_are_all_brought_within_a_period(
    stepping_server: SteppingServer, queue: str
) -> None:
    """Carried a page of two at a time, four hourly schedules due at the same ms: a page takes
    every entry of its last score, so none is passed over."""
    async with open_bus(stepping_server.url) as bus:
        for name in "abcd":
            await repeat.register(bus, queue, name, HOUR_MS, name, first_in_ms=60_000)
        same = (await repeat.list_repeats(bus, queue))[0].next_run_ms
        for name in "abcd":
            await bus.command("ZADD", bus.keys(queue).repeats, same, name)
        w = await _witnessed(bus)
        await stepping_server.step(-3600)
        c = await jobs.carry_clock(bus, queue, w.args(trio.current_time()), batch=2)
        assert c.recorded_ms < 0
        while c.more:
            c = await jobs.carry_clock(bus, queue, batch=2)
        now = await bus.transport.server_time_ms()
        nexts = {r.name: r.next_run_ms - now for r in await repeat.list_repeats(bus, queue)}
        assert all(0 < ms <= HOUR_MS for ms in nexts.values()), nexts


@pytest.mark.timeout_s(60)
async def test_after_a_step_forward_a_live_holder_s_lease_is_not_reaped_before_it_renews(
    stepping_server: SteppingServer, queue: str
) -> None:
    """A step forward of 40 s against a 30 s lease: on the new clock the lease looks expired,
    so it is carried; and no lease is reaped for the grace after the step anyway, so the holder,
    renewing a little later (its third of a lease), keeps its job."""
    async with open_bus(stepping_server.url) as bus:
        await jobs.enqueue(bus, queue, "held")
        (held,) = await jobs.claim(bus, queue, 1, lease_ms=30_000)
        metronome = Metronome(bus, queue, beat_ms=100, reap_grace_ms=5_000)
        async with trio.open_nursery() as nursery:
            await nursery.start(metronome.run)
            await _step_once_beaten(metronome, stepping_server, 40)
            await wait_for(lambda: metronome.statistics().clock_steps == 1, timeout=10)
            beats = metronome.statistics().beats
            await wait_for(lambda: metronome.statistics().beats >= beats + 5, timeout=10)
            renewed = await jobs.extend(bus, queue, [(held.id, held.token)], 30_000)
            assert renewed.lost == ()
            beats = metronome.statistics().beats
            await wait_for(lambda: metronome.statistics().beats >= beats + 10, timeout=10)
            nursery.cancel_scope.cancel()
        assert metronome.statistics().reaped == 0
        info = await jobs.get_job(bus, queue, held.id)
        assert info is not None and info.state == "active"


# --- expiries across a step ----------------------------------------------------------------------


async def _expired(bus: Bus, queue: str, ids: list[str]) -> bool:
    """Every job of ``ids`` is dead as expired."""
    infos = [await jobs.get_job(bus, queue, i) for i in ids]
    return all(i is not None and i.state == "dead" and i.last_error == "expired" for i in infos)


async def _expires_in(bus: Bus, queue: str, job_id: str) -> int:
    """How far ahead of the server's now the job's expiry is, ms."""
    info = await jobs.get_job(bus, queue, job_id)
    assert info is not None and info.expires_ms is not None
    return info.expires_ms - await bus.transport.server_time_ms()


@pytest.mark.timeout_s(90)
async def test_after_a_step_back_an_expiry_in_keeps_its_length_and_one_at_its_wall_clock_time(
    stepping_server: SteppingServer, queue: str
) -> None:
    """A step back of an hour: a job that must start within 4 s expires within about 4 s, not
    an hour and 4 s later; one that must start by a time still waits for that time."""
    async with open_bus(stepping_server.url) as bus:
        now = await bus.transport.server_time_ms()
        flat = (await jobs.enqueue(bus, queue, "flat", expires_in=4_000)).id
        in_lane = (await lanes.enqueue(bus, queue, "chat", "lane", expires_in=4_000)).id
        at_time = (await jobs.enqueue(bus, queue, "at", expires_at=now + 4_000)).id
        metronome = Metronome(bus, queue, beat_ms=200)
        async with trio.open_nursery() as nursery:
            await nursery.start(metronome.run)
            await _step_once_beaten(metronome, stepping_server, -3600)
            await wait_for(lambda: metronome.statistics().clock_steps == 1, timeout=10)
            # swept by the metronome as their (carried) deadlines pass
            await wait_for(lambda: _expired(bus, queue, [flat, in_lane]), timeout=10)
            left = await _expires_in(bus, queue, at_time)
            assert HOUR_MS - 10_000 < left <= HOUR_MS + 4_000
            nursery.cancel_scope.cancel()
        info = await jobs.get_job(bus, queue, at_time)
        assert info is not None and info.state == "pending"


@pytest.mark.timeout_s(90)
async def test_after_a_step_forward_an_expiry_in_keeps_its_length_and_one_at_has_passed(
    stepping_server: SteppingServer, queue: str
) -> None:
    """A step forward of an hour expires the job that had to start by a time now passed, and
    none of those given a length: they still have (about) what they had, and run."""
    async with open_bus(stepping_server.url) as bus:
        now = await bus.transport.server_time_ms()
        flat = (await jobs.enqueue(bus, queue, "flat", expires_in=30_000)).id
        in_lane = (await lanes.enqueue(bus, queue, "chat", "lane", expires_in=30_000)).id
        later = (await jobs.enqueue_in(bus, queue, "later", 1_000, expires_in=30_000)).id
        at_time = (await jobs.enqueue(bus, queue, "at", expires_at=now + 30_000)).id
        metronome = Metronome(bus, queue, beat_ms=200)
        async with trio.open_nursery() as nursery:
            await nursery.start(metronome.run)
            await _step_once_beaten(metronome, stepping_server, 3600)
            await wait_for(lambda: metronome.statistics().clock_steps == 1, timeout=10)
            await wait_for(lambda: _expired(bus, queue, [at_time]), timeout=10)
            beats = metronome.statistics().beats
            await wait_for(lambda: metronome.statistics().beats >= beats + 3, timeout=10)
            for job_id in (flat, in_lane, later):
                assert 15_000 < await _expires_in(bus, queue, job_id) <= 30_000
            await wait_for(lambda: _promoted(bus, queue, later), timeout=10)
            nursery.cancel_scope.cancel()
        claimed = await jobs.claim(bus, queue, 10)
        assert sorted(j.id for j in claimed) == sorted([flat, in_lane, later])


async def _promoted(bus: Bus, queue: str, job_id: str) -> bool:
    info = await jobs.get_job(bus, queue, job_id)
    return info is not None and info.state == "pending"


@pytest.mark.timeout_s(60)
async def test_a_claim_while_a_step_is_carried_expires_nothing(
    stepping_server: SteppingServer, queue: str
) -> None:
    """Carried one expiry at a time after a step forward of an hour, the jobs not carried yet
    look an hour past their expiry: a claim meanwhile leases them (their expiries may be
    lengths not carried yet) rather than expiring them."""
    async with open_bus(stepping_server.url) as bus:
        admitted = [
            (await jobs.enqueue(bus, queue, str(i), expires_in=20_000 + 1_000 * i)).id
            for i in range(3)
        ]
        w = await _witnessed(bus)
        await stepping_server.step(3600)
        c = await jobs.carry_clock(bus, queue, w.args(trio.current_time()), batch=1)
        assert c.recorded_ms > 0 and c.carried == 1 and c.more
        claimed = await jobs.claim(bus, queue, 10)
        assert sorted(j.id for j in claimed) == sorted(admitted)
        while c.more:
            c = await jobs.carry_clock(bus, queue, batch=1)
        counts = await jobs.counts(bus, queue)
        assert counts.expired_total == 0 and counts.active == 3
