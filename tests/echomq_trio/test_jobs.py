"""Every transition script's moves and answers, on a standalone server and on a 3-node cluster."""

import pytest
import trio

from echomq_trio import Bus, events, ids, jobs
from echomq_trio.jobs import JobState, Outcome
from tests.support import wait_for

pytestmark = pytest.mark.cluster


def jid() -> str:
    return ids.generate("JOB")


async def test_enqueue_is_idempotent_on_the_id(bus: Bus, queue: str) -> None:
    a = jid()
    assert (await jobs.enqueue(bus, queue, "one", job_id=a)).outcome is Outcome.ENQUEUED
    assert (await jobs.enqueue(bus, queue, "two", job_id=a)).outcome is Outcome.DUPLICATE
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and info.payload == b"one" and info.state is JobState.PENDING
    assert (await jobs.counts(bus, queue)).pending == 1


async def test_an_idempotency_key_admits_once_even_after_the_job_finished(
    bus: Bus, queue: str
) -> None:
    a, b = jid(), jid()

    async def admit(payload: str, job_id: str, key: str) -> Outcome:
        return (await jobs.enqueue(bus, queue, payload, job_id=job_id, key=key)).outcome

    assert await admit("one", a, "fan:1") is Outcome.ENQUEUED
    assert await bus.transport.command("GET", bus.keys(queue).idempotency("fan:1")) == a.encode()
    # While the job is pending, a retry under a fresh id is a duplicate and changes nothing.
    assert await admit("two", b, "fan:1") is Outcome.DUPLICATE
    assert await jobs.get_job(bus, queue, b) is None
    assert (await jobs.counts(bus, queue)).pending == 1
    (job,) = await jobs.claim(bus, queue, 5)
    assert await jobs.ack(bus, queue, job.id, job.token) is Outcome.ACKED
    # The row is gone (the id alone would be admitted again); the key still remembers it.
    assert await admit("one", a, "fan:1") is Outcome.DUPLICATE
    assert await admit("two", b, "fan:1") is Outcome.DUPLICATE
    assert (await jobs.counts(bus, queue)).pending == 0
    assert await admit("two", b, "fan:2") is Outcome.ENQUEUED
    # A live id under a new key is a duplicate by id, and the new key is not taken.
    assert await admit("two", b, "fan:3") is Outcome.DUPLICATE
    assert await bus.transport.command("EXISTS", bus.keys(queue).idempotency("fan:3")) == 0


async def test_an_idempotency_key_is_forgotten_after_its_ttl(bus: Bus, queue: str) -> None:
    a, b = jid(), jid()
    assert (
        await jobs.enqueue(bus, queue, "x", job_id=a, key="k", key_ttl_ms=1500)
    ).outcome is Outcome.ENQUEUED
    ttl = await bus.transport.command("PTTL", bus.keys(queue).idempotency("k"))
    assert 0 < ttl <= 1500
    assert (
        await jobs.enqueue(bus, queue, "y", job_id=b, key="k", key_ttl_ms=1500)
    ).outcome is Outcome.DUPLICATE

    async def admitted() -> bool:
        out = await jobs.enqueue(bus, queue, "y", job_id=b, key="k", key_ttl_ms=1500)
        return out.outcome is Outcome.ENQUEUED

    await wait_for(admitted)
    assert (await jobs.counts(bus, queue)).pending == 2


async def test_enqueue_many_answers_in_order(bus: Bus, queue: str) -> None:
    a, b, c = jid(), jid(), jid()
    await jobs.enqueue(bus, queue, "b", job_id=b)
    out = await jobs.enqueue_many(bus, queue, [(a, "a"), (b, "b"), (c, b"c"), (a, "again")])
    e, d = Outcome.ENQUEUED, Outcome.DUPLICATE
    assert [(o.id, o.outcome) for o in out] == [(a, e), (b, d), (c, e), (a, d)]
    assert await jobs.enqueue_many(bus, queue, []) == []
    claimed = await jobs.claim(bus, queue, 10)
    assert [j.id for j in claimed] == sorted([a, b, c])  # mint order


async def test_claim_is_a_lease_counting_attempts(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    (job,) = await jobs.claim(bus, queue, 5, lease_ms=10_000)
    assert (job.id, job.payload, job.attempts, job.queue) == (a, b"p", 1, queue)
    assert await jobs.claim(bus, queue, 5) == []
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.active) == (0, 1)
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and info.state is JobState.ACTIVE
    assert info.score_ms == job.lease_deadline_ms


async def test_stale_ack_is_refused_and_second_ack_is_gone(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.ack(bus, queue, a, 99) is Outcome.STALE
    assert await jobs.ack(bus, queue, a, job.token) is Outcome.ACKED
    assert await jobs.ack(bus, queue, a, job.token) is Outcome.GONE
    assert await jobs.get_job(bus, queue, a) is None
    assert (await jobs.counts(bus, queue)).completed_total == 1
    # A finished id may be used again.
    assert (await jobs.enqueue(bus, queue, "p", job_id=a)).outcome is Outcome.ENQUEUED


async def test_ack_from_a_worker_whose_job_was_reaped_and_claimed_again_is_refused(
    bus: Bus, queue: str
) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    (first,) = await jobs.claim(bus, queue, lease_ms=30)

    async def reaped() -> bool:
        return (await jobs.reap(bus, queue)).reaped == 1

    await wait_for(reaped)
    (second,) = await jobs.claim(bus, queue, lease_ms=10_000)
    assert second.attempts == first.attempts + 1 == 2
    assert await jobs.ack(bus, queue, a, first.token) is Outcome.STALE
    assert await jobs.retry(bus, queue, a, first.token, 0, 5, "late") is Outcome.STALE
    assert (await jobs.extend(bus, queue, [(a, first.token)], 1000)).lost == (a,)
    assert await jobs.release(bus, queue, [(a, first.token)]) == 0
    assert await jobs.ack(bus, queue, a, second.token) is Outcome.ACKED


async def test_reaped_job_not_yet_reclaimed_can_still_be_acked(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    (job,) = await jobs.claim(bus, queue, lease_ms=20)

    async def reaped() -> bool:
        return (await jobs.reap(bus, queue)).reaped == 1

    await wait_for(reaped)
    assert await jobs.ack(bus, queue, a, job.token) is Outcome.ACKED
    assert await jobs.claim(bus, queue) == []


async def test_retry_schedules_then_buries_at_max_attempts(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    for attempt in (1, 2):
        (job,) = await jobs.claim(bus, queue)
        assert job.attempts == attempt
        assert (
            await jobs.retry(bus, queue, a, job.token, 0, 3, f"boom {attempt}") is Outcome.SCHEDULED
        )
        info = await jobs.get_job(bus, queue, a)
        assert info is not None and info.state is JobState.SCHEDULED
        assert info.last_error == f"boom {attempt}"
        assert (await jobs.promote(bus, queue)).moved == 1
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.retry(bus, queue, a, job.token, 0, 3, "final boom") is Outcome.DEAD
    (dead,) = await jobs.dead_jobs(bus, queue)
    assert (dead.id, dead.attempts, dead.last_error) == (a, 3, "final boom")
    assert dead.state is JobState.DEAD
    c = await jobs.counts(bus, queue)
    assert (c.dead, c.scheduled, c.active, c.pending, c.retried_total, c.dead_total) == (
        1, 0, 0, 0, 2, 1,
    )  # fmt: skip
    assert await jobs.retry(bus, queue, a, job.token, 0, 3, "again") is Outcome.STALE


async def test_max_attempts_one_dies_on_first_failure(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.retry(bus, queue, a, job.token, 1000, 1, "nope") is Outcome.DEAD


async def test_retry_delay_keeps_the_job_scheduled_until_due(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    (job,) = await jobs.claim(bus, queue)
    before = await bus.transport.server_time_ms()
    assert await jobs.retry(bus, queue, a, job.token, 60_000, 5, "later") is Outcome.SCHEDULED
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and info.score_ms is not None and info.score_ms >= before + 60_000
    p = await jobs.promote(bus, queue)
    assert p.moved == 0 and p.next_due_ms == info.score_ms


async def test_replay_a_dead_job(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    assert await jobs.replay(bus, queue, a) is Outcome.NOT_DEAD
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.retry(bus, queue, a, job.token, 0, 1, "broken") is Outcome.DEAD
    assert await jobs.replay(bus, queue, a) is Outcome.REPLAYED
    assert await jobs.replay(bus, queue, jid()) is Outcome.GONE
    (job,) = await jobs.claim(bus, queue)
    assert job.id == a and job.attempts == 1
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and info.last_error == "broken"
    assert (await jobs.counts(bus, queue)).dead == 0


async def test_discard_deletes_a_dead_job_only(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    assert await jobs.discard(bus, queue, a) is Outcome.NOT_DEAD
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.retry(bus, queue, a, job.token, 0, 1, "broken") is Outcome.DEAD
    assert (await jobs.counts(bus, queue)).dead == 1
    assert await jobs.discard(bus, queue, a) is Outcome.DISCARDED
    assert await jobs.get_job(bus, queue, a) is None
    assert (await jobs.counts(bus, queue)).dead == 0
    assert await jobs.discard(bus, queue, a) is Outcome.GONE
    kinds = [e.kind for e in await events.read(bus, queue)]
    assert kinds[-1] == "discarded"


async def test_extend_renews_the_lease(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    (job,) = await jobs.claim(bus, queue, lease_ms=1000)
    ext = await jobs.extend(bus, queue, [(a, job.token)], 60_000)
    assert ext.lost == () and ext.lease_deadline_ms > job.lease_deadline_ms + 50_000
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and info.score_ms == ext.lease_deadline_ms


async def test_release_returns_to_pending_without_spending_an_attempt(bus: Bus, queue: str) -> None:
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    (job,) = await jobs.claim(bus, queue)
    assert await jobs.release(bus, queue, [(a, job.token)]) == 1
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and (info.state, info.attempts) == ("pending", 0)
    (again,) = await jobs.claim(bus, queue)
    assert again.attempts == 1


async def test_reap_moves_only_expired_leases(bus: Bus, queue: str) -> None:
    short, long = jid(), jid()
    await jobs.enqueue_many(bus, queue, [(short, "s"), (long, "l")])
    await jobs.claim(bus, queue, 1, lease_ms=20)
    await jobs.claim(bus, queue, 1, lease_ms=60_000)

    async def reaped() -> bool:
        return (await jobs.reap(bus, queue)).reaped == 1

    await wait_for(reaped)
    assert [i.id for i in await jobs.list_jobs(bus, queue, "pending")] == [short]
    assert [i.id for i in await jobs.list_jobs(bus, queue, "active")] == [long]
    info = await jobs.get_job(bus, queue, short)
    assert info is not None and info.attempts == 1  # the next claim raises it


async def test_enqueue_at_and_in_wait_on_the_schedule(bus: Bus, queue: str) -> None:
    now = await bus.transport.server_time_ms()
    a, b = jid(), jid()
    at = await jobs.enqueue_at(bus, queue, "a", now + 300, job_id=a)
    assert at.outcome is Outcome.SCHEDULED and at.run_at_ms == now + 300
    inn = await jobs.enqueue_in(bus, queue, "b", 60_000, job_id=b)
    assert inn.run_at_ms is not None and inn.run_at_ms >= now + 60_000
    assert (await jobs.enqueue_at(bus, queue, "a", now, job_id=a)).outcome is Outcome.DUPLICATE
    assert await jobs.claim(bus, queue, 10) == []
    p = await jobs.promote(bus, queue)
    assert p.moved == 0 and p.next_due_ms == now + 300
    scheduled = await jobs.list_jobs(bus, queue, "scheduled")
    assert [(s.id, s.score_ms) for s in scheduled] == [(a, now + 300), (b, inn.run_at_ms)]

    async def promoted() -> bool:
        return (await jobs.promote(bus, queue)).moved == 1

    await wait_for(promoted)
    assert await bus.transport.server_time_ms() >= now + 300
    (job,) = await jobs.claim(bus, queue, 10)
    assert job.id == a


async def test_promote_respects_batch(bus: Bus, queue: str) -> None:
    now = await bus.transport.server_time_ms()
    for i in range(5):
        await jobs.enqueue_at(bus, queue, "x", now - 10 + i, job_id=jid())
    assert (await jobs.promote(bus, queue, 2)).moved == 2
    p = await jobs.promote(bus, queue, 10)
    assert p.moved == 3 and p.next_due_ms is None


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda b, q: jobs.enqueue(b, "bad name", "p", job_id=jid()), ValueError),
        (lambda b, q: jobs.enqueue(b, "", "p", job_id=jid()), ValueError),
        (lambda b, q: jobs.enqueue(b, "a{b}", "p", job_id=jid()), ValueError),
        (lambda b, q: jobs.enqueue(b, q, "p", job_id="NOT0KHTOWnGLuC"), ValueError),
        (lambda b, q: jobs.enqueue(b, q, "p", job_id="nope"), ValueError),
        (lambda b, q: jobs.enqueue(b, q, {"a": 1}, job_id=jid()), TypeError),
        (lambda b, q: jobs.enqueue(b, q, "p", job_id=jid(), key="a b"), ValueError),
        (lambda b, q: jobs.enqueue(b, q, "p", job_id=jid(), key=""), ValueError),
        (lambda b, q: jobs.enqueue(b, q, "p", job_id=jid(), key="k" * 129), ValueError),
        (lambda b, q: jobs.enqueue(b, q, "p", job_id=jid(), key="k", key_ttl_ms=0), ValueError),
        (lambda b, q: jobs.enqueue_at(b, q, "p", -1, job_id=jid()), ValueError),
        (lambda b, q: jobs.enqueue_in(b, q, "p", "1.5", job_id=jid()), TypeError),  # a float: ms
        (lambda b, q: jobs.claim(b, q, 0), ValueError),
        (lambda b, q: jobs.claim(b, q, 1, lease_ms=0), ValueError),
        (lambda b, q: jobs.retry(b, q, jid(), 1, 0, 0, "x"), ValueError),
        (lambda b, q: jobs.list_jobs(b, q, "finished"), ValueError),
    ],
)
async def test_bad_input_is_refused_before_any_io(bus: Bus, queue: str, call, error) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error):
        await call(bus, queue)
    c = await jobs.counts(bus, queue)
    assert (c.pending, c.scheduled, c.active, c.dead) == (0, 0, 0, 0)


async def test_one_bad_item_in_a_batch_writes_nothing(bus: Bus, queue: str) -> None:
    with pytest.raises(ValueError):
        await jobs.enqueue_many(bus, queue, [(jid(), "ok"), ("JOBbad", "x")])
    with pytest.raises(TypeError):
        await jobs.enqueue_many(bus, queue, [(jid(), "ok"), (jid(), 3)])  # type: ignore[list-item]
    assert (await jobs.counts(bus, queue)).pending == 0


async def test_concurrent_claims_never_hand_out_a_job_twice(bus: Bus, queue: str) -> None:
    all_ids = [jid() for _ in range(500)]
    await jobs.enqueue_many(bus, queue, [(i, "x") for i in all_ids])
    got: list[str] = []

    async def claimer() -> None:
        while batch := await jobs.claim(bus, queue, 7):
            got.extend(j.id for j in batch)

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(claimer)
    assert sorted(got) == sorted(all_ids)


async def test_audit_records_are_written_by_the_settling_script(bus: Bus, queue: str) -> None:
    from echomq_trio import events

    a, b, c, quiet = jid(), jid(), jid(), jid()
    await jobs.enqueue(bus, queue, "before", job_id=quiet)
    (q,) = await jobs.claim(bus, queue)
    await jobs.ack(bus, queue, quiet, q.token)  # no audit kept yet
    await jobs.set_audit(bus, queue)
    await jobs.enqueue_many(bus, queue, [(a, "pa"), (b, "pb"), (c, "pc")])
    ja, jb, jc = await jobs.claim(bus, queue, 3)
    assert await jobs.ack(bus, queue, a, ja.token, note='{"message_id": 7}') is Outcome.ACKED
    assert await jobs.ack(bus, queue, a, ja.token) is Outcome.GONE  # no second record
    await jobs.retry(bus, queue, b, jb.token, 0, 5, "chat not found", buried=True)
    await jobs.retry(bus, queue, c, jc.token, 0, 1, "boom")
    records = await events.read(bus, queue, stream="audit")
    got = [(r.subject, r.fields["outcome"], r.fields["payload"], r.fields["note"],
            r.fields["error"], r.fields["attempts"]) for r in records]  # fmt: skip
    assert got == [
        (a, "acked", "pa", '{"message_id": 7}', "", "1"),
        (b, "dropped", "pb", "", "chat not found", "1"),
        (c, "dead", "pc", "", "boom", "1"),
    ]
    assert all(int(r.fields["settled_ms"]) > 0 for r in records)


async def test_tokens_are_never_handed_out_twice(bus: Bus, queue: str) -> None:
    # A deferral or release gives the attempt back, but not the token: a settle that arrives
    # late (say, a retried request after a timeout) cannot touch the next claim's lease.
    a = jid()
    await jobs.enqueue(bus, queue, "p", job_id=a)
    (first,) = await jobs.claim(bus, queue)
    assert await jobs.defer(bus, queue, a, first.token, 0, "later") is Outcome.DEFERRED
    await jobs.promote(bus, queue)
    (second,) = await jobs.claim(bus, queue)
    assert (second.attempts, second.token) == (1, first.token + 1)
    assert await jobs.defer(bus, queue, a, first.token, 0, "late duplicate") is Outcome.STALE
    assert await jobs.release(bus, queue, [(a, first.token)]) == 0
    assert await jobs.release(bus, queue, [(a, second.token)]) == 1
    (third,) = await jobs.claim(bus, queue)
    assert (third.attempts, third.token) == (1, second.token + 1)
    assert await jobs.ack(bus, queue, a, second.token) is Outcome.STALE
    assert await jobs.ack(bus, queue, a, third.token) is Outcome.ACKED
