"""The metronome's loop in virtual time (``MockClock(autojump_threshold=0)`` through pytest-trio's
``autojump_clock``), on an in-memory queue (``tests/echomq_trio/inmemory.py``): it sleeps until
the next beat or the earliest scheduled job, parks on the tick list for the long part of a wait
and steps the last stretch, reaps once a beat, and after refused writes gives the holders
``reap_grace_ms`` to renew before it reaps. What promote and reap do on a server, with many
metronomes and a stepping clock, is ``test_metronome.py``'s and ``test_clock.py``'s."""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from echomq_trio import Bus, Metronome, ids
from echomq_trio.backoff import reconnect_delay_s
from echomq_trio.errors import WritesRefused
from echomq_trio.metronome import PARK_MARGIN_S, SHORT_STEP_S
from tests.echomq_trio.inmemory import InMemoryQueue, Lease
from tests.support import wait_for

QUEUE = "q"
STEP_MS = SHORT_STEP_S * 1000


@pytest.mark.timeout_s(600)  # virtual seconds
async def test_scheduled_jobs_are_promoted_on_time_and_the_waits_between_are_parked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    due = {ids.generate("JOB"): at for at in (10_000, 25_500, 25_510, 47_003)}
    for job_id, at in due.items():
        q.schedule_at(job_id, at)
    metronome = Metronome(Bus(q), QUEUE, beat_ms=5_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await wait_for(lambda: len(q.promoted) == len(due), timeout=120)
        nursery.cancel_scope.cancel()
    assert [job_id for job_id, _ in q.promoted] == list(due)
    # On time: none later than one short step (the local sleep of the last stretch)
    assert all(0 <= late <= STEP_MS for _, late in q.promoted), q.promoted
    # and not by spinning (a sweep each short step would be 2,400): each wait, to a beat or to
    # a due job, was parked but for its last PARK_MARGIN_S, stepped.
    sweeps = len(q.times("promote"))
    waits = 48 / 5 + len(due) + 1
    assert sweeps <= waits * (PARK_MARGIN_S / SHORT_STEP_S + 3), sweeps
    assert len(q.times("BLPOP tick")) >= 48 / 5


@pytest.mark.timeout_s(600)
async def test_the_round_trips_of_a_beat_do_not_make_scheduled_jobs_late(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Every call takes 4 ms there and back, so a beat (promote, fire, reap) takes 12 ms: the
    # wait to a due job counts from when the promote that read the server clock was sent, so
    # neither the later calls of the beat nor the way back add to it, and none runs early.
    q = InMemoryQueue(latency_s=0.004)
    due = {ids.generate("JOB"): at for at in (1_000, 1_007, 1_530, 2_203, 9_999)}
    for job_id, at in due.items():
        q.schedule_at(job_id, at)
    metronome = Metronome(Bus(q), QUEUE, beat_ms=1_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await wait_for(lambda: len(q.promoted) == len(due), timeout=60)
        nursery.cancel_scope.cancel()
    assert [job_id for job_id, _ in q.promoted] == list(due)
    assert all(0 <= late <= 1 for _, late in q.promoted), q.promoted


@pytest.mark.timeout_s(600)
async def test_a_job_scheduled_during_a_long_park_wakes_the_metronome(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    metronome = Metronome(Bus(q), QUEUE, beat_ms=60_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await trio.sleep(10)  # parked, a minute's beat ahead (the scenario, not a wait)
        job_id = ids.generate("JOB")
        q.schedule_at(job_id, q.now_ms() + 1_000)
        await wait_for(lambda: q.promoted != [], timeout=120)
        nursery.cancel_scope.cancel()
    ((promoted, late),) = q.promoted
    assert promoted == job_id and 0 <= late <= STEP_MS


@pytest.mark.timeout_s(600)
async def test_a_lapsed_lease_is_reaped_within_a_beat(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = InMemoryQueue()
    job_id = ids.generate("JOB")
    q.payloads[job_id], q.groups[job_id] = b"x", ""
    q.active[job_id] = Lease(token=1, deadline_ms=12_300)
    metronome = Metronome(Bus(q), QUEUE, beat_ms=2_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await wait_for(lambda: q.reaped == [job_id], timeout=120)
        reaped_at = trio.current_time()
        nursery.cancel_scope.cancel()
    assert 12.3 < reaped_at <= 12.3 + 2.0
    assert q.pending == [job_id]
    reaps = q.times("reap")
    assert [b - a for a, b in itertools.pairwise(reaps)] == pytest.approx([2.0] * (len(reaps) - 1))


@pytest.mark.timeout_s(600)
async def test_after_refused_writes_the_holders_get_the_reap_grace_before_any_reap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The server refuses writes for 6 s (a full disk): no holder could renew meanwhile, so a
    lease that lapsed then is reaped only ``reap_grace_ms`` after the metronome last met a
    refusal, and the sweeps refused are tried again as the bus backs off."""
    q = InMemoryQueue()
    job_id = ids.generate("JOB")
    q.payloads[job_id], q.groups[job_id] = b"x", ""
    q.active[job_id] = Lease(token=1, deadline_ms=3_000)
    q.fail("promote", until=6.0, error=WritesRefused)
    metronome = Metronome(Bus(q), QUEUE, beat_ms=1_000, reap_grace_ms=4_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await wait_for(lambda: q.reaped == [job_id], timeout=120)
        nursery.cancel_scope.cancel()
    refused = [t for t in q.times("promote") if t < 6.0]
    assert [b - a for a, b in itertools.pairwise(refused)] == pytest.approx(
        [reconnect_delay_s(n) for n in range(1, len(refused))]
    )
    assert metronome.statistics().errors == len(refused)
    reaps = q.times("reap")
    assert reaps[0] >= refused[-1] + 4.0  # none in the grace after the last refusal
    assert reaps[0] <= refused[-1] + 4.0 + 1.0 + 1e-6  # and then within a beat
    assert q.times("promote")[len(refused)] < reaps[0]  # promoting went on meanwhile
