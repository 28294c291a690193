"""``server.json``, how a data directory's server is reached: the record and its errors (no
server needed), then the embedded server writing it (``server`` tier): 0600 and atomic, the pid
of each supervised restart, ``stopped`` with its port kept after the block, the port kept by the
next start where it is free and changed (and logged) where it is not, and a start that fails
leaving nothing of its own behind."""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
from pathlib import Path

import pytest

from echomq_trio import BusError, ServerNotFound, _address, jobs, open_bus
from echomq_trio._address import ADDRESS_FILE, ServerAddress, State
from echomq_trio.errors import ServerNotRunning
from echomq_trio.server import free_port, start_server
from tests.support import wait_for


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _gone_pid() -> int:
    """A pid no process has now (the highest possible is rarely in use; checked)."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    assert _address.process_state(pid) == "gone"
    return pid


def test_a_record_round_trips_and_stopping_drops_the_url_and_keeps_the_port(
    tmp_path: Path,
) -> None:
    record = ServerAddress.running("redis://:pw@127.0.0.1:7001", "127.0.0.1", 7001, 42)
    _address.write(tmp_path, record)
    assert _mode(tmp_path / ADDRESS_FILE) == 0o600
    assert _address.read(tmp_path) == record and record.owner_pid == os.getpid()
    assert _address.url_of(tmp_path) == ("redis://:pw@127.0.0.1:7001", record)
    _address.write(tmp_path, record.stopped())
    text = (tmp_path / ADDRESS_FILE).read_text()
    assert "pw" not in text and json.loads(text)["state"] == "stopped"
    assert _address.recorded_port(tmp_path) == 7001
    with pytest.raises(ServerNotRunning, match=rf"the server of {tmp_path} is stopped: its owner"):
        _address.url_of(tmp_path)


def test_no_directory_no_record_and_a_damaged_record_are_one_line_each(tmp_path: Path) -> None:
    with pytest.raises(ServerNotRunning, match=rf"no data directory {tmp_path}/nope"):
        _address.url_of(tmp_path / "nope")
    with pytest.raises(ServerNotRunning, match=rf"{tmp_path} holds no server\.json"):
        _address.url_of(tmp_path)
    assert _address.read(tmp_path) is None and _address.recorded_port(tmp_path) is None
    (tmp_path / ADDRESS_FILE).write_text('{"state": "running"')
    with pytest.raises(ValueError, match=rf"{tmp_path}/server\.json is not a server address"):
        _address.url_of(tmp_path)
    assert _address.recorded_port(tmp_path) is None  # a start just picks a free port


def test_a_record_that_does_not_answer_says_whether_its_owner_lives(tmp_path: Path) -> None:
    alive = ServerAddress(State.RUNNING, "redis://:pw@127.0.0.1:7", "127.0.0.1", 7, 8,
                          os.getpid(), 0)  # fmt: skip
    assert "may be restarting it" in str(_address.not_answering(tmp_path, alive))
    dead = ServerAddress(State.RUNNING, "redis://:pw@127.0.0.1:7", "127.0.0.1", 7, 8,
                         _gone_pid(), 0)  # fmt: skip
    text = str(_address.not_answering(tmp_path, dead))
    assert text.startswith(f"the server recorded in {tmp_path} (127.0.0.1:7, pid 8) does not")
    assert "ended without stopping it" in text and "pw" not in text


@pytest.mark.server
async def test_the_record_names_the_server_and_each_restart_then_stopped(tmp_path: Path) -> None:
    async with start_server(tmp_path) as server:
        record = _address.read(tmp_path)
        assert record is not None and record.state is State.RUNNING
        assert (record.url, record.port, record.pid) == (server.url, server.port, server.pid)
        assert record.owner_pid == os.getpid() and _mode(tmp_path / ADDRESS_FILE) == 0o600
        first = server.pid
        server.kill()  # the supervisor restarts it on the same port and records the new pid
        await wait_for(lambda: server.pid != first and server.running, timeout=30)
        await wait_for(lambda: getattr(_address.read(tmp_path), "pid", None) == server.pid)
        port = server.port
    record = _address.read(tmp_path)
    assert record is not None and record.state is State.STOPPED and record.port == port
    assert server.password not in (tmp_path / ADDRESS_FILE).read_text()
    assert _mode(tmp_path / ADDRESS_FILE) == 0o600
    async with start_server(tmp_path) as again:  # the next start keeps the port
        assert again.port == port
        async with open_bus(_address.url_of(tmp_path)[0]) as bus:
            assert await bus.transport.command("PING") in (b"PONG", "PONG")


@pytest.mark.server
async def test_a_recorded_port_taken_meanwhile_is_replaced_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with start_server(tmp_path) as server:
        port = server.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with caplog.at_level(logging.WARNING, logger="echomq_trio.server"):
            async with start_server(tmp_path) as moved:
                assert moved.port != port
                assert _address.recorded_port(tmp_path) == moved.port
    logged = [r.getMessage() for r in caplog.records if "is taken" in r.getMessage()]
    assert logged == [
        f"the port recorded in {tmp_path / ADDRESS_FILE} ({port}) is taken: the embedded server "
        f"listens on 127.0.0.1:{moved.port} now"
    ]


@pytest.mark.server
async def test_a_start_refused_for_a_busy_port_leaves_no_litter(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        busy = squatter.getsockname()[1]
        with pytest.raises(BusError, match="while starting on port"):
            async with start_server(tmp_path / "new", port=busy):
                pass
        assert _names(tmp_path) == [], "a directory made for a failed start was left"
        existing = tmp_path / "existing"
        existing.mkdir(mode=0o750)
        existing.chmod(0o750)
        (existing / "keep.txt").write_text("mine")
        with pytest.raises(BusError, match="while starting on port"):
            async with start_server(existing, port=busy):
                pass
        assert _names(existing) == ["keep.txt"]
        assert _mode(existing) == 0o750


@pytest.mark.server
async def test_a_failed_start_on_kept_data_leaves_the_data(tmp_path: Path) -> None:
    async with start_server(tmp_path) as server, open_bus(server.url) as bus:
        await jobs.enqueue(bus, "kept", "x")
    before = _names(tmp_path)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", free_port()))
        squatter.listen()
        with pytest.raises(BusError, match="while starting on port"):
            async with start_server(tmp_path, port=squatter.getsockname()[1]):
                pass
    assert _names(tmp_path) == before
    async with start_server(tmp_path) as server, open_bus(server.url) as bus:
        assert (await jobs.counts(bus, "kept")).pending == 1


async def test_no_server_binary_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECHOMQ_SERVER_BIN", "/nonexistent/no-server")
    with pytest.raises(ServerNotFound):
        async with start_server(tmp_path / "data"):
            pass
    assert _names(tmp_path) == []
