"""Cancelling jobs (``jobs.cancel``, ``scripts/cancel.lua``): waiting jobs never run, a lane
keeps its order and frees its slot, an active job's holder loses its lease at once and its
consumer cancels the handler, in this process or another, also when the holder is killed right
after; a cancel that races an ack has one winner. On a standalone server and a 3-node cluster
(the script's keys share the queue's slot)."""

from __future__ import annotations

import signal

import pytest
import trio
import trio.lowlevel
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from echomq_trio import (
    Bus,
    Consumer,
    Job,
    Metronome,
    audit,
    events,
    ids,
    jobs,
    lanes,
    open_bus,
    protocol,
    queues,
)
from echomq_trio.errors import ConnectionLost, JobCancelled
from echomq_trio.jobs import Cancelled, JobState, Outcome
from echomq_trio.testing import FaultyTransport, scripts
from tests.echomq_trio.proc import ledger_key
from tests.support import read_line, spawn, wait_for

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


# --- a cancel racing an ack ---------------------------------------------------------------------


@pytest.mark.timeout_s(120)
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ack_wait=st.integers(0, 3), cancel_wait=st.integers(0, 3), lose=st.booleans())
@example(ack_wait=0, cancel_wait=3, lose=False)  # the ack first
@example(ack_wait=3, cancel_wait=0, lose=True)  # the cancel first, the holder's answer lost
async def test_a_cancel_racing_an_ack_has_one_winner(
    server_url: str, ack_wait: int, cancel_wait: int, lose: bool
) -> None:
    # A bus per example (see test_lanes: async fixtures and hypothesis examples).
    async with open_bus(server_url) as bus:
        await _race(bus, "race." + jid(), ack_wait, cancel_wait, lose)


async def _race(bus: Bus, queue: str, ack_wait: int, cancel_wait: int, lose: bool) -> None:
    a, follower = jid(), jid()
    await lanes.enqueue_many(bus, queue, "L", [(a, "a"), (follower, "f")], limit=1)
    (job,) = await jobs.claim(bus, queue, 5)
    faulty = FaultyTransport(bus.transport)
    # The holder's ack may run on the server and its answer be lost: it asks again, as a
    # consumer's settlement does (the lease token makes the second try harmless).
    lost = (
        faulty.fail(scripts("ack"), ConnectionLost("injected"), nth=1, after=True) if lose else None
    )
    holder = Bus(faulty)
    answers: dict[str, object] = {}

    async def ack() -> None:
        for _ in range(ack_wait):
            await trio.lowlevel.checkpoint()
        try:
            answers["ack"] = await jobs.ack(holder, queue, a, job.token)
        except ConnectionLost:
            answers["ack"] = await jobs.ack(holder, queue, a, job.token)

    async def cancel() -> None:
        for _ in range(cancel_wait):
            await trio.lowlevel.checkpoint()
        answers["cancel"] = await jobs.cancel(bus, queue, a)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ack)
        nursery.start_soon(cancel)
    assert lost is None or lost.fired
    info = await jobs.get_job(bus, queue, a)
    if answers["cancel"] is Cancelled.CANCELLED:  # the cancel won: the ack was refused
        assert answers["ack"] is Outcome.STALE
        assert info is not None and info.state is JobState.CANCELLED
    else:  # the ack won (its first try, when its answer was lost): the cancel found no job
        assert answers["cancel"] is Cancelled.NOT_FOUND
        assert answers["ack"] is (Outcome.GONE if lose else Outcome.ACKED)
        assert info is None
    # Either way the lane's one slot was freed once: its next job, and only it, is claimable.
    (nxt,) = await jobs.claim(bus, queue, 5)
    assert nxt.id == follower
    (lane,) = await lanes.status(bus, queue, ["L"])
    assert lane.in_flight == 1 and lane.depth == 0


# --- the holder: a consumer in this process -----------------------------------------------------


async def _ledger(bus: Bus, queue: str, name: str) -> list[str]:
    return [
        x.decode()
        for x in await bus.transport.command("LRANGE", ledger_key(queue, name), "0", "-1")
    ]


@pytest.mark.parametrize("per_lane", [False, True])
async def test_a_running_handler_is_cancelled_and_its_job_settled_by_nobody(
    bus: Bus, queue: str, per_lane: bool
) -> None:
    stopped: list[str] = []
    finished: list[str] = []

    async def handler(job: Job) -> None:
        if job.text == "slow":
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + 5):
                    await trio.sleep(0.01)  # a cleanup step that must finish
                    stopped.append(job.id)
                raise
        finished.append(job.id)

    slow = await lanes.enqueue(bus, queue, "A", "slow", limit=1)
    behind = await lanes.enqueue(bus, queue, "A", "next")  # waits for the lane's one slot
    consumer = Consumer(bus, queue, handler, per_lane=per_lane, cancel_poll_s=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().claimed >= 1)
        assert await jobs.cancel(bus, queue, slow.id, reason="r", by="t") is Cancelled.CANCELLED
        await wait_for(lambda: stopped == [slow.id] and finished == [behind.id])
        await wait_for(lambda: consumer.statistics().acked == 1)
        nursery.cancel_scope.cancel()
    stats = consumer.statistics()
    assert (stats.cancelled, stats.stale, stats.acked, stats.retried, stats.held) == (1, 0, 1, 0, 0)
    info = await jobs.get_job(bus, queue, slow.id)
    assert info is not None and info.state is JobState.CANCELLED
    assert await bus.transport.command("ZCARD", bus.keys(queue).cancel_marks) == 0  # seen: gone


async def test_a_renewal_that_finds_the_lease_gone_stops_the_handler(bus: Bus, queue: str) -> None:
    cancelled = trio.Event()

    async def handler(job: Job) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    a = await jobs.enqueue(bus, queue, "a")
    # The watcher asks once an hour: the renewal (every 100 ms) is what finds the lease gone.
    consumer = Consumer(bus, queue, handler, lease_ms=300, cancel_poll_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().claimed == 1)
        assert await jobs.cancel(bus, queue, a.id) is Cancelled.CANCELLED
        await cancelled.wait()
        await wait_for(lambda: consumer.statistics().held == 0)
        nursery.cancel_scope.cancel()
    stats = consumer.statistics()
    assert (stats.lost_leases, stats.cancelled, stats.stale, stats.released) == (1, 0, 0, 0)


async def test_a_held_job_cancelled_before_it_started_never_starts(bus: Bus, queue: str) -> None:
    first_may_end = trio.Event()
    ran: list[str] = []

    async def handler(job: Job) -> None:
        ran.append(job.text)
        if job.text == "first":
            await first_may_end.wait()

    first = await jobs.enqueue(bus, queue, "first")
    second = await jobs.enqueue(bus, queue, "second")
    # One handler, one job held ahead of it: the second waits in the consumer's channel.
    consumer = Consumer(bus, queue, handler, concurrency=1, prefetch=1, claim_batch=2,
                        lease_ms=300)  # fmt: skip
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: consumer.statistics().held == 2 and ran == ["first"])
        assert await jobs.cancel(bus, queue, second.id) is Cancelled.CANCELLED
        await wait_for(lambda: consumer.statistics().lost_leases == 1)  # a renewal saw it
        first_may_end.set()
        await wait_for(lambda: consumer.statistics().held == 0)
        nursery.cancel_scope.cancel()
    assert ran == ["first"]
    assert await jobs.get_job(bus, queue, first.id) is None  # acked
    stats = consumer.statistics()
    assert (stats.acked, stats.stale, stats.cancelled) == (1, 0, 0)


async def test_nothing_is_asked_while_no_handler_runs(bus: Bus, queue: str) -> None:
    from echomq_trio.testing import FaultyTransport

    faulty = FaultyTransport(bus.transport)
    consumer = Consumer(Bus(faulty), queue, _noop, cancel_poll_s=0.01)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await jobs.enqueue(bus, queue, "a")
        await wait_for(lambda: consumer.statistics().acked == 1)
        idle_from = len(faulty.calls)
        await wait_for(lambda: len([c for c in faulty.calls if c.name == "BLPOP"]) >= 3)
        nursery.cancel_scope.cancel()
    assert not [c for c in faulty.calls[idle_from:] if c.name == "ZMSCORE"]


# --- the holder in another process ---------------------------------------------------------------


async def test_a_handler_in_another_process_is_cancelled_and_never_runs_again(
    bus: Bus, server_url: str, queue: str
) -> None:
    a = await jobs.enqueue(bus, queue, "a")
    async with spawn("sleeper", server_url, queue) as worker:
        assert await read_line(worker) == "ready"
        await wait_for(lambda: _started(bus, queue, a.id), timeout=20)
        assert await jobs.cancel(bus, queue, a.id, by="test") is Cancelled.CANCELLED
        # the handler saw trio.Cancelled and ran its shielded cleanup (within cancel_poll_s)
        await wait_for(lambda: _in_ledger(bus, queue, "cancelled", a.id), timeout=20)
        b = await jobs.enqueue(bus, queue, "b")  # the worker goes on with other jobs
        await wait_for(lambda: _started(bus, queue, b.id), timeout=20)
    assert await _ledger(bus, queue, "started") == [a.id, b.id]  # a ran once
    info = await jobs.get_job(bus, queue, a.id)
    assert info is not None and info.state is JobState.CANCELLED
    assert info.last_error == "cancelled by test"


async def test_a_holder_killed_right_after_the_cancel_never_gets_its_job_back(
    bus: Bus, server_url: str, queue: str
) -> None:
    a = await jobs.enqueue(bus, queue, "a")
    async with spawn("sleeper", server_url, queue, "--lease-ms", "500") as worker:
        assert await read_line(worker) == "ready"
        await wait_for(lambda: _started(bus, queue, a.id), timeout=20)
        (held,) = await jobs.list_jobs(bus, queue, "active")
        assert await jobs.cancel(bus, queue, a.id) is Cancelled.CANCELLED
        worker.send_signal(signal.SIGKILL)
        await worker.wait()
    # A metronome reaps past the dead holder's lease deadline; a second worker serves the queue.
    metronome = Metronome(bus, queue, beat_ms=50)
    async with spawn("sleeper", server_url, queue) as second, trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        assert await read_line(second) == "ready"
        assert held.score_ms is not None
        await wait_for(lambda: _server_past(bus, held.score_ms or 0))
        beats = metronome.statistics().beats
        await wait_for(lambda: metronome.statistics().beats >= beats + 3)
        b = await jobs.enqueue(bus, queue, "b")
        await wait_for(lambda: _started(bus, queue, b.id), timeout=20)
        nursery.cancel_scope.cancel()
    # What must hold: the job stayed cancelled, nothing reaped it, and it never ran again.
    assert metronome.statistics().reaped == 0
    assert await _ledger(bus, queue, "started") == [a.id, b.id]
    info = await jobs.get_job(bus, queue, a.id)
    assert info is not None and info.state is JobState.CANCELLED
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.scheduled, c.dead, c.cancelled) == (0, 0, 0, 1)


async def _in_ledger(bus: Bus, queue: str, name: str, job_id: str) -> bool:
    return job_id in await _ledger(bus, queue, name)


async def _started(bus: Bus, queue: str, job_id: str) -> bool:
    return await _in_ledger(bus, queue, "started", job_id)


async def _server_past(bus: Bus, ms: int) -> bool:
    return await bus.transport.server_time_ms() > ms


async def _noop(job: Job) -> None:
    pass


# --- the command line ----------------------------------------------------------------------------


@pytest.mark.slow
async def test_the_cli_cancels_a_job_in_one_line(standalone_only: str, queue: str) -> None:
    from tests.echomq_trio.test_cli import echomq

    async with open_bus(standalone_only) as bus:
        a = await jobs.enqueue(bus, queue, "a")
        done = await echomq("cancel", queue, a.id, "--reason", "not needed", url=standalone_only)
        assert (done.returncode, done.stdout.decode()) == (0, f"cancelled {a.id}\n")
        info = await jobs.get_job(bus, queue, a.id)
        assert info is not None and info.state is JobState.CANCELLED
        assert info.last_error is not None and info.last_error.endswith(": not needed")
        assert info.last_error.startswith("cancelled by cli")
        again = await echomq("cancel", queue, a.id, "--by", "ops", url=standalone_only)
        assert again.returncode == 1 and again.stdout == b""
        assert (
            again.stderr.decode()
            == f"echomq: job {a.id} is dead or cancelled already; nothing changed\n"
        )
        unknown = await echomq("--json", "cancel", queue, jid(), url=standalone_only)
        assert unknown.returncode == 1 and len(unknown.stderr.decode().splitlines()) == 1
        assert b"never enqueued, or finished" in unknown.stderr
        listed = await echomq("ls", queue, "cancelled", url=standalone_only)
        assert listed.returncode == 0 and a.id in listed.stdout.decode()


async def test_the_cancelled_jobs_kept_have_the_dead_set_s_bounds(bus: Bus, queue: str) -> None:
    from echomq_trio import retention

    await retention.configure(bus, queue, dead_max=2)
    admitted = await jobs.enqueue_many(bus, queue, ["a", "b", "c", "d"])
    for a in admitted:
        assert await jobs.cancel(bus, queue, a.id) is Cancelled.CANCELLED
    kept = [i.id for i in await jobs.list_jobs(bus, queue, "cancelled")]
    assert kept == [a.id for a in admitted[2:]]  # the newest two, their rows with them
    assert await jobs.get_job(bus, queue, admitted[0].id) is None
    c = await jobs.counts(bus, queue)
    assert (c.cancelled, c.cancelled_total) == (2, 4)


def test_the_reply_and_the_audit_archive_know_every_word() -> None:
    from codemojex.audit import OUTCOMES
    from echomq_trio.keys import queue_keys

    k, a = queue_keys("q"), jid()
    call = protocol.cancel_call(k, a, "why", "who")
    assert (call.script, call.keys, call.args) == (
        "cancel",
        (k.cancelled,),
        (k.prefix, a, "why", "who"),
    )
    assert protocol.cancel_marks_command(k, [(a, 7)]) == ["ZMSCORE", k.cancel_marks, f"{a}:7"]
    with pytest.raises(ValueError, match="at least one job"):
        protocol.cancel_marks_command(k, [])
    with pytest.raises(ValueError, match="ZMSCORE answered 0 scores for 1 marks"):
        protocol.cancelled_among([(a, 7)], [])

    assert {protocol.cancel_reply(w.value.encode()) for w in Cancelled} == set(Cancelled)
    with pytest.raises(ValueError, match="not an answer of cancel"):
        protocol.cancel_reply(b"acked")
    assert set(OUTCOMES) == set(audit.AuditOutcome)  # a cancelled notice's record folds too


async def test_a_waiter_on_the_result_of_a_running_job_hears_its_cancel(
    bus: Bus, queue: str
) -> None:
    """While the queue keeps results, whoever waits on a running job's result hears its cancel
    (``JobCancelled`` with the reason), not its own timeout (the cancel publishes the job's end
    on its channel, as an ack does)."""
    await jobs.keep_results(bus, queue, 60_000)
    running = trio.Event()

    async def handler(job: Job) -> None:
        running.set()
        await trio.sleep_forever()

    job_id = (await jobs.enqueue(bus, queue, "x")).id
    consumer = Consumer(bus, queue, handler, concurrency=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await running.wait()
        heard: list[BaseException] = []

        async def wait_result() -> None:
            try:
                await jobs.result(bus, queue, job_id, timeout_s=600)
            except JobCancelled as exc:
                heard.append(exc)

        async with trio.open_nursery() as waiters:
            waiters.start_soon(wait_result)
            await trio.lowlevel.checkpoint()
            assert await jobs.cancel(bus, queue, job_id, reason="no longer wanted") is (
                Cancelled.CANCELLED
            )
        nursery.cancel_scope.cancel()
    assert len(heard) == 1 and "no longer wanted" in str(heard[0])


async def test_a_cancel_under_the_queue_s_cap_lets_a_parked_consumer_claim_at_once(
    bus: Bus, queue: str
) -> None:
    """A queue capped at one job in flight: the second job waits while the first runs; a
    cancel of the first wakes the parked consumer, which claims the second long before its
    beat (a minute) would have."""
    await queues.set_limit(bus, queue, 1)
    started: list[str] = []

    async def handler(job: Job) -> None:
        started.append(job.id)
        await trio.sleep_forever()

    first = (await jobs.enqueue(bus, queue, "1")).id
    consumer = Consumer(bus, queue, handler, concurrency=2, beat_ms=60_000, cancel_poll_s=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await wait_for(lambda: started == [first])
        second = (await jobs.enqueue(bus, queue, "2")).id
        await bus.command("DEL", bus.keys(queue).wake)  # only the cancel may wake it now
        assert await jobs.cancel(bus, queue, first) is Cancelled.CANCELLED
        await wait_for(lambda: started == [first, second], timeout=20)
        nursery.cancel_scope.cancel()
