"""Debounce (``enqueue(..., debounce=key, debounce_ms=..., max_wait_ms=...)``,
``scripts/debounce.lua``): while the key's job waits, an enqueue is taken into it (the latest
payload wins, its run time slides, never past the first enqueue + max wait); one job runs per
quiet period; once claimed, the next enqueue starts a new period. On a standalone server and a
3-node cluster; the max-wait bound on a server whose clock the test steps."""

from __future__ import annotations

import pytest
import trio

from echomq_trio import Bus, Consumer, Job, Metronome, ids, jobs, lanes, open_bus, protocol
from echomq_trio.jobs import Admitted, JobState, Outcome
from echomq_trio.keys import queue_keys
from echomq_trio.sequence import Seq
from tests.support import SteppingServer, wait_for

pytestmark = pytest.mark.cluster

LONG_MS = 3_600_000  # a quiet period that does not end during a test


async def test_a_burst_from_many_tasks_runs_one_job_with_the_last_payload(
    bus: Bus, queue: str
) -> None:
    """1,000 debounced enqueues on one key from 10 tasks: every answer names one job, and the
    one job that runs has the payload of the enqueue the server took last (the one that answers
    ``absorbed`` 1,000)."""
    answers: list[tuple[Admitted, bytes]] = []

    async def producer(task: int) -> None:
        for i in range(100):
            payload = f"{task}:{i}".encode()
            answers.append((await jobs.enqueue(bus, queue, payload, debounce="k", debounce_ms=50),
                            payload))  # fmt: skip

    async with trio.open_nursery() as nursery:  # no metronome yet: nothing can be promoted
        for task in range(10):
            nursery.start_soon(producer, task)
    assert len(answers) == 1000
    assert len({a.id for a, _ in answers}) == 1
    assert sorted(a.absorbed for a, _ in answers) == list(range(1, 1001))
    firsts = [a for a, _ in answers if a.outcome is Outcome.SCHEDULED]
    assert len(firsts) == 1 and firsts[0].absorbed == 1
    last = max(answers, key=lambda answer: answer[0].absorbed)[1]
    info = await jobs.get_job(bus, queue, firsts[0].id)
    assert info is not None and info.payload == last and info.debounce == "k"

    ran: list[bytes] = []

    async def handler(job: Job) -> None:
        ran.append(job.payload)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(Consumer(bus, queue, handler).run)
        nursery.start_soon(Metronome(bus, queue).run)
        await wait_for(lambda: _completed(bus, queue, 1))
        nursery.cancel_scope.cancel()
    assert ran == [last]
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.scheduled, c.active, c.completed_total) == (0, 0, 0, 1)


async def _completed(bus: Bus, queue: str, n: int) -> bool:
    return (await jobs.counts(bus, queue)).completed_total == n


async def _promoted(bus: Bus, queue: str) -> bool:
    await jobs.promote(bus, queue)
    return (await jobs.counts(bus, queue)).scheduled == 0


async def test_a_due_job_takes_enqueues_in_until_it_is_claimed(bus: Bus, queue: str) -> None:
    first = await jobs.enqueue(bus, queue, "1", debounce="k", debounce_ms=1)
    assert (first.outcome, first.absorbed) == (Outcome.SCHEDULED, 1)
    await wait_for(lambda: _promoted(bus, queue))  # due, pending, not yet claimed
    again = await jobs.enqueue(bus, queue, "2", debounce="k", debounce_ms=LONG_MS)
    assert (again.outcome, again.id, again.absorbed) == (Outcome.DEBOUNCED, first.id, 2)
    (job,) = await jobs.claim(bus, queue)  # it stayed due: its place kept
    assert (job.id, job.payload) == (first.id, b"2")
    # claimed: the next enqueue starts a new period, with a job of its own
    fresh = await jobs.enqueue(bus, queue, "3", debounce="k", debounce_ms=LONG_MS)
    assert fresh.outcome is Outcome.SCHEDULED and fresh.id != first.id and fresh.absorbed == 1
    assert await jobs.ack(bus, queue, job.id, job.token) is Outcome.ACKED
    later = await jobs.enqueue(bus, queue, "4", debounce="k", debounce_ms=LONG_MS)
    assert (later.outcome, later.id) == (Outcome.DEBOUNCED, fresh.id)


async def test_a_job_that_left_its_wait_starts_a_new_period(bus: Bus, queue: str) -> None:
    """Deleted, cancelled, or claimed and handed back: the next enqueue is a new period."""
    a = await jobs.enqueue(bus, queue, "a", debounce="k", debounce_ms=LONG_MS)
    assert await jobs.delete(bus, queue, a.id) is Outcome.DELETED
    b = await jobs.enqueue(bus, queue, "b", debounce="k", debounce_ms=LONG_MS)
    assert b.outcome is Outcome.SCHEDULED and b.id != a.id
    await jobs.cancel(bus, queue, b.id)
    c = await jobs.enqueue(bus, queue, "c", debounce="k", debounce_ms=1)
    assert c.outcome is Outcome.SCHEDULED and c.id != b.id
    await wait_for(lambda: _promoted(bus, queue))
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.release(bus, queue, [(job.id, job.token)]) == 1  # pending again, claimed
    d = await jobs.enqueue(bus, queue, "d", debounce="k", debounce_ms=LONG_MS)
    assert d.outcome is Outcome.SCHEDULED and d.id != c.id


async def test_keys_are_apart_and_the_latest_options_win(bus: Bus, queue: str) -> None:
    a = await jobs.enqueue(bus, queue, "a", debounce="a", debounce_ms=LONG_MS, timeout_ms=5)
    b = await jobs.enqueue(bus, queue, "b", debounce="b", debounce_ms=LONG_MS)
    assert a.id != b.id and (a.outcome, b.outcome) == (Outcome.SCHEDULED, Outcome.SCHEDULED)
    again = await jobs.enqueue(bus, queue, "a2", debounce="a", debounce_ms=LONG_MS,
                               expires_in=LONG_MS)  # fmt: skip
    assert again.id == a.id
    info = await jobs.get_job(bus, queue, a.id)
    assert info is not None and info.payload == b"a2" and info.expires_ms is not None
    assert info.state is JobState.SCHEDULED and info.score_ms == again.run_at_ms
    assert (await jobs.counts(bus, queue)).scheduled == 2


async def test_the_latest_expiry_keeps_its_kind_a_length_or_a_time(bus: Bus, queue: str) -> None:
    """An expiry given as a length keeps its length in the row (``expires_in_ms``: a step of the
    clock moves it), one given as a time does not; the latest enqueue's kind wins."""
    row = bus.keys(queue).job

    async def enqueue(**expiry: int) -> list[bytes | None]:
        got = await jobs.enqueue(bus, queue, "x", debounce="k", debounce_ms=LONG_MS, **expiry)
        fields = await bus.command("HMGET", row(got.id), "expires_ms", "expires_in_ms")
        return [None if f is None else bytes(f) for f in fields]

    assert (await enqueue(expires_in=LONG_MS))[1] == str(LONG_MS).encode()
    now = await bus.transport.server_time_ms()
    assert await enqueue(expires_at=now + LONG_MS) == [str(now + LONG_MS).encode(), None]
    assert (await enqueue(expires_in=7_000))[1] == b"7000"
    assert await enqueue() == [None, None]


async def test_a_lane_job_is_debounced_then_joins_its_lane(bus: Bus, queue: str) -> None:
    first = await lanes.enqueue(bus, queue, "chat", "1", debounce="k", debounce_ms=LONG_MS)
    again = await lanes.enqueue(bus, queue, "chat", "2", debounce="k", debounce_ms=1,
                                max_wait_ms=1)  # fmt: skip
    assert (again.outcome, again.id) == (Outcome.DEBOUNCED, first.id)
    await wait_for(lambda: _promoted(bus, queue))
    (job,) = await jobs.claim(bus, queue)
    assert (job.id, job.group, job.payload) == (first.id, "chat", b"2")


async def test_combinations_that_make_no_sense_are_refused_before_any_io(
    bus: Bus, queue: str
) -> None:
    refused = [
        (dict(debounce="k"), "debounce needs debounce_ms"),
        (dict(debounce_ms=5), "need a debounce key"),
        (dict(max_wait_ms=5), "need a debounce key"),
        (dict(debounce="k", debounce_ms=5, job_id=ids.generate("JOB")), "takes no job_id"),
        (dict(debounce="k", debounce_ms=5, key="once"), "takes no idempotency key"),
        (dict(debounce="k", debounce_ms=0), "debounce_ms must be >= 1"),
        (dict(debounce="k", debounce_ms=5, max_wait_ms=0), "max_wait_ms must be >= 1"),
        (dict(debounce="a b", debounce_ms=5), "debounce key must not contain"),
    ]
    for kwargs, error in refused:
        with pytest.raises(ValueError, match=error):
            await jobs.enqueue(bus, queue, "x", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="takes no idempotency key or seq"):
        await lanes.enqueue(bus, queue, "g", "x", debounce="k", debounce_ms=5, seq=Seq("s", 1))
    with pytest.raises(ValueError, match="takes no limit"):
        await lanes.enqueue(bus, queue, "g", "x", debounce="k", debounce_ms=5, limit=1)
    assert not (await jobs.counts(bus, queue)).exists  # nothing was written


@pytest.mark.timeout_s(60)
async def test_max_wait_bounds_the_slide_under_a_steady_stream(
    stepping_server: SteppingServer,
) -> None:
    """Enqueues 50 s apart with a quiet period of 60 s would never let the job run; the bound of
    150 s from the first enqueue caps its run time (server clock, stepped by the test)."""
    queue = "t.debounce.bound"
    async with open_bus(stepping_server.url) as bus:

        async def send(payload: str) -> Admitted:
            return await jobs.enqueue(bus, queue, payload, debounce="k", debounce_ms=60_000,
                                      max_wait_ms=150_000)  # fmt: skip

        first = await send("1")
        assert first.run_at_ms is not None and first.outcome is Outcome.SCHEDULED
        bound = first.run_at_ms - 60_000 + 150_000  # the first enqueue's server time + max wait
        await stepping_server.step(50)
        slid = await send("2")
        assert slid.outcome is Outcome.DEBOUNCED and slid.run_at_ms is not None
        assert first.run_at_ms < slid.run_at_ms < bound  # slid, within the bound
        await stepping_server.step(50)
        capped = await send("3")
        assert (capped.id, capped.run_at_ms) == (first.id, bound)  # now + 60 s is past it
        await stepping_server.step(50)  # past the bound: due, though enqueues keep coming
        due = await send("4")
        assert (due.id, due.run_at_ms, due.absorbed) == (first.id, bound, 4)
        assert (await jobs.promote(bus, queue)).moved == 1
        (job,) = await jobs.claim(bus, queue)
        assert (job.id, job.payload) == (first.id, b"4")
        fresh = await send("5")  # the stream goes on: a new period
        assert fresh.outcome is Outcome.SCHEDULED and fresh.id != first.id


def test_the_debounce_call_and_its_reply() -> None:
    k = queue_keys("q")
    job_id = ids.generate("JOB")
    call = protocol.debounce_call(k, "key", (job_id, "p"), 1024, debounce_ms=5, group="g",
                                  expires=protocol.expiry_arg(expires_in=7))  # fmt: skip
    assert call.script == "debounce" and call.keys == (k.schedule,)
    assert call.args == (k.prefix, "key", "5", "", str(protocol.DEBOUNCE_KEEP_MS), "g", "", "+7",
                         job_id, b"p", "")  # fmt: skip
    ranked = protocol.debounce_call(k, "key", (job_id, "p"), 1024, debounce_ms=5, priority=3)
    assert ranked.args[-1] == "3"
    assert call.decode([b"debounced", job_id.encode(), 123, 4]) == Admitted(
        job_id, Outcome.DEBOUNCED, 123, 4
    )
    assert call.decode([b"duplicate", job_id.encode(), 0, 0]) == Admitted(
        job_id, Outcome.DUPLICATE, None, 0
    )
    with pytest.raises(ValueError, match="debounce answered 2 fields"):
        call.decode([b"scheduled", job_id.encode()])
    assert protocol.check_debounce(None, None, None) is None
    assert protocol.check_debounce("k", 5, None) == 5


async def test_a_debounced_job_keeps_its_first_enqueues_priority(bus: Bus, queue: str) -> None:
    """A new period's priority is its job's, kept in the row, so the job joins pending at its
    priority's place when due; an enqueue taken into it leaves the priority as it was."""
    plain = await jobs.enqueue(bus, queue, b"plain")
    first = await jobs.enqueue(bus, queue, b"1", debounce="k", debounce_ms=1, priority=5)
    taken = await jobs.enqueue(bus, queue, b"2", debounce="k", debounce_ms=1, priority=-5)
    assert taken.outcome is Outcome.DEBOUNCED and taken.id == first.id
    info = await jobs.get_job(bus, queue, first.id)
    assert info is not None and info.priority == 5 and info.payload == b"2"
    await wait_for(lambda: _promoted(bus, queue))
    claimed = await jobs.claim(bus, queue, batch=2)
    assert [j.id for j in claimed] == [first.id, plain.id]


async def _promoted(bus: Bus, queue: str) -> bool:
    return (await jobs.promote(bus, queue)).moved == 1
