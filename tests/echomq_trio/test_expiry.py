"""Expiry (``expires_at``/``expires_in`` at enqueue, ``scripts/claim.lua``): a job not claimed by
its expiry never runs. The claim that meets it moves it to the dead set with the reason
"expired" (or deletes it, ``queues.set_expired``), counted in ``counts`` and the metrics; flat,
in a lane (an expired head never blocks a strict lane), scheduled past its expiry, and on a
retry. On a standalone server and a 3-node cluster."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import attrs
import pytest
import trio
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from echomq_trio import (
    Bus,
    Consumer,
    Job,
    Metronome,
    audit,
    ids,
    jobs,
    lanes,
    metrics,
    protocol,
    queues,
)
from echomq_trio.dashboard import view
from echomq_trio.errors import JobFailed, JobNotFound
from echomq_trio.jobs import JobInfo, JobState, Outcome
from echomq_trio.results import AuditOutcome
from servicekit import humane
from tests.support import wait_for

pytestmark = pytest.mark.cluster

PAST = 1  # an expiry long gone (server ms)
LONG_MS = 3_600_000


async def now_ms(bus: Bus) -> int:
    return await bus.transport.server_time_ms()


async def test_an_expired_flat_job_is_never_leased_and_is_dead_with_its_reason(
    bus: Bus, queue: str
) -> None:
    gone = await jobs.enqueue(bus, queue, "old", expires_at=PAST)
    kept = await jobs.enqueue(bus, queue, "fresh", expires_in=60_000)
    plain = await jobs.enqueue(bus, queue, "plain")
    got = await jobs.claim(bus, queue, 10)
    assert [j.id for j in got] == [kept.id, plain.id]
    info = await jobs.get_job(bus, queue, gone.id)
    assert info is not None and info.state is JobState.DEAD and info.last_error == "expired"
    assert info.attempts == 0 and info.expires_ms == PAST
    fresh = await jobs.get_job(bus, queue, kept.id)
    assert fresh is not None and fresh.expires_ms is not None and fresh.expires_ms > PAST
    c = await jobs.counts(bus, queue)
    assert (c.dead, c.dead_total, c.expired_total, c.active) == (1, 1, 1, 2)
    assert [i.id for i in await jobs.dead_jobs(bus, queue)] == [gone.id]


async def test_a_claim_makes_up_for_expired_jobs_with_later_ones(bus: Bus, queue: str) -> None:
    """A run of expired jobs at the head of pending does not make a claim come back short."""
    await jobs.enqueue_many(bus, queue, ["a", "b", "c"], expires_at=PAST)
    live = await jobs.enqueue_many(bus, queue, ["d", "e"])
    got = await jobs.claim(bus, queue, 2)
    assert [j.id for j in got] == [a.id for a in live]
    assert (await jobs.counts(bus, queue)).expired_total == 3


async def test_a_claim_expires_a_bounded_number_and_leaves_a_wake_token(
    bus: Bus, queue: str
) -> None:
    many = 150  # more than a claim expires per call (claim.lua's EXPIRE_MAX, 100)
    await jobs.enqueue_many(bus, queue, [f"x{i}" for i in range(many)], expires_at=PAST)
    live = await jobs.enqueue(bus, queue, "live")
    k = bus.keys(queue)
    await bus.transport.command("DEL", k.wake)
    assert await jobs.claim(bus, queue, 1) == []
    assert (await jobs.counts(bus, queue)).expired_total == 100
    assert int(await bus.transport.command("LLEN", k.wake)) >= 1  # the next claim goes on
    (job,) = await jobs.claim(bus, queue, 1)
    assert job.id == live.id
    assert (await jobs.counts(bus, queue)).expired_total == many


async def test_the_drop_setting_deletes_an_expired_job_and_still_counts_it(
    bus: Bus, queue: str
) -> None:
    assert await queues.expired_setting(bus, queue) == "dead"
    assert await queues.set_expired(bus, queue, "drop") == "drop"
    assert (await queues.control(bus, queue)).expired == "drop"
    gone = await jobs.enqueue(bus, queue, "old", expires_at=PAST)
    assert await jobs.claim(bus, queue) == []
    assert await jobs.get_job(bus, queue, gone.id) is None
    c = await jobs.counts(bus, queue)
    assert (c.dead, c.dead_total, c.expired_total) == (0, 0, 1)
    assert await queues.set_expired(bus, queue, "dead") == "dead"
    assert (await queues.control(bus, queue)).expired == "dead"


async def test_an_expired_head_does_not_block_its_strict_lane(bus: Bus, queue: str) -> None:
    head = await lanes.enqueue(bus, queue, "chat", "1", limit=1, expires_at=PAST)
    second = await lanes.enqueue(bus, queue, "chat", "2", expires_in=60_000)
    third = await lanes.enqueue(bus, queue, "chat", "3")
    (job,) = await jobs.claim(bus, queue, 5)  # limit 1: one at a time, the first live one
    assert job.id == second.id and job.group == "chat"
    info = await jobs.get_job(bus, queue, head.id)
    assert info is not None and info.state is JobState.DEAD and info.group == "chat"
    assert await jobs.ack(bus, queue, job.id, job.token) is Outcome.ACKED
    (job,) = await jobs.claim(bus, queue, 5)
    assert job.id == third.id
    await jobs.ack(bus, queue, job.id, job.token)
    (lane,) = await lanes.status(bus, queue, ["chat"])
    assert (lane.depth, lane.in_flight) == (0, 0)
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.lanes, c.expired_total) == (0, 0, 1)
    assert await lanes.status(bus, queue) == []  # an idle lane leaves the index


async def test_a_lane_of_only_expired_jobs_leaves_the_index(bus: Bus, queue: str) -> None:
    await lanes.enqueue_many(bus, queue, "g", ["a", "b"], expires_at=PAST)
    assert await jobs.claim(bus, queue, 3) == []
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.lanes, c.dead, c.expired_total) == (0, 0, 2, 2)
    assert await lanes.status(bus, queue) == []


async def test_a_job_scheduled_past_its_expiry_never_runs(bus: Bus, queue: str) -> None:
    now = await now_ms(bus)
    late = await jobs.enqueue_at(bus, queue, "late", now + 20, expires_at=now + 10)
    ok = await jobs.enqueue_in(bus, queue, "ok", 20, group="g", expires_in=timedelta(minutes=1))
    late_lane = await jobs.enqueue_in(bus, queue, "ll", 20, group="g", expires_in=10)
    await wait_for(lambda: _moved(bus, queue, 1))  # moved, and the two past their expiry swept
    got = await jobs.claim(bus, queue, 5)
    assert [j.id for j in got] == [ok.id]
    for job_id in (late.id, late_lane.id):
        info = await jobs.get_job(bus, queue, job_id)
        assert info is not None and info.state is JobState.DEAD and info.last_error == "expired"


async def _moved(bus: Bus, queue: str, n: int) -> bool:
    await jobs.promote(bus, queue)
    c = await jobs.counts(bus, queue)
    return (c.pending, c.scheduled) == (n, 0)


async def test_an_expiry_holds_for_a_retry_too(bus: Bus, queue: str) -> None:
    """Celery's and arq's rule: the deadline is the job's, so a retry not started by then is not
    run again (the first attempt, started in time, ran)."""
    now = await now_ms(bus)
    a = await jobs.enqueue(bus, queue, "a", expires_at=now + 30)
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.retry(bus, queue, a.id, job.token, 0, 5, "boom") is Outcome.SCHEDULED
    await wait_for(lambda: _past(bus, now + 30))
    await jobs.promote(bus, queue)  # due, and past its expiry: swept
    assert await jobs.claim(bus, queue) == []
    info = await jobs.get_job(bus, queue, a.id)
    assert info is not None and info.state is JobState.DEAD and info.attempts == 1
    assert info.last_error == "expired"


async def _past(bus: Bus, ms: int) -> bool:
    return await now_ms(bus) > ms


async def test_a_datetime_expiry_and_bad_ones(bus: Bus, queue: str) -> None:
    when = datetime(2030, 1, 1, tzinfo=UTC)
    a = await jobs.enqueue(bus, queue, "a", expires_at=when)
    info = await jobs.get_job(bus, queue, a.id)
    assert info is not None and info.expires_ms == int(when.timestamp() * 1000)
    with pytest.raises(ValueError, match="give expires_at or expires_in, not both"):
        await jobs.enqueue(bus, queue, "x", expires_at=when, expires_in=5)
    with pytest.raises(ValueError, match="naive datetime"):
        await jobs.enqueue_many(bus, queue, ["x"], expires_at=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="expires_in"):
        await lanes.enqueue(bus, queue, "g", "x", expires_in=-1)
    with pytest.raises(ValueError, match="expired must be one of"):
        await queues.set_expired(bus, queue, "keep")
    assert (await jobs.counts(bus, queue)).pending == 1  # nothing else was written


def test_the_expiry_argument() -> None:
    assert protocol.expiry_arg() == ""
    assert protocol.expiry_arg(expires_at=5) == "5"
    assert protocol.expiry_arg(expires_in=5.2) == "+6"  # rounded up, as enqueue_in's delay
    assert protocol.expiry_arg(expires_in=timedelta(seconds=1)) == "+1000"
    with pytest.raises(ValueError, match="not both"):
        protocol.expiry_arg(1, 1)


async def test_a_consumer_never_runs_an_expired_job_and_the_metrics_count_it(
    bus: Bus, queue: str
) -> None:
    ran: list[bytes] = []
    await jobs.enqueue(bus, queue, "stale", expires_at=PAST)
    await lanes.enqueue(bus, queue, "g", "stale too", expires_at=PAST, limit=1)
    await jobs.enqueue_in(bus, queue, "stale later", 1, expires_at=PAST)
    await jobs.enqueue(bus, queue, "fresh")
    await lanes.enqueue(bus, queue, "g", "fresh too")

    async def handler(job: Job) -> None:
        ran.append(job.payload)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(Consumer(bus, queue, handler).run)
        nursery.start_soon(Metronome(bus, queue).run)
        await wait_for(lambda: _expired(bus, queue, 3))
        await wait_for(lambda: _done(ran, 2))
        nursery.cancel_scope.cancel()
    assert sorted(ran) == [b"fresh", b"fresh too"]
    registry = CollectorRegistry()
    readings = metrics.QueueReadings(bus, [queue], registry)
    text = (await metrics.render(registry, [readings])).decode()
    totals = {
        s.labels["outcome"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "echomq_queue_jobs_total" and s.labels["queue"] == queue
    }
    assert (totals["expired"], totals["dead"]) == (3, 3)


async def _expired(bus: Bus, queue: str, n: int) -> bool:
    return (await jobs.counts(bus, queue)).expired_total == n


def _done(ran: list[bytes], n: int) -> bool:
    return len(ran) == n


async def test_a_replayed_expired_job_runs(bus: Bus, queue: str) -> None:
    gone = await jobs.enqueue(bus, queue, "old", expires_at=PAST)
    assert await jobs.claim(bus, queue) == []
    assert await jobs.replay(bus, queue, gone.id) is Outcome.REPLAYED
    (job,) = await jobs.claim(bus, queue)
    assert job.id == gone.id and job.payload == b"old"
    info = await jobs.get_job(bus, queue, gone.id)
    assert info is not None and info.expires_ms is None


@pytest.mark.slow
async def test_the_cli_sets_the_setting_and_shows_a_job_s_expiry_and_debounce_key(
    bus: Bus, server_url: str, queue: str
) -> None:
    from tests.echomq_trio.test_cli import echomq

    a = await jobs.enqueue(bus, queue, "a", expires_in=LONG_MS, debounce="k", debounce_ms=LONG_MS)

    async def run(*args: str) -> tuple[int, str]:
        done = await echomq("--url", server_url, *args)
        return done.returncode, done.stdout.decode()

    code, out = await run("show", queue, a.id)
    assert code == 0 and re.search(r"^expires\s+\S+Z \(in .+\)$", out, re.M), out
    assert re.search(r"^debounce\s+k$", out, re.M), out
    code, out = await run("stats", queue)
    assert re.search(r"^expired\s+dead$", out, re.M) and re.search(
        r"^expired_total\s+0$", out, re.M
    )
    assert (await run("expired", queue, "drop")) == (
        0, f"{queue}: a job a claim meets past its expiry is deleted (counted)\n"
    )  # fmt: skip
    assert json.loads((await run("--json", "stats", queue))[1])["control"]["expired"] == "drop"


def test_the_dashboard_shows_a_job_s_expiry_and_debounce_key() -> None:
    info = JobInfo("JOB0000000000a", JobState.SCHEDULED, 0, b"x", None, 2_000, None,
                   expires_ms=61_000, debounce="k")  # fmt: skip
    shown = view.job_view(info, 1_000)
    assert (shown["expires"], shown["debounce"]) == (humane.at(61_000, 1_000), "k")
    plain = view.job_view(attrs.evolve(info, expires_ms=None, debounce=None), 1_000)
    assert (plain["expires"], plain["debounce"]) == ("", "")


async def test_an_expired_job_is_audited_and_its_waiter_told(bus: Bus, queue: str) -> None:
    await audit.enable(bus, queue)
    await audit.create_group(bus, queue, "reader")
    await jobs.keep_results(bus, queue, 60_000)
    kept = await jobs.enqueue(bus, queue, "kept", expires_at=PAST)
    async with trio.open_nursery() as nursery:

        async def wait() -> None:
            with pytest.raises(JobFailed, match="expired"):
                await jobs.result(bus, queue, kept.id, timeout_s=10)

        nursery.start_soon(wait)  # told by the claim's message, or reads the state: either order
        assert await jobs.claim(bus, queue) == []
    await queues.set_expired(bus, queue, "drop")
    dropped = await jobs.enqueue(bus, queue, "dropped", expires_at=PAST)
    assert await jobs.claim(bus, queue) == []
    records = await audit.read(bus, queue, "reader", "c")
    assert [(r.job_id, r.outcome, r.error, r.payload) for r in records] == [
        (kept.id, AuditOutcome.DEAD, "expired", b"kept"),
        (dropped.id, AuditOutcome.DROPPED, "expired", b"dropped"),
    ]
    with pytest.raises(JobNotFound):
        await jobs.result(bus, queue, dropped.id, timeout_s=1)


async def test_the_metronome_sweeps_expired_jobs_nobody_claims(bus: Bus, queue: str) -> None:
    """A queue with no consumer: each promote takes up to its batch of waiting jobs past their
    expiry out (flat, lane, scheduled), as a claim would; jobs leased or finished only leave the
    index, and a job without an expiry is never looked at."""
    now = await now_ms(bus)
    flat = await jobs.enqueue_many(bus, queue, ["a", "b", "c"], expires_at=now + 20)
    lane = await lanes.enqueue(bus, queue, "g", "l", expires_at=now + 20)
    later = await jobs.enqueue_in(bus, queue, "s", 60_000, expires_at=now + 20)
    plain = await jobs.enqueue(bus, queue, "plain")
    running = await jobs.enqueue(bus, queue, "r", job_id=ids.generate("JOB"), expires_in=60_000)
    await wait_for(lambda: _past(bus, now + 20))
    assert (await jobs.promote(bus, queue, batch=2)).moved == 0  # a batch at a time
    assert (await jobs.counts(bus, queue)).expired_total == 2
    await jobs.promote(bus, queue)
    c = await jobs.counts(bus, queue)
    assert (c.expired_total, c.dead, c.scheduled, c.lanes) == (5, 5, 0, 0)
    for job_id in [*(a.id for a in flat), lane.id, later.id]:
        info = await jobs.get_job(bus, queue, job_id)
        assert info is not None and info.state is JobState.DEAD and info.last_error == "expired"
    assert c.pending == 2  # the plain job, and the one that expires later
    assert {j.id for j in await jobs.claim(bus, queue, 5)} == {plain.id, running.id}
    k = bus.keys(queue)
    left = await bus.transport.command("ZRANGE", k.expiries, "0", "-1")
    assert [protocol.as_text(x) for x in left] == [running.id]
    assert await lanes.status(bus, queue) == []
