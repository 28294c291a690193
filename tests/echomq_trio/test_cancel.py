"""Cancelling jobs (``jobs.cancel``, ``scripts/cancel.lua``): waiting jobs never run, a lane
keeps its order and frees its slot, an active job's holder loses its lease at once and its
consumer cancels the handler, in this process or another, also when the holder is killed right
after; a cancel that races an ack has one winner. On a standalone server and a 3-node cluster
(the script's keys share the queue's slot)."""

from __future__ import annotations

import pytest
import trio

from echomq_trio import Bus, audit, events, ids, jobs, lanes, protocol
from echomq_trio.jobs import Cancelled, JobState, Outcome

pytestmark = pytest.mark.cluster


def jid() -> str:
    return ids.generate("JOB")


async def test_a_pending_job_is_cancelled_and_never_runs(bus: Bus, queue: str) -> None:
    a, b = jid(), jid()
    await jobs.enqueue_many(bus, queue, [(a, "a"), (b, "b")])
    assert await jobs.cancel(bus, queue, a, reason="not wanted", by="ops") is Cancelled.CANCELLED
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and info.state is JobState.CANCELLED
    assert info.last_error == "cancelled by ops: not wanted" and info.score_ms is not None
    (job,) = await jobs.claim(bus, queue, 10)
    assert job.id == b
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active, c.cancelled, c.cancelled_total) == (0, 1, 1, 1)
    assert [i.id for i in await jobs.list_jobs(bus, queue, "cancelled")] == [a]
    # cancelled once: a second cancel changes nothing
    assert await jobs.cancel(bus, queue, a) is Cancelled.ALREADY_DONE
    assert (await jobs.counts(bus, queue)).cancelled_total == 1


async def test_a_scheduled_job_and_a_waiting_retry_are_cancelled(bus: Bus, queue: str) -> None:
    later = await jobs.enqueue_in(bus, queue, "later", 60_000)
    assert await jobs.cancel(bus, queue, later.id) is Cancelled.CANCELLED
    retried = await jobs.enqueue(bus, queue, "r")
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.retry(bus, queue, job.id, job.token, 60_000, 5, "boom") is Outcome.SCHEDULED
    assert await jobs.cancel(bus, queue, retried.id) is Cancelled.CANCELLED
    c = await jobs.counts(bus, queue)
    assert (c.scheduled, c.pending, c.cancelled) == (0, 0, 2)
    assert (await jobs.promote(bus, queue)).moved == 0


async def test_unknown_dead_and_acked_jobs(bus: Bus, queue: str) -> None:
    assert await jobs.cancel(bus, queue, jid()) is Cancelled.NOT_FOUND
    dying = await jobs.enqueue(bus, queue, "d")
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.retry(bus, queue, dying.id, job.token, 0, 1, "boom") is Outcome.DEAD
    assert await jobs.cancel(bus, queue, dying.id) is Cancelled.ALREADY_DONE
    info = await jobs.get_job(bus, queue, dying.id)
    assert info is not None and info.state is JobState.DEAD and info.last_error == "boom"
    # An acked job's row is deleted: the cancel finds nothing (and changes nothing).
    done = await jobs.enqueue(bus, queue, "x")
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.ack(bus, queue, done.id, job.token) is Outcome.ACKED
    assert await jobs.cancel(bus, queue, done.id) is Cancelled.NOT_FOUND
    assert (await jobs.counts(bus, queue)).cancelled == 0


async def test_an_active_job_loses_its_lease_at_once(bus: Bus, queue: str) -> None:
    a = await jobs.enqueue(bus, queue, "a")
    (job,) = await jobs.claim(bus, queue, lease_ms=1)
    assert await jobs.cancel(bus, queue, a.id, reason="r") is Cancelled.CANCELLED
    # The holder's every move is refused, and the reaper never returns it (its lease expired).
    assert await jobs.ack(bus, queue, a.id, job.token) is Outcome.STALE
    assert await jobs.retry(bus, queue, a.id, job.token, 0, 5, "e") is Outcome.STALE
    assert await jobs.defer(bus, queue, a.id, job.token, 0) is Outcome.STALE
    assert (await jobs.extend(bus, queue, [(a.id, job.token)], 1000)).lost == (a.id,)
    assert await jobs.release(bus, queue, [(a.id, job.token)]) == 0
    await trio.sleep(0.01)  # the 1 ms lease is past: a reap would take it, were it active
    assert (await jobs.reap(bus, queue)).reaped == 0
    assert await jobs.claim(bus, queue) == []
    info = await jobs.get_job(bus, queue, a.id)
    assert info is not None and info.state is JobState.CANCELLED
    # its holder's mark: one ZMSCORE for every job it runs
    k = bus.keys(queue)
    other = (jid(), 1)
    raw = await bus.transport.command(*protocol.cancel_marks_command(k, [other, (a.id, job.token)]))
    assert protocol.cancelled_among([other, (a.id, job.token)], raw) == [1]
    # and it can be discarded like a dead job
    assert await jobs.discard(bus, queue, a.id) is Outcome.DISCARDED
    assert (await jobs.counts(bus, queue)).cancelled == 0


async def test_a_lane_keeps_its_order_and_frees_its_slot(bus: Bus, queue: str) -> None:
    a1, a2, a3 = jid(), jid(), jid()
    await lanes.enqueue_many(bus, queue, "A", [(a1, "1"), (a2, "2"), (a3, "3")], limit=1)
    assert await jobs.cancel(bus, queue, a2) is Cancelled.CANCELLED
    order = []
    for _ in range(2):
        (job,) = await jobs.claim(bus, queue, 5)
        order.append(job.id)
        assert await jobs.ack(bus, queue, job.id, job.token) is Outcome.ACKED
    assert order == [a1, a3]
    assert await jobs.claim(bus, queue, 5) == []
    # An active lane job cancelled frees its lane's one slot: the next job can be claimed.
    b1, b2 = jid(), jid()
    await lanes.enqueue_many(bus, queue, "B", [(b1, "1"), (b2, "2")], limit=1)
    (job,) = await jobs.claim(bus, queue, 5)
    assert job.id == b1 and await jobs.claim(bus, queue, 5) == []
    assert await jobs.cancel(bus, queue, b1) is Cancelled.CANCELLED
    (job,) = await jobs.claim(bus, queue, 5)
    assert job.id == b2
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active, c.cancelled, c.lanes) == (0, 1, 2, 0)


async def test_the_event_and_the_audit_say_who_and_why(bus: Bus, queue: str) -> None:
    await audit.enable(bus, queue)
    a = await jobs.enqueue(bus, queue, "payload")
    assert len(await jobs.claim(bus, queue)) == 1
    assert await jobs.cancel(bus, queue, a.id, reason="user asked", by="alice") is (
        Cancelled.CANCELLED
    )
    await audit.create_group(bus, queue, "g")
    (record,) = await audit.read(bus, queue, "g", "c")
    assert (record.job_id, record.outcome, record.note, record.error, record.payload) == (
        a.id, audit.AuditOutcome.CANCELLED, "alice", "user asked", b"payload",
    )  # fmt: skip
    (event,) = [e for e in await events.read(bus, queue) if e.kind == "cancelled"]
    assert event.fields["by"] == "alice" and event.fields["reason"] == "user asked"
    assert event.fields["from"] == "active"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"job_id": "nope"}, ValueError),
        ({"job_id": 5}, ValueError),
        ({"reason": 5}, TypeError),
        ({"by": "x" * 1001}, ValueError),
    ],
)
async def test_bad_input_is_refused_before_any_io(bus: Bus, queue: str, kwargs, error) -> None:  # type: ignore[no-untyped-def]
    args = {"job_id": jid(), **kwargs}
    with pytest.raises(error) as caught:
        await jobs.cancel(bus, queue, **args)
    assert "\n" not in str(caught.value)
    assert not (await jobs.counts(bus, queue)).exists
