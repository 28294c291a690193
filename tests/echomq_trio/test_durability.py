"""``durability.OnDisk``: admissions (and settlements) return once the server's append-only file
holds them (``WAITAOF``), committed in groups on a connection of their own; a write the disk
cannot take raises ``NotDurable`` and a call again returns once it is on disk. Real servers;
the fault-injecting transport only counts the ``WAITAOF`` calls."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
import trio

from echomq_trio import (
    Bus,
    BusError,
    ConnectionLost,
    RequestTimedOut,
    ServerError,
    ids,
    jobs,
    lanes,
    open_bus,
)
from echomq_trio.durability import DurableCalls, InMemory, NotDurable, OnDisk, Replicas
from echomq_trio.errors import PersistenceFailed
from echomq_trio.server import start_server
from echomq_trio.storage import (
    _may_answer_early,
    _syncs_every_write,
    _waits_for_sync,
    fsync_append_only_file,
    has_waitaof,
    read_storage,
    waitaof_syncs,
)
from echomq_trio.testing import FaultyTransport
from echomq_trio.wire import open_wire, parse_url
from tests.codemojex.test_full_disk import fill, small_disk
from tests.support import (
    needs_waitaof,
    server_has_waitaof,
    server_is_valkey,
    server_rewrites_its_manifest_at_a_start,
    wait_for,
)


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
@needs_waitaof
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
        # Each lead's own small write goes just before its WAITAOF, in the queue's meta (and
        # one before the first write: which server process answers).
        marks = [c for c in counted.calls if c.name == "sync_mark"]
        assert len(marks) == len(waits) + 1 and {c.keys for c in marks} == {(bus.keys(queue).meta,)}
        assert scripts and all(c.name in ("enqueue", "lane_enqueue", "sync_mark") for c in scripts)
        # One sync covers every write answered before it: far fewer waits than writes.
        assert 1 <= len(waits) < len(scripts)
        assert (await jobs.counts(bus, queue)).pending == 200
        # Claims go on the shared connection; acks wait for the disk again.
        claimed = await jobs.claim(bus, queue, 10)
        before = len(counted.calls)
        outcomes = await jobs.ack_many(bus, queue, [(j.id, j.token) for j in claimed])
        assert set(outcomes) == {jobs.Outcome.ACKED}
        assert [c.name for c in counted.calls[before:]] == ["ack", "sync_mark", "WAITAOF"]


@pytest.mark.slow
@pytest.mark.timeout_s(90)
@needs_waitaof
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
            # NotDurable for a write taken in memory only; PersistenceFailed (of which it is a
            # kind) for one refused outright
            with pytest.raises(PersistenceFailed):
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


@pytest.mark.server
@pytest.mark.skipif(server_has_waitaof(), reason="a server without WAITAOF (Redis 7.0) only")
async def test_on_disk_needs_a_server_with_waitaof(standalone_url: str) -> None:
    with pytest.raises(ServerError, match=r"needs WAITAOF \(Valkey, Redis 7.2 and later\)"):
        async with open_bus(standalone_url, durability=OnDisk()):
            pass


@pytest.mark.server
async def test_has_waitaof_asks_the_server(standalone_url: str) -> None:
    async with open_bus(standalone_url) as bus:
        assert await has_waitaof(bus) == server_has_waitaof()  # by the binary's version


VALKEY_INFO = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n"


def test_which_servers_are_asked_whether_waitaof_waits_for_the_sync() -> None:
    assert _may_answer_early(VALKEY_INFO) and _may_answer_early(VALKEY_INFO.encode())
    assert _may_answer_early("redis_version:7.4.2\r\n")
    for taken_at_its_word in ("redis_version:8.2.3\r\n", "redis_version:7.2.4\r\n", ""):
        assert not _may_answer_early(taken_at_its_word)
    nodes = {"10.0.0.1:7000": "redis_version:8.2.3\r\n", "10.0.0.2:7000": VALKEY_INFO}
    assert _may_answer_early(nodes)  # a cluster: any node that may


def test_appendfsync_always_is_read_from_each_reply_shape() -> None:
    assert _syncs_every_write([b"appendfsync", b"always"])  # RESP2
    assert _syncs_every_write({b"appendfsync": b"always"})  # RESP3
    assert _syncs_every_write({"appendfsync": "always"})  # glide
    assert not _syncs_every_write([b"appendfsync", b"everysec"])
    assert not _syncs_every_write({b"appendfsync": b"no"})
    both = {"a:1": [b"appendfsync", b"always"], "b:2": {b"appendfsync": b"always"}}
    assert _syncs_every_write(both)
    one = {"a:1": [b"appendfsync", b"always"], "b:2": [b"appendfsync", b"everysec"]}
    assert not _syncs_every_write(one)  # a cluster: every node must


@pytest.mark.server
@pytest.mark.timeout_s(60)
@needs_waitaof
@pytest.mark.parametrize("transport", ["trio", "glide"])
async def test_waitaof_syncs_tells_a_server_whose_waitaof_answers_before_its_sync(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """Valkey 9.1.2 answers ``WAITAOF 1 0`` once its file is written, before the sync (seen
    with strace: the answer goes out with no fdatasync since the write; redis/redis#13793,
    fixed in Redis 8.0, which waits up to a second). The probe tells them apart; ``open_bus``
    with ``OnDisk`` says so in one warning; a server that syncs every write before it answers
    (``appendfsync always``) keeps its word. A Valkey that waits fails this test: then say so
    in ``waitaof_syncs`` and the durability guide."""
    caplog.set_level(logging.WARNING, "echomq_trio.bus")
    waits = not server_is_valkey()
    async with start_server(tmp_path / "everysec") as server:
        async with open_bus(server.url, transport=transport) as bus:
            assert await _waits_for_sync(bus.transport) == waits  # the probe, whatever the server
            assert await waitaof_syncs(bus) == waits
        async with open_bus(server.url, durability=OnDisk(), transport=transport) as bus:
            assert (await jobs.enqueue(bus, "q", "x")).outcome == jobs.Outcome.ENQUEUED
            assert bus.waitaof_syncs is waits
            assert bus.with_durability(InMemory()).waitaof_syncs is waits
            url = bus.url
    said = [r.getMessage() for r in caplog.records if "answers WAITAOF" in r.getMessage()]
    assert len(said) == (0 if waits else 1), said
    if said:
        assert said[0].startswith(f"durability OnDisk: the server at {url} answers WAITAOF")
        assert "a power cut may lose the last second or two" in said[0]
    always = [("appendfsync", "always")]
    async with (
        start_server(tmp_path / "always", extra_config=always) as server,
        open_bus(server.url, transport=transport) as bus,
    ):
        assert await waitaof_syncs(bus)


def test_the_append_only_file_is_synced_from_this_process(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no append-only file to sync in"):
        fsync_append_only_file(tmp_path)
    folder = tmp_path / "appendonlydir"
    folder.mkdir()
    for name in ("aof.1.base.rdb", "aof.1.incr.aof", "aof.2.incr.aof"):
        (folder / f"appendonly.{name}").write_bytes(b"*1\r\n$4\r\nPING\r\n")
    assert fsync_append_only_file(tmp_path) == 2  # the incr files (a rewrite syncs its base)


@pytest.mark.server
@pytest.mark.timeout_s(60)
@needs_waitaof
async def test_an_on_disk_call_on_the_embedded_server_returns_once_the_bus_synced_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Valkey answers WAITAOF before its sync, so the bus syncs its embedded server's file
    itself after each wait (one ``fdatasync`` a group of calls, in a thread): seen by a spy on
    ``os.fdatasync`` that still syncs. A bus opened in memory does so for its ``OnDisk`` view;
    a bus given a URL does not (it warns where the server answers early, above). Where the
    files are gone, an ``OnDisk`` call raises ``NotDurable`` naming the directory."""
    caplog.set_level(logging.WARNING, "echomq_trio.bus")
    synced: list[str] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    folder = str(tmp_path / "data" / "appendonlydir")
    async with open_bus(data_dir=tmp_path / "data", durability=OnDisk()) as bus:
        assert bus.syncs_file_itself
        assert (await jobs.enqueue(bus, "q", "x")).outcome == jobs.Outcome.ENQUEUED
        assert synced and all(p.startswith(folder) and p.endswith(".incr.aof") for p in synced)
        synced.clear()
        async with trio.open_nursery() as nursery:  # calls in flight share a wait and its sync
            for i in range(32):
                nursery.start_soon(jobs.enqueue, bus, "q", f"together {i}")
        assert 0 < len(synced) < 32, len(synced)
        assert bus.server is not None
        url = bus.server.url
        async with open_bus(url, durability=OnDisk()) as other:
            assert not other.syncs_file_itself
            before = len(synced)
            assert (await jobs.enqueue(other, "q", "y")).outcome == jobs.Outcome.ENQUEUED
            assert len(synced) == before  # not its server's files
        for path in Path(folder).glob("*.incr.aof"):  # noqa: ASYNC240 - a test's few files
            path.unlink()  # the server keeps appending to what it has open
        gone = f"could not sync the append-only file in {re.escape(str(tmp_path))}"
        with pytest.raises(NotDurable, match=gone):
            await jobs.enqueue(bus, "q", "z")
    said = [r.getMessage() for r in caplog.records if "answers WAITAOF" in r.getMessage()]
    assert len(said) == (1 if server_is_valkey() else 0), said  # the URL's bus only
    synced.clear()
    async with open_bus(data_dir=tmp_path / "memory") as bus:
        view = bus.with_durability(OnDisk())
        assert not bus.syncs_file_itself and view.syncs_file_itself
        assert not bus.with_durability(Replicas(1, 100)).syncs_file_itself  # OnDisk's wait only
        assert (await jobs.enqueue(view, "q", "x")).outcome == jobs.Outcome.ENQUEUED
        assert synced


@pytest.mark.server
@needs_waitaof
async def test_a_probe_the_server_refuses_leaves_the_bus_as_it_was(
    standalone_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A user whose ACL allows the queues' keys only may not write the probe's key: ``open_bus``
    with ``OnDisk`` opens all the same and says it could not ask (a server it asks: Valkey)."""
    caplog.set_level(logging.WARNING, "echomq_trio.bus")
    user, secret = f"queues{uuid.uuid4().hex[:8]}", "pw-" + uuid.uuid4().hex
    async with open_bus(standalone_url) as admin:
        await admin.transport.command(
            "ACL", "SETUSER", user, "on", f">{secret}", "~emq:{*}:*", "&*", "+@all"
        )
        try:
            port = parse_url(standalone_url).hosts[0][1]
            url = f"redis://{user}:{secret}@127.0.0.1:{port}"
            async with open_bus(url, durability=OnDisk()) as bus:
                assert (await jobs.enqueue(bus, "q", "x")).outcome == jobs.Outcome.ENQUEUED
                assert bus.waitaof_syncs is (None if server_is_valkey() else True)
        finally:
            await admin.transport.command("ACL", "DELUSER", user)
    said = [r.getMessage() for r in caplog.records if "could not ask" in r.getMessage()]
    assert len(said) == (1 if server_is_valkey() else 0), said
    if said:
        assert "whether its WAITAOF waits for the sync" in said[0] and "NOPERM" in said[0]


@pytest.mark.server
async def test_on_disk_needs_a_server_that_keeps_an_append_only_file(tmp_path: Path) -> None:
    async with start_server(tmp_path / "d", extra_config=[("appendonly", "no")]) as server:
        with pytest.raises(ServerError, match="keeps none \\(set appendonly yes"):
            async with open_bus(server.url, durability=OnDisk()):
                pass
        async with open_bus(server.url) as bus:  # in memory it works as ever
            assert (await jobs.enqueue(bus, "q", "x")).outcome == jobs.Outcome.ENQUEUED


@pytest.mark.timeout_s(60)
@needs_waitaof
async def test_a_failed_lead_fails_every_write_it_covered_at_once(
    standalone_url: str, queue: str
) -> None:
    """The lead's sync fails (here its connection drops, injected): every write answered
    before it fails with it, at once, not one waiter after another each with its own timeout,
    and none is declared on disk by a later lead that may not cover it. Called again, each is
    a duplicate (it was taken) that returns once a lead syncs it."""
    durability = OnDisk(timeout_ms=2_000)
    async with open_wire(standalone_url) as wire, wire.blocking() as own:
        faulty = FaultyTransport(own)
        lost = faulty.fail(lambda c: c.name == "WAITAOF", ConnectionLost("injected: dropped"))
        bus = Bus(wire, durability=durability, durable=DurableCalls([faulty], durability))
        ids_ = [ids.generate("JOB") for _ in range(8)]
        outcomes: list[str] = []

        async def one(job_id: str) -> None:
            try:
                await jobs.enqueue(bus, queue, "x", job_id=job_id)
                outcomes.append("on disk")
            except NotDurable as exc:
                assert isinstance(exc.__cause__, ConnectionLost)
                outcomes.append("not durable")

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for job_id in ids_:
                nursery.start_soon(one, job_id)
        assert lost.hits and outcomes.count("not durable") >= 1
        assert trio.current_time() - started < durability.timeout_ms / 1000  # none waited it out
        again = [await jobs.enqueue(bus, queue, "x", job_id=i) for i in ids_]
        assert all(a.outcome in (jobs.Outcome.DUPLICATE, jobs.Outcome.ENQUEUED) for a in again)
        assert (await jobs.counts(bus, queue)).pending == len(ids_)


@pytest.mark.slow
@pytest.mark.timeout_s(120)
@needs_waitaof
async def test_no_write_is_declared_on_disk_across_a_dropped_connection_and_a_killed_server(
    tmp_path: Path,
) -> None:
    """Concurrent enqueues on a full disk; the durable connection drops (a network blip, the
    server alive), then the server is killed: every enqueue that returned is there after the
    restart (a lead on the reconnected connection makes a write of its own first, which the
    full disk refuses, instead of waiting on a connection that wrote nothing)."""
    with small_disk(tmp_path / "disk", 16) as disk:
        async with (
            start_server(disk / "data") as server,
            open_wire(server.url) as wire,
            wire.blocking() as own,
        ):
            durability = OnDisk(timeout_ms=20_000)
            bus = Bus(wire, durability=durability, durable=DurableCalls([own], durability))
            await jobs.enqueue(bus, "q", "warm")
            filler = fill(disk)
            returned: list[str] = []

            async def one(i: int) -> None:
                with contextlib.suppress(ConnectionLost, RequestTimedOut):  # told: not returned
                    returned.append((await jobs.enqueue(bus, "q", f"job {i}")).id)

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(one, i)
                await trio.sleep(1.0)  # they wait on the full disk
                await wire.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                await trio.sleep(1.0)
                killed_at = server.pid
                server.kill()
            # Room again, so the server can start (Redis 8 cannot write its file's manifest on
            # a full disk; Valkey 9 starts anyway): what it lost with its memory stays lost.
            filler.unlink()
            await wait_for(lambda: server.running and server.pid != killed_at, timeout=30)
            for job_id in returned:
                assert await _present(bus, job_id), job_id


@pytest.mark.slow
@pytest.mark.timeout_s(60)
async def test_a_first_start_on_a_full_disk_fails_at_once_with_the_server_s_reason(
    tmp_path: Path,
) -> None:
    """A server cannot start where it cannot create its append-only file (either server): the
    start says so, in the server's words, instead of trying other ports; with room, it
    starts."""
    with small_disk(tmp_path / "disk", 16) as disk:
        async with start_server(disk / "data") as server:
            port = server.port
        shutil.rmtree(disk / "data" / "appendonlydir")  # a data directory without one yet
        filler = fill(disk)
        with pytest.raises(BusError) as failed:
            async with start_server(disk / "data"):
                pass
        assert "No space left on device" in str(failed.value), failed.value
        assert f"port {port}" in str(failed.value)  # the recorded one, and no other tried
        filler.unlink()
        async with start_server(disk / "data") as server, open_bus(server.url) as bus:
            assert server.port == port
            await jobs.enqueue(bus, "q", "job")


@pytest.mark.slow
@pytest.mark.timeout_s(60)
@pytest.mark.skipif(
    not server_rewrites_its_manifest_at_a_start(), reason="Redis 8's behaviour: Valkey 9 and "
    "Redis 7.0 write nothing at a start with files in place, so they start on a full disk "
    "(test_valkey_starts_on_a_full_disk_...)"
)  # fmt: skip
async def test_redis_fails_a_restart_on_a_full_disk_at_once_with_the_server_s_reason(
    tmp_path: Path,
) -> None:
    """Redis 8 rewrites its append-only file's manifest at every start, so it cannot start
    where it cannot write: the start says so, in the server's words, instead of trying other
    ports."""
    with small_disk(tmp_path / "disk", 16) as disk:
        async with start_server(disk / "data") as server:
            port = server.port
        filler = fill(disk)
        with pytest.raises(BusError) as failed:
            async with start_server(disk / "data"):
                pass
        assert "No space left on device" in str(failed.value), failed.value
        assert "temp-appendonly.aof.manifest" in str(failed.value), failed.value
        assert f"port {port}" in str(failed.value)  # the recorded one, and no other tried
        filler.unlink()


@pytest.mark.slow
@pytest.mark.timeout_s(60)
@pytest.mark.skipif(
    server_rewrites_its_manifest_at_a_start(), reason="Valkey 9's and Redis 7.0's behaviour: "
    "Redis 8 rewrites its manifest at every start, so it cannot start on a full disk "
    "(test_redis_fails_a_restart_...)"
)  # fmt: skip
async def test_valkey_starts_on_a_full_disk_and_refuses_writes_until_there_is_room(
    tmp_path: Path,
) -> None:
    """Valkey 9 (and Redis 7.0) writes nothing at a start with its files in place: on a full
    disk it starts,
    answers reads, and refuses writes (``PersistenceFailed``) once its file cannot take them,
    as a running server does; with room again it takes them, and keeps them across a start."""
    with small_disk(tmp_path / "disk", 16) as disk:
        async with start_server(disk / "data") as server, open_bus(server.url) as bus:
            port = server.port
            for i in range(10):
                await jobs.enqueue(bus, "q", f"job {i}")
        filler = fill(disk)
        async with start_server(disk / "data") as server, open_bus(server.url) as bus:
            assert server.port == port
            assert (await jobs.counts(bus, "q")).pending == 10
            with pytest.raises(PersistenceFailed):
                for i in range(10_000):  # the file's last page still has room for a few
                    await jobs.enqueue(bus, "q", f"full {i}")
            assert not (await read_storage(bus)).writable
            filler.unlink()

            async def writable() -> bool:
                return (await read_storage(bus)).writable

            await wait_for(writable, timeout=10)  # the server tries its file every second
            await jobs.enqueue(bus, "q", "with room")
            held = (await jobs.counts(bus, "q")).pending
        async with start_server(disk / "data") as server, open_bus(server.url) as bus:
            assert (await jobs.counts(bus, "q")).pending == held > 11
