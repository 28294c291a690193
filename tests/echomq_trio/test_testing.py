"""The fault-injecting transport, against a real server: it forwards, records, and fails or
cancels exactly the planned call, before or after the server ran it."""

import pytest
import trio

from echomq_trio import Bus, ConnectionLost, RequestTimedOut, ids, jobs
from echomq_trio.testing import (
    Fault,
    FaultyTransport,
    Raise,
    SeenCall,
    any_call,
    commands,
    scripts,
)


def counter(queue: str) -> str:
    return f"test:{{{queue}}}:n"


async def value(bus: Bus, key: str) -> int:
    return int(await bus.transport.command("GET", key) or 0)


async def test_calls_go_through_and_are_recorded(bus: Bus, queue: str) -> None:
    faulty = FaultyTransport(bus.transport)
    via = Bus(faulty)
    a = ids.generate("JOB")
    await jobs.enqueue(via, queue, "x", job_id=a)
    assert await faulty.command("incr", counter(queue)) == 1
    assert abs(await faulty.server_time_ms() - await bus.transport.server_time_ms()) < 5_000
    assert faulty.spec == bus.transport.spec
    assert [(c.op, c.name) for c in faulty.calls] == [
        ("script", "enqueue"),
        ("command", "INCR"),
        ("server_time_ms", "TIME"),
    ]
    assert faulty.calls[1] == SeenCall("command", "INCR", (), (counter(queue),))
    assert (await jobs.get_job(bus, queue, a)) is not None


@pytest.mark.parametrize("error", [ConnectionLost("injected"), RequestTimedOut("injected")])
async def test_a_failure_before_the_call_never_reaches_the_server(
    bus: Bus, queue: str, error: Exception
) -> None:
    faulty = FaultyTransport(bus.transport)
    key = counter(queue)
    fault = faulty.fail(commands("INCR"), error, nth=2)  # type: ignore[arg-type]
    assert await faulty.command("INCR", key) == 1
    await faulty.command("GET", key)  # does not match: not counted
    with pytest.raises(type(error), match="injected"):
        await faulty.command("INCR", key)
    assert await value(bus, key) == 1
    assert await faulty.command("INCR", key) == 2  # only the nth
    assert fault.hits == [SeenCall("command", "INCR", (), (key,))] and fault.seen == 3


async def test_a_failure_after_the_call_loses_the_answer_of_a_call_that_ran(
    bus: Bus, queue: str
) -> None:
    faulty = FaultyTransport(bus.transport)
    key = counter(queue)
    fault = faulty.fail(commands("INCR"), RequestTimedOut("answer lost"), after=True)
    with pytest.raises(RequestTimedOut, match="answer lost"):
        await faulty.command("INCR", key)
    assert fault.fired and await value(bus, key) == 1


async def test_a_lost_claim_answer_leaves_the_job_leased(bus: Bus, queue: str) -> None:
    a = ids.generate("JOB")
    await jobs.enqueue(bus, queue, "x", job_id=a)
    faulty = FaultyTransport(bus.transport)
    faulty.fail(scripts("claim"), ConnectionLost("mid-reply"), after=True)
    with pytest.raises(ConnectionLost):
        await jobs.claim(Bus(faulty), queue, 1, 1_000)
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and (info.state, info.attempts) == ("active", 1)


async def test_times_fails_several_calls_in_a_row_with_fresh_errors(bus: Bus, queue: str) -> None:
    faulty = FaultyTransport(bus.transport)
    key = counter(queue)
    faulty.fail(commands("INCR"), ConnectionLost("down"), nth=2, times=2)
    seen: list[BaseException] = []
    results = []
    for _ in range(4):
        try:
            results.append(await faulty.command("INCR", key))
        except ConnectionLost as exc:
            seen.append(exc)
    assert results == [1, 2]
    assert len(seen) == 2 and seen[0] is not seen[1]
    assert all(type(e) is ConnectionLost and str(e) == "down" for e in seen)


async def test_a_fault_can_be_planned_as_a_value(bus: Bus, queue: str) -> None:
    faulty = FaultyTransport(bus.transport)
    key = counter(queue)
    fault = faulty.inject(Fault(commands("incr"), Raise(ConnectionLost("x"), after=True), nth=2))
    assert faulty.faults == [fault] and not fault.fired
    assert await faulty.command("INCR", key) == 1
    with pytest.raises(ConnectionLost):
        await faulty.command("INCR", key)
    assert await value(bus, key) == 2 and fault.seen == 2 and fault.fired


@pytest.mark.parametrize("after", [False, True])
async def test_cancel_cancels_the_caller_at_that_await(bus: Bus, queue: str, after: bool) -> None:
    faulty = FaultyTransport(bus.transport)
    key = counter(queue)
    returned = False
    with trio.CancelScope() as scope:
        fault = faulty.cancel(commands("INCR"), scope, after=after)
        await faulty.command("INCR", key)
        returned = True
    assert scope.cancelled_caught and fault.fired and not returned
    assert await value(bus, key) == (1 if after else 0)


async def test_a_shielded_caller_is_cancelled_only_once_its_call_is_done(
    bus: Bus, queue: str
) -> None:
    faulty = FaultyTransport(bus.transport)
    key = counter(queue)
    got = None
    with trio.CancelScope() as scope:
        faulty.cancel(commands("INCR"), scope)
        with trio.CancelScope(shield=True):
            got = await faulty.command("INCR", key)
        await trio.lowlevel.checkpoint()
        got = -1  # pragma: no cover - the checkpoint above is cancelled
    assert scope.cancelled_caught and got == 1 and await value(bus, key) == 1


async def test_a_blocking_transport_shares_the_plan(bus: Bus, queue: str) -> None:
    faulty = FaultyTransport(bus.transport)
    key = counter(queue)
    fault = faulty.fail(lambda c: c.op == "blpop", ConnectionLost("parked"))
    async with faulty.blocking() as parker:
        with pytest.raises(ConnectionLost, match="parked"):
            await parker.blpop(key, 5)  # raised before it is sent: no wait
        await bus.transport.command("RPUSH", key, "v")
        assert await parker.blpop(key, 5) == b"v"
    assert fault.fired and [c.op for c in faulty.calls] == ["blpop", "blpop"]


@pytest.mark.parametrize("after", [False, True])
async def test_a_subscription_can_fail_as_it_opens(bus: Bus, queue: str, after: bool) -> None:
    faulty = FaultyTransport(bus.transport)
    channel = f"test:{{{queue}}}:ch"
    fault = faulty.fail(any_call, ConnectionLost("no pub/sub"), after=after)
    with pytest.raises(ConnectionLost):
        async with faulty.subscribe(channels=[channel]):
            pytest.fail("a failed subscription must not open")
    assert fault.hits == [SeenCall("subscribe", "SUBSCRIBE", (channel,))]
    async with faulty.subscribe(channels=[channel]) as sub, trio.open_nursery() as nursery:

        async def publish() -> None:
            while True:  # until the subscription is live on the server and one arrives
                await bus.transport.command("PUBLISH", channel, "hi")
                await trio.sleep(0.02)

        nursery.start_soon(publish)
        assert (await sub.receive()).data == b"hi"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("nth", "times"), [(0, 1), (1, 0), (1.5, 1)])
async def test_bad_plans_are_refused(bus: Bus, nth: int, times: int) -> None:
    with pytest.raises(ValueError):
        FaultyTransport(bus.transport).fail(any_call, ConnectionLost("x"), nth=nth, times=times)
