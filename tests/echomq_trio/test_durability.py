"""``durability.OnDisk``: admissions (and settlements) return once the server's append-only file
holds them (``WAITAOF``), committed in groups on a connection of their own; a write the disk
cannot take raises ``NotDurable`` and a call again returns once it is on disk. Real servers;
the fault-injecting transport only counts the ``WAITAOF`` calls."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from echomq_trio import Bus, ConnectionLost, ServerError, jobs, lanes, open_bus
from echomq_trio.durability import DurableCalls, InMemory, NotDurable, OnDisk
from echomq_trio.server import start_server
from echomq_trio.testing import FaultyTransport
from echomq_trio.wire import open_wire
from tests.codemojex.test_full_disk import fill, small_disk
from tests.conftest import wait_for


def test_which_calls_wait() -> None:
    assert not InMemory().waits_for("enqueue")
    both = OnDisk()
    assert all(both.waits_for(s) for s in ("enqueue", "lane_enqueue", "schedule", "ack", "retry"))
    assert not both.waits_for("claim") and not both.waits_for("extend")
    admissions = OnDisk(settlements=False)
    assert admissions.waits_for("enqueue") and not admissions.waits_for("ack")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="timeout_ms"):
            OnDisk(timeout_ms=bad)  # type: ignore[arg-type]


async def test_open_bus_refuses_a_durability_it_does_not_know(server_url: str) -> None:
    with pytest.raises(TypeError, match="durability must be"):
        async with open_bus(server_url, durability="disk"):  # type: ignore[arg-type]
            pass


@pytest.mark.cluster
async def test_writes_are_committed_in_groups_and_settle_on_disk(
    server_url: str, queue: str
) -> None:
    durability = OnDisk()
    async with open_wire(server_url) as wire, wire.blocking() as own:
        counted = FaultyTransport(own)
        bus = Bus(wire, durability=durability, durable=DurableCalls([counted], durability))
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(jobs.enqueue, bus, queue, f"job {i}")
                nursery.start_soon(lanes.enqueue, bus, queue, f"g{i % 5}", f"lane job {i}")
        waits = [c for c in counted.calls if c.name == "WAITAOF"]
        scripts = [c for c in counted.calls if c.op == "script"]
        assert scripts and all(c.name in ("enqueue", "lane_enqueue") for c in scripts)
        # One sync covers every write answered before it: far fewer waits than writes.
        assert 1 <= len(waits) < len(scripts)
        assert (await jobs.counts(bus, queue)).pending == 200
        # Claims go on the shared connection; acks wait for the disk again.
        claimed = await jobs.claim(bus, queue, 10)
        before = len(counted.calls)
        outcomes = await jobs.ack_many(bus, queue, [(j.id, j.token) for j in claimed])
        assert set(outcomes) == {jobs.Outcome.ACKED}
        assert [c.name for c in counted.calls[before:]] == ["ack", "WAITAOF"]


@pytest.mark.slow
@pytest.mark.timeout_s(90)
async def test_a_server_killed_while_its_disk_is_full_keeps_every_write_that_returned(
    tmp_path: Path,
) -> None:
    """Enqueue on a full disk until a write is not synced: every enqueue that returned is in
    the server's file, so a server killed with SIGKILL then (and restarted by its supervisor)
    has them all; the one that raised ``NotDurable`` was in memory only, as the caller was
    told. Calling again once there is room returns once it is on disk."""
    with small_disk(tmp_path / "disk", 16) as disk:
        async with (
            start_server(disk / "data") as server,
            # more than the second between the server's syncs (appendfsync everysec)
            open_bus(server.url, durability=OnDisk(timeout_ms=1500)) as bus,
        ):
            filler = fill(disk)
            returned: list[str] = []
            with pytest.raises(NotDurable):
                for i in range(10_000):  # the file's last page still has room for a few
                    returned.append((await jobs.enqueue(bus, "q", f"job {i}")).id)
            killed = server.pid
            server.kill()
            await wait_for(lambda: server.pid != killed and server.running, timeout=30)
            for job_id in returned:
                assert await _present(bus, job_id), job_id
            filler.unlink()
            with trio.fail_after(30):
                while True:
                    try:
                        await jobs.enqueue(bus, "q", "after")
                        break
                    except (NotDurable, ConnectionLost):
                        await trio.sleep(0.1)


async def _present(bus: Bus, job_id: str) -> bool:
    while True:
        try:
            return await jobs.get_job(bus, "q", job_id) is not None
        except ConnectionLost:  # the restarted server still loading
            await trio.sleep(0.1)


async def test_on_disk_needs_a_server_that_keeps_an_append_only_file(tmp_path: Path) -> None:
    async with start_server(tmp_path / "d", extra_config=[("appendonly", "no")]) as server:
        with pytest.raises(ServerError, match="keeps none \\(set appendonly yes"):
            async with open_bus(server.url, durability=OnDisk()):
                pass
        async with open_bus(server.url) as bus:  # in memory it works as ever
            assert (await jobs.enqueue(bus, "q", "x")).outcome == jobs.Outcome.ENQUEUED
