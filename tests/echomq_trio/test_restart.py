"""Server restart: pending and scheduled jobs survive in the append-only file, and a running
consumer reconnects and drains them; a call the restart cuts says so in the bus's own words."""

import logging

import pytest
import trio

from echomq_trio import (
    BusError,
    ConnectionLost,
    Consumer,
    Job,
    Metronome,
    ids,
    jobs,
    lanes,
    open_bus,
)
from echomq_trio.server import EmbeddedServer, start_server
from echomq_trio.wire import open_wire, parse_url
from tests.support import wait_for

pytestmark = pytest.mark.server


@pytest.mark.timeout_s(120)
async def test_jobs_survive_a_restart_and_a_running_consumer_drains_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    queue = "restart"
    pending = [ids.generate("JOB") for _ in range(50)]
    scheduled = [ids.generate("JOB") for _ in range(20)]
    async with start_server(tmp_path) as server:
        port = server.port
        async with open_bus(server.url) as bus:
            await jobs.enqueue_many(bus, queue, [(i, "p") for i in pending])
            now = await bus.transport.server_time_ms()
            for i in scheduled:
                await jobs.enqueue_at(bus, queue, "s", now + 3_000, job_id=i)
            await bus.transport.command("BGREWRITEAOF")  # or wait out appendfsync everysec

            async def rewritten() -> bool:
                info = await bus.transport.command("INFO", "persistence")
                return b"aof_rewrite_in_progress:0" in info

            await wait_for(rewritten)
    # The server is gone: start it again on the same directory and port.
    seen: list[str] = []
    async with start_server(tmp_path, port=port) as server, open_bus(server.url) as bus:
        c = await jobs.counts(bus, queue)
        assert (c.pending, c.scheduled) == (50, 20)

        async def handler(job: Job) -> None:
            seen.append(job.id)

        consumer = Consumer(bus, queue, handler, concurrency=4)
        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            await nursery.start(Metronome(bus, queue, beat_ms=200).run)
            await wait_for(lambda: len(seen) >= 10)
            # Kill the server under the running consumer and metronome: its supervisor
            # restarts it on the same port from the append-only file, and they carry on.
            server.kill()
            await wait_for(lambda: server.restarts == 1, timeout=30)
            await wait_for(lambda: len(set(seen)) == 70, timeout=60)

            async def settled() -> bool:
                c = await jobs.counts(bus, queue)
                return c.pending == c.scheduled == c.active == 0

            await wait_for(settled, timeout=30)
            nursery.cancel_scope.cancel()
    assert set(seen) == set(pending) | set(scheduled)


@pytest.mark.timeout_s(120)
async def test_pause_until_survives_a_restart_and_resumes_on_time(tmp_path) -> None:  # type: ignore[no-untyped-def]
    queue = "paused"
    a = ids.generate("JOB")
    async with start_server(tmp_path) as server:
        port = server.port
        async with open_bus(server.url) as bus:
            await lanes.enqueue(bus, queue, "chat", "x", job_id=a, limit=1)
            until = await bus.transport.server_time_ms() + 2_500
            await lanes.pause_until(bus, queue, "chat", until)
    seen: dict[str, int] = {}
    async with start_server(tmp_path, port=port) as server, open_bus(server.url) as bus:
        (status,) = await lanes.status(bus, queue, ["chat"])
        assert status.wait_until_ms == until and status.depth == 1

        async def handler(job: Job) -> None:
            seen[job.id] = await bus.transport.server_time_ms()

        async with trio.open_nursery() as nursery:
            await nursery.start(Consumer(bus, queue, handler).run)
            await nursery.start(Metronome(bus, queue, beat_ms=10_000).run)
            await wait_for(lambda: a in seen, timeout=30)
            nursery.cancel_scope.cancel()
    assert seen[a] >= until


LIBRARY_WORDS = ("FatalReceiveError", "channel closed", "Will attempt to reconnect", "Received")


async def test_a_call_cut_by_a_restart_says_so_in_our_words(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """A blocking pop in flight when the server dies meets the client library's "Failed to
    receive a response due to a fatal error - FatalReceiveError: channel closed". The bus
    raises ConnectionLost in one line of its own naming the server (every caller that logs it
    logs that), the library's words go to the debug log only, and the connection comes back."""
    caplog.set_level(logging.DEBUG, logger="echomq_trio.wire")
    async with (
        start_server(tmp_path) as server,
        open_wire(server.url) as wire,
        wire.blocking() as parker,
    ):
        lost: list[ConnectionLost] = []

        async def pop() -> None:
            try:
                await parker.blpop("restart:nothing", 30)
            except ConnectionLost as exc:
                lost.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pop)

            async def blocked() -> bool:
                info = await wire.command("INFO", "clients")
                return b"blocked_clients:1" in info

            await wait_for(blocked)
            server.kill()
        (exc,) = lost
        said = str(exc)
        assert said.startswith(f"lost the connection to the server at {server_url(server)}")
        assert "***" in said and server.url.split("@")[0].split(":")[-1] not in said
        assert not any(words in said for words in LIBRARY_WORDS), said
        await wait_for(lambda: server.restarts == 1, timeout=30)

        async def answers() -> bool:
            try:
                return await parker.command("PING") == b"PONG"
            except BusError:
                return False

        await wait_for(answers, timeout=30)
    shown = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not [m for m in shown if any(words in m for words in LIBRARY_WORDS)], shown
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("the client library said" in m and "FatalReceiveError" in m for m in debug), debug


def server_url(server: EmbeddedServer) -> str:
    """The server's URL as the bus shows it: the password as ***."""
    return parse_url(server.url).redacted()
