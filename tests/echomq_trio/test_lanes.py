"""Fair lanes: round-robin across lanes, FIFO within one, limits, weights, pauses, and strict
order in limit-1 lanes across retries and deferrals."""

import random

import pytest
import trio
import trio.lowlevel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from echomq_trio import (
    Bus,
    Consumer,
    DeferIn,
    Fixed,
    Job,
    Metronome,
    RetryIn,
    ids,
    jobs,
    lanes,
    open_bus,
    protocol,
    sequence,
)
from echomq_trio.jobs import Admitted, Outcome
from echomq_trio.lanes import Seq
from tests.support import wait_for

pytestmark = pytest.mark.cluster


def jid() -> str:
    return ids.generate("JOB")


async def test_round_robin_across_lanes_fifo_within(bus: Bus, queue: str) -> None:
    a1, a2, b1 = jid(), jid(), jid()
    await lanes.enqueue(bus, queue, "A", "a1", job_id=a1)
    await lanes.enqueue(bus, queue, "A", "a2", job_id=a2)
    await lanes.enqueue(bus, queue, "B", "b1", job_id=b1)
    claimed = [j for _ in range(3) for j in await jobs.claim(bus, queue, 1)]
    assert [j.id for j in claimed] == [a1, b1, a2]
    assert [j.group for j in claimed] == ["A", "B", "A"]


async def test_an_idempotency_key_admits_a_lane_job_once_until_its_ttl(
    bus: Bus, queue: str
) -> None:
    a, b, c = jid(), jid(), jid()
    out = await lanes.enqueue(bus, queue, "A", "a", job_id=a, limit=1, key="d:1", key_ttl_ms=60_000)
    assert out == Admitted(a, Outcome.ENQUEUED)
    assert (
        await lanes.enqueue(bus, queue, "A", "b", job_id=b, limit=1, key="d:1")
    ).outcome is Outcome.DUPLICATE
    assert [j.id for j in await lanes.jobs(bus, queue, "A")] == [a]
    (job,) = await jobs.claim(bus, queue, 5)
    assert await jobs.ack(bus, queue, job.id, job.token) is Outcome.ACKED
    assert (
        await lanes.enqueue(bus, queue, "A", "b", job_id=b, limit=1, key="d:1")
    ).outcome is Outcome.DUPLICATE
    assert (
        await lanes.enqueue(bus, queue, "A", "a", job_id=a, limit=1, key="d:1")
    ).outcome is Outcome.DUPLICATE
    assert await lanes.jobs(bus, queue, "A") == []
    # Keys belong to the queue, not the lane; a short TTL lets the key be used again.
    assert (
        await lanes.enqueue(bus, queue, "B", "c", job_id=c, key="d:2", key_ttl_ms=1000)
    ).outcome is Outcome.ENQUEUED
    assert (
        await lanes.enqueue(bus, queue, "A", "b", job_id=b, key="d:2")
    ).outcome is Outcome.DUPLICATE

    async def admitted() -> bool:
        return (
            await lanes.enqueue(bus, queue, "A", "b", job_id=b, key="d:2")
        ).outcome is Outcome.ENQUEUED

    await wait_for(admitted)
    assert [j.id for j in await lanes.jobs(bus, queue, "A")] == [b]
    with pytest.raises(ValueError, match="idempotency key"):
        await lanes.enqueue(bus, queue, "A", "x", job_id=jid(), key="has space")


async def _remembered(bus: Bus, queue: str, scope: str) -> set[int]:
    raw = await bus.transport.command("SMEMBERS", bus.keys(queue).seq(scope))
    return {int(protocol.as_text(m)) for m in raw}


async def test_a_seq_admits_each_number_once_within_its_window(bus: Bus, queue: str) -> None:
    async def send(n: int, lane: str = "A", **kw: int) -> Outcome:
        seq = Seq("chat:7", n, window=4, **kw)
        return (await lanes.enqueue(bus, queue, lane, f"u{n}", limit=1, seq=seq)).outcome

    # Out of order within the window: each admitted once, in the order they came.
    assert [await send(n) for n in (10, 12, 11)] == [Outcome.ENQUEUED] * 3
    assert [await send(n) for n in (12, 10, 11)] == [Outcome.DUPLICATE] * 3
    assert [j.payload for j in await lanes.jobs(bus, queue, "A")] == [b"u10", b"u12", b"u11"]
    # A number stays refused after its job is done, and in any lane (a scope is the queue's).
    for job in await jobs.claim(bus, queue, 10):
        await jobs.ack(bus, queue, job.id, job.token)
    assert await send(12, "B") is Outcome.DUPLICATE
    # The window holds the four highest numbers; below it is refused, above it admitted.
    assert [await send(n) for n in (14, 13)] == [Outcome.ENQUEUED] * 2
    assert await _remembered(bus, queue, "chat:7") == {11, 12, 13, 14}
    assert await send(9) is Outcome.DUPLICATE
    assert await send(15) is Outcome.ENQUEUED
    assert await _remembered(bus, queue, "chat:7") == {12, 13, 14, 15}
    assert await send(11) is Outcome.DUPLICATE  # dropped from the window, still refused
    # The state expires after the scope's TTL, renewed by each admission.
    ttl = await bus.transport.command("PTTL", bus.keys(queue).seq("chat:7"))
    assert 0 < int(ttl) <= Seq("x", 1).ttl_ms
    assert await send(16, ttl_ms=1000) is Outcome.ENQUEUED

    async def forgotten() -> bool:
        return bool(await bus.transport.command("EXISTS", bus.keys(queue).seq("chat:7")) == 0)

    await wait_for(forgotten)
    assert await send(12) is Outcome.ENQUEUED  # a quiet scope starts afresh


async def test_the_seq_script_keeps_the_model_s_rule(bus: Bus, queue: str) -> None:
    """Two hundred numbers, many repeated and out of order, against ``sequence.admit``: the same
    answer for each, and the same numbers remembered after each."""
    rng = random.Random(23)
    remembered: frozenset[int] = frozenset()
    for i in range(200):
        n, window = rng.randrange(0, 120) + i // 2, rng.choice((3, 5, 5, 5, 8))
        out = await lanes.enqueue(bus, queue, "A", "x", seq=Seq("s", n, window=window))
        ok, remembered = sequence.admit(remembered, n, window)
        assert out.outcome is (Outcome.ENQUEUED if ok else Outcome.DUPLICATE), (i, n)
        assert await _remembered(bus, queue, "s") == remembered, (i, n)


async def test_fairness_fifty_small_lanes_beside_a_flood(bus: Bus, queue: str) -> None:
    await lanes.enqueue_many(bus, queue, "flood", [(jid(), "f") for _ in range(1000)])
    small = [f"chat{i}" for i in range(50)]
    for g in small:
        await lanes.enqueue(bus, queue, g, "s", job_id=jid())
    first_100 = []
    while len(first_100) < 100:
        first_100 += await jobs.claim(bus, queue, 7)
    served = {j.group for j in first_100[:100]}
    assert set(small) <= served


async def test_lanes_and_flat_pending_are_served_together(bus: Bus, queue: str) -> None:
    flat = [jid() for _ in range(3)]
    await jobs.enqueue_many(bus, queue, [(i, "x") for i in flat])
    lane = [jid() for _ in range(3)]
    await lanes.enqueue_many(bus, queue, "L", [(i, "y") for i in lane])
    got = await jobs.claim(bus, queue, 4)
    assert {j.id for j in got} & set(flat) and {j.id for j in got} & set(lane)
    got += await jobs.claim(bus, queue, 10)
    assert sorted(j.id for j in got) == sorted(flat + lane)


async def test_limit_caps_jobs_in_flight_per_lane(bus: Bus, queue: str) -> None:
    await lanes.enqueue_many(bus, queue, "L", [(jid(), "x") for _ in range(5)], limit=2)
    await lanes.enqueue(bus, queue, "M", "m", job_id=jid())
    first = await jobs.claim(bus, queue, 10)
    assert sorted(j.group or "" for j in first) == ["L", "L", "M"]
    (status,) = await lanes.status(bus, queue, ["L"])
    assert (status.depth, status.in_flight, status.limit, status.on_ring) == (3, 2, 2, False)
    one = next(j for j in first if j.group == "L")
    assert await jobs.ack(bus, queue, one.id, one.token) is Outcome.ACKED
    nxt = await jobs.claim(bus, queue, 10)
    assert [j.group for j in nxt] == ["L"]


async def test_weight_gives_more_per_turn(bus: Bus, queue: str) -> None:
    await lanes.enqueue_many(bus, queue, "heavy", [(jid(), "h") for _ in range(6)])
    await lanes.enqueue_many(bus, queue, "light", [(jid(), "l") for _ in range(6)])
    assert await lanes.configure(bus, queue, "heavy", weight=3) == (None, 3)
    got = await jobs.claim(bus, queue, 8)
    assert [j.group for j in got] == ["heavy"] * 3 + ["light"] + ["heavy"] * 3 + ["light"]


async def test_pause_and_resume(bus: Bus, queue: str) -> None:
    a, b = jid(), jid()
    await lanes.enqueue(bus, queue, "A", "a", job_id=a)
    await lanes.enqueue(bus, queue, "B", "b", job_id=b)
    await lanes.pause(bus, queue, "A")
    assert [j.id for j in await jobs.claim(bus, queue, 10)] == [b]
    (st_a,) = await lanes.status(bus, queue, ["A"])
    assert st_a.paused and st_a.depth == 1
    assert await lanes.resume(bus, queue, "A") is True
    assert [j.id for j in await jobs.claim(bus, queue, 10)] == [a]
    assert await lanes.resume(bus, queue, "A") is False


async def test_pause_until_comes_back_by_itself(bus: Bus, queue: str) -> None:
    a = jid()
    await lanes.enqueue(bus, queue, "-1001234567890", "a", job_id=a)  # a Telegram group chat id
    now = await bus.transport.server_time_ms()
    until = await lanes.pause_until(bus, queue, "-1001234567890", now + 400)
    assert until == now + 400
    # A wait only ever extends.
    assert await lanes.pause_until(bus, queue, "-1001234567890", now + 100) == now + 400
    assert await jobs.claim(bus, queue, 10) == []
    seen: dict[str, int] = {}

    async def handler(job: Job) -> None:
        seen[job.id] = await bus.transport.server_time_ms()

    async with trio.open_nursery() as nursery:
        await nursery.start(Consumer(bus, queue, handler).run)
        await nursery.start(Metronome(bus, queue, beat_ms=5_000).run)
        await wait_for(lambda: a in seen)
        nursery.cancel_scope.cancel()
    assert seen[a] >= now + 400


async def test_retried_lane_job_returns_to_its_lane_and_is_claimed_again(
    bus: Bus, queue: str
) -> None:
    # The original's open bug: a retried or deferred lane job went to the flat set and stalled.
    a, b = jid(), jid()
    await lanes.enqueue(bus, queue, "chat", "a", job_id=a)
    await lanes.enqueue(bus, queue, "other", "b", job_id=b)
    (job,) = await jobs.claim(bus, queue, 1)
    assert await jobs.retry(bus, queue, a, job.token, 0, 5, "flaky") is Outcome.SCHEDULED
    await jobs.promote(bus, queue)
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and info.group == "chat"
    assert [j.id for j in await lanes.jobs(bus, queue, "chat")] == [a]
    got = await jobs.claim(bus, queue, 10)
    assert sorted(j.id for j in got) == sorted([a, b])
    again = next(j for j in got if j.id == a)
    assert again.attempts == 2 and again.group == "chat"
    assert await jobs.defer(bus, queue, a, again.token, 0, "no token") is Outcome.DEFERRED
    (third,) = await jobs.claim(bus, queue, 10)
    assert third.id == a and third.attempts == 2  # a deferral spends no attempt


async def test_strict_lane_retry_holds_the_lane_and_keeps_the_head(bus: Bus, queue: str) -> None:
    first, second = jid(), jid()
    await lanes.enqueue_many(bus, queue, "strict", [(first, "1"), (second, "2")], limit=1)
    other = jid()
    await lanes.enqueue(bus, queue, "other", "o", job_id=other)
    got = await jobs.claim(bus, queue, 10)
    assert sorted(j.id for j in got) == sorted([first, other])  # limit 1: one at a time
    head = next(j for j in got if j.id == first)
    assert await jobs.retry(bus, queue, first, head.token, 60_000, 5, "x") is Outcome.SCHEDULED
    # first is back at the head of its lane; the lane waits a minute; second must not overtake.
    assert [j.id for j in await lanes.jobs(bus, queue, "strict")] == [first, second]
    assert await jobs.claim(bus, queue, 10) == []
    (status,) = await lanes.status(bus, queue, ["strict"])
    assert status.wait_until_ms is not None and not status.on_ring
    assert await lanes.resume(bus, queue, "strict")
    (again,) = await jobs.claim(bus, queue, 10)
    assert again.id == first and again.attempts == 2


@pytest.mark.parametrize("group", ["", "a b", "x{y}", "tab\t", "z" * 129, 5])
async def test_bad_groups_are_refused(bus: Bus, queue: str, group: object) -> None:
    with pytest.raises(ValueError, match="lane group"):
        await lanes.enqueue(bus, queue, group, "x", job_id=jid())  # type: ignore[arg-type]


plans = st.lists(
    st.lists(st.sampled_from(["ok", "retry", "defer"]), min_size=1, max_size=3).map(
        lambda actions: [*actions[:-1], "ok"]
    ),
    min_size=2,
    max_size=6,
)


@pytest.mark.timeout_s(240)
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lane_plans=st.lists(plans, min_size=2, max_size=4))
async def test_strict_lanes_keep_order_through_random_retries_and_deferrals(
    server_url: str, lane_plans: list[list[list[str]]]
) -> None:
    # A bus per example, not the async ``bus`` fixture: pytest-trio sets async fixtures up again
    # for each hypothesis example but lets the test start with the previous example's (closed)
    # value as soon as the fixture's set-up waits on anything.
    async with open_bus(server_url) as bus:
        await _strict_lane_order(bus, lane_plans)


async def _strict_lane_order(bus: Bus, lane_plans: list[list[list[str]]]) -> None:
    queue = "order." + ids.generate("JOB")
    script: dict[str, list[str]] = {}
    enqueued: dict[str, list[str]] = {}
    for n, plan in enumerate(lane_plans):
        group = f"chat{n}"
        enqueued[group] = [jid() for _ in plan]
        for job_id, actions in zip(enqueued[group], plan, strict=True):
            script[job_id] = list(actions)
        await lanes.enqueue_many(bus, queue, group, [(i, group) for i in enqueued[group]], limit=1)
    # One more lane whose head defers for long: nobody else may wait for it.
    slow = jid()
    enqueued["slow"] = [slow]
    script[slow] = ["long", "ok"]
    await lanes.enqueue(bus, queue, "slow", "slow", job_id=slow, limit=1)
    completed: dict[str, list[str]] = {g: [] for g in enqueued}
    in_flight: dict[str, int] = {}

    async def handler(job: Job) -> RetryIn | DeferIn | None:
        assert job.group is not None
        in_flight[job.group] = in_flight.get(job.group, 0) + 1
        assert in_flight[job.group] == 1, "a limit-1 lane ran two jobs at once"
        try:
            await trio.lowlevel.checkpoint()
            action = script[job.id].pop(0)
            if action == "retry":
                return RetryIn(20, "injected")
            if action == "defer":
                return DeferIn(30, "injected")
            if action == "long":
                return DeferIn(1500, "long")
            completed[job.group].append(job.id)
            return None
        finally:
            in_flight[job.group] -= 1

    consumer = Consumer(bus, queue, handler, concurrency=8, max_attempts=10, backoff=Fixed(10))
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        await nursery.start(Metronome(bus, queue, beat_ms=100).run)
        await wait_for(lambda: all(len(completed[g]) == len(ids_) for g, ids_ in
                                   enqueued.items() if g != "slow"), timeout=60)  # fmt: skip
        assert completed["slow"] == [], "a lane waited on another lane's deferral"
        await wait_for(lambda: completed["slow"] == [slow], timeout=30)
        nursery.cancel_scope.cancel()
    assert completed == enqueued


# A plan of claims against the ring: each step claims a batch, or admits one job to a lane.
ring_steps = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.integers(1, 9)),
        st.tuples(st.just("admit"), st.integers(0, 5)),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(depths=st.lists(st.integers(1, 4), min_size=1, max_size=6), steps=ring_steps)
async def test_claims_serve_the_ring_in_turn_order_whatever_their_batch(
    server_url: str, depths: list[int], steps: list[tuple[str, int]]
) -> None:
    # The claim reads the ring in runs and writes back at its end (lanes not reached to the
    # head, lanes that go on to the tail): the order served must be the one-turn-at-a-time
    # round robin of a queue of lanes, across claims of any size, a claim that goes round the
    # ring more than once and jobs that arrive between claims.
    async with open_bus(server_url) as bus:
        queue = "ring." + ids.generate("JOB")
        ring: list[str] = []  # the model: lanes in turn order
        waiting: dict[str, list[str]] = {}

        async def admit(group: str) -> None:
            job_id = jid()
            await lanes.enqueue(bus, queue, group, group, job_id=job_id)
            if not waiting.setdefault(group, []) and group not in ring:
                ring.append(group)
            waiting[group].append(job_id)

        for n, depth in enumerate(depths):
            for _ in range(depth):
                await admit(f"L{n}")
        for step, arg in steps:
            if step == "admit":
                await admit(f"L{arg}")
                continue
            expected = []
            while len(expected) < arg and ring:
                group = ring.pop(0)
                expected.append(waiting[group].pop(0))
                if waiting[group]:
                    ring.append(group)
            got = await jobs.claim(bus, queue, arg)
            assert [j.id for j in got] == expected
