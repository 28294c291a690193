"""The trio transport's pipelining against a tiny fake server on a trio memory stream (no real
server): concurrent calls share one connection and go out together; a caller cancelled at any of
its awaits never puts the others out of step; a connection that ends fails the calls in flight
with ``ConnectionLost`` and the next call connects again; a slow server raises
``RequestTimedOut``. Time is a ``MockClock``."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import attrs
import hiredis
import pytest
import trio
import trio.testing

from echomq_trio.errors import ConnectionLost, RequestTimedOut
from echomq_trio.resp._client import RespTransport
from echomq_trio.wire import ConnectionSpec, parse_url

SPEC = parse_url("redis://fake:6379?timeout_ms=1000")


@attrs.define(eq=False)
class FakeServer:
    """Answers ``ECHO x`` with ``x``, ``delay`` seconds after reading it (in order, as a server
    does); once it has read ``read_until`` requests it reads no more until ``hold`` is set;
    every request read is in ``seen``."""

    delay: Callable[[], float] = lambda: 0.0
    seen: list[list[bytes]] = attrs.Factory(list)
    chunks: int = 0  # receives that brought requests
    read_until: int | None = None
    hold: trio.Event = attrs.Factory(trio.Event)
    connections: int = 0
    streams: list[trio.abc.Stream] = attrs.Factory(list)

    async def serve(self, stream: trio.abc.Stream) -> None:
        reader = hiredis.Reader()
        replies: trio.MemorySendChannel[bytes]
        replies, outgoing = trio.open_memory_channel[bytes](1000)

        async def write() -> None:
            async for reply in outgoing:
                await stream.send_all(reply)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            while True:
                if self.read_until is not None and len(self.seen) >= self.read_until:
                    await self.hold.wait()
                try:
                    data = await stream.receive_some(4096)
                except trio.ClosedResourceError:
                    data = b""
                if not data:
                    nursery.cancel_scope.cancel()
                    return
                self.chunks += 1
                reader.feed(data)
                while (request := reader.gets()) is not False:
                    self.seen.append(request)
                    await trio.sleep(self.delay())
                    value = request[1]
                    await replies.send(b"$%d\r\n%s\r\n" % (len(value), value))


@asynccontextmanager
async def transport(
    server: FakeServer, pair: Callable[[], tuple[trio.abc.Stream, trio.abc.Stream]]
) -> AsyncIterator[RespTransport]:
    async with trio.open_nursery() as nursery:

        async def connect(spec: ConnectionSpec) -> trio.abc.Stream:
            ours, theirs = pair()
            server.connections += 1
            server.streams.append(theirs)
            nursery.start_soon(server.serve, theirs)
            return ours

        t = RespTransport(SPEC, nursery, connect=connect)
        yield t
        await t.aclose()
        nursery.cancel_scope.cancel()


async def test_concurrent_calls_share_one_connection_and_go_out_together() -> None:
    server = FakeServer()
    async with transport(server, trio.testing.memory_stream_pair) as t:
        got: dict[int, object] = {}

        async def one(i: int) -> None:
            got[i] = await t.command("ECHO", f"v{i}")

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(one, i)
    assert got == {i: f"v{i}".encode() for i in range(50)}
    assert server.connections == 1
    assert len(server.seen) == 50
    assert server.chunks < 10  # written together, not one send per call


async def test_a_call_cancelled_before_it_is_sent_never_reaches_the_server() -> None:
    server = FakeServer()
    async with transport(server, trio.testing.memory_stream_pair) as t:
        assert await t.command("ECHO", "first") == b"first"
        with trio.CancelScope() as scope:
            scope.cancel()
            await t.command("ECHO", "never")
        assert scope.cancelled_caught
        assert await t.command("ECHO", "after") == b"after"
    assert [r[1] for r in server.seen] == [b"first", b"after"]


async def test_a_call_cancelled_while_its_request_is_being_sent_sends_it_whole() -> None:
    server = FakeServer(read_until=1)  # after "warm", the server reads nothing: sends block
    async with transport(server, trio.testing.lockstep_stream_pair) as t:
        assert await t.command("ECHO", "warm") == b"warm"
        outcome: list[object] = []

        async def cancelled() -> None:
            with trio.CancelScope() as scope:
                scopes.append(scope)
                outcome.append(await t.command("ECHO", "cut"))
            outcome.append("cancelled" if scope.cancelled_caught else "not cancelled")

        scopes: list[trio.CancelScope] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancelled)
            await trio.testing.wait_all_tasks_blocked()
            scopes[0].cancel()  # while it is in its send
            await trio.testing.wait_all_tasks_blocked()
            server.hold.set()
        assert outcome == ["cancelled"]
        assert await t.command("ECHO", "next") == b"next"
    assert [r[1] for r in server.seen] == [b"warm", b"cut", b"next"]


async def test_callers_cancelled_while_awaiting_their_replies_leave_the_others_in_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeServer(delay=lambda: 0.01)
    async with transport(server, trio.testing.memory_stream_pair) as t:
        got: dict[int, object] = {}
        scopes: dict[int, trio.CancelScope] = {}

        async def one(i: int) -> None:
            with trio.CancelScope() as scopes[i]:
                got[i] = await t.command("ECHO", f"v{i}")

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(one, i)
            await trio.testing.wait_all_tasks_blocked()
            for i in range(0, 20, 3):
                scopes[i].cancel()
        assert got == {i: f"v{i}".encode() for i in range(20) if i % 3}
        assert await t.command("ECHO", "after") == b"after"
        assert len(server.seen) == 21  # the cancelled ones were sent, and their replies dropped


@pytest.mark.parametrize("seed", range(20))
async def test_cancellation_at_random_points_never_desynchronises_the_others(
    seed: int, autojump_clock: trio.testing.MockClock
) -> None:
    rng = random.Random(seed)
    server = FakeServer(delay=lambda: rng.choice([0, 0, 0.001, 0.005]))
    async with transport(server, trio.testing.memory_stream_pair) as t:
        got: dict[int, object] = {}

        async def one(i: int) -> None:
            await trio.sleep(rng.random() * 0.02)
            with trio.move_on_after(rng.choice([0, 0.0005, 0.002, 0.01, 1])):
                await trio.sleep(rng.choice([0, 0, 0.001]))
                for k in range(3):
                    value = f"v{i}.{k}"
                    reply = await t.command("ECHO", value)
                    assert reply == value.encode()  # never another caller's reply
                    got[i, k] = reply

        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(one, i)
        assert await t.command("ECHO", "last") == b"last"
    assert got  # some calls completed, each with its own reply


async def test_a_lost_connection_fails_the_calls_in_flight_and_the_next_call_reconnects(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeServer(delay=lambda: 1.0)
    async with transport(server, trio.testing.memory_stream_pair) as t:
        errors: list[BaseException] = []

        async def one() -> None:
            try:
                await t.command("ECHO", "lost")
            except ConnectionLost as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)
            await trio.testing.wait_all_tasks_blocked()
            await server.streams[0].aclose()  # the server goes away mid-call
        assert len(errors) == 3
        assert "lost the connection to the server at redis://fake:6379/0" in str(errors[0])
        server.delay = lambda: 0.0
        assert await t.command("ECHO", "again") == b"again"
    assert server.connections == 2


async def test_a_server_slower_than_the_request_timeout_raises_request_timed_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    delays = iter([1.5, 0.0])
    server = FakeServer(delay=lambda: next(delays))
    async with transport(server, trio.testing.memory_stream_pair) as t:
        with pytest.raises(RequestTimedOut, match="did not answer ECHO within 1000 ms"):
            await t.command("ECHO", "slow")
        # The late reply is read and dropped: the next call gets its own.
        assert await t.command("ECHO", "quick") == b"quick"


async def test_calls_after_the_transport_is_closed_raise_connection_lost() -> None:
    server = FakeServer()
    async with transport(server, trio.testing.memory_stream_pair) as t:
        assert await t.command("ECHO", "open") == b"open"
    with pytest.raises(ConnectionLost, match="is closed"):
        await t.command("ECHO", "closed")
    assert server.connections == 1


async def test_a_caller_cancelled_while_connecting_leaves_the_next_call_to_connect() -> None:
    server = FakeServer()
    gate = trio.Event()
    async with trio.open_nursery() as nursery:

        async def slow_connect(spec: ConnectionSpec) -> trio.abc.Stream:
            await gate.wait()
            ours, theirs = trio.testing.memory_stream_pair()
            server.connections += 1
            nursery.start_soon(server.serve, theirs)
            return ours

        t = RespTransport(SPEC, nursery, connect=slow_connect)
        with trio.move_on_after(0.01) as scope:
            await t.command("ECHO", "never")
        assert scope.cancelled_caught
        assert server.connections == 0
        gate.set()
        assert await t.command("ECHO", "now") == b"now"
        assert [r[1] for r in server.seen] == [b"now"]
        await t.aclose()
        nursery.cancel_scope.cancel()
