"""The embedded server's operating rules, each caused for real: one owner per data directory, a
server killed with SIGKILL is restarted with its data, a server that keeps dying ends the block,
an owner killed with SIGKILL takes its server with it, a server left behind by an older crash is
stopped first, and the password is never on a command line or in a file others can read."""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from echomq_trio import BusError, ConnectionLost, ServerDied, ids, jobs, open_bus
from echomq_trio.server import (
    PID_FILE,
    find_server_binary,
    free_port,
    read_password,
    server_argv,
    start_server,
    write_config,
)
from servicekit.datadir import DataDir, InUse
from tests.support import (
    ROOT,
    all_cmdlines,
    aof_written,
    processes_in,
    read_line,
    stop_process,
    wait_for,
)

pytestmark = pytest.mark.server


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_password_is_on_no_command_line_and_files_are_private(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    async with start_server(folder) as server:
        assert server.pid is not None
        password = (folder / "password").read_text().strip()
        assert password == server.password and len(password) >= 32
        assert not any(password.encode() in line for line in all_cmdlines())
        assert _mode(folder) == 0o700
        for path in folder.rglob("*"):
            assert _mode(path) & 0o077 == 0, f"{path} is readable by others"
        # The server does require the password.
        async with open_bus(server.url) as bus:
            assert await bus.transport.command("CONFIG", "GET", "requirepass")


async def test_an_existing_world_readable_directory_is_made_private(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    async with start_server(folder):
        assert _mode(folder) == 0o700


async def test_an_empty_password_file_gets_a_new_password_never_none(tmp_path: Path) -> None:
    (tmp_path / "password").write_text("")  # a crash between create and write
    async with start_server(tmp_path) as server:
        assert len(server.password) >= 32
        assert (tmp_path / "password").read_text().strip() == server.password
        with pytest.raises(ConnectionLost, match=r"(?i)auth"):
            async with open_bus(f"redis://127.0.0.1:{server.port}") as bus:
                await bus.transport.command("SET", "k", "v")


def test_a_password_file_that_is_not_one_word_is_refused(tmp_path: Path) -> None:
    (tmp_path / "password").write_text("two words\n")
    with pytest.raises(BusError, match="one word of printable ASCII"):
        read_password(tmp_path)


async def test_a_second_owner_is_refused_before_starting_anything(tmp_path: Path) -> None:
    async with open_bus(data_dir=tmp_path) as bus:
        assert bus.server is not None
        assert processes_in(tmp_path) == [bus.server.pid]
        with pytest.raises(InUse, match=rf"{tmp_path}.* process {os.getpid()}"):
            async with open_bus(data_dir=tmp_path):
                pass
        assert processes_in(tmp_path) == [bus.server.pid], "a second server was started"
    # Released on exit: the next owner gets it.
    async with open_bus(data_dir=tmp_path):
        pass


async def test_an_owned_data_dir_is_shared_without_locking_twice(tmp_path: Path) -> None:
    with DataDir.own(tmp_path) as owned:
        async with open_bus(data_dir=owned) as bus:
            assert bus.server is not None and bus.server.data_dir == owned.path
        assert owned.lock.held  # still ours: open_bus did not release what it did not take


async def test_a_killed_server_is_restarted_with_its_data_on_the_same_port(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "echomq_trio.server")
    job = ids.generate("JOB")
    async with open_bus(data_dir=tmp_path) as bus:
        server = bus.server
        assert server is not None
        await jobs.enqueue(bus, "q", "kept", job_id=job)
        # What a killed server keeps is what it wrote to its file: an answered write may wait
        # there up to 2 s behind a sync still running (the first, of the bus's library, is
        # large), and a write that must survive a kill waits for the disk (``OnDisk``).
        await wait_for(partial(aof_written, bus.transport))
        first = server.pid
        server.kill()
        await wait_for(lambda: server.restarts == 1, timeout=30)
        assert server.pid != first and server.running
        # The same URL works again (the client reconnects by itself), with the data.
        (claimed,) = await jobs.claim(bus, "q")
        assert claimed.id == job
        assert processes_in(tmp_path) == [server.pid]
    lines = [r.getMessage() for r in caplog.records if r.name == "echomq_trio.server"]
    assert len(lines) == 1 and "killed by SIGKILL; restarted it" in lines[0], lines


async def test_a_server_that_keeps_dying_ends_the_block_with_server_died(tmp_path: Path) -> None:
    with pytest.raises(ServerDied, match="giving up") as info:
        async with start_server(tmp_path, max_restarts=2, restart_window_s=60) as server:
            for n in range(3):
                server.kill()
                if n < 2:
                    await wait_for(lambda n=n: server.restarts == n + 1, timeout=30)  # type: ignore[misc]
            await trio.sleep_forever()  # ended by the supervisor
    assert "3 deaths within 60 s" in str(info.value)
    assert processes_in(tmp_path) == []


async def test_the_body_error_comes_out_as_it_was(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        async with start_server(tmp_path):
            raise KeyError("mine")


_OWNER = """
import sys, trio
from echomq_trio import open_bus
async def main():
    async with open_bus(data_dir=sys.argv[1]) as bus:
        print(bus.server.pid, flush=True)
        await trio.sleep_forever()
trio.run(main)
"""


async def test_an_owner_killed_with_sigkill_takes_its_server_with_it(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    owner = await trio.lowlevel.open_process(
        [sys.executable, "-c", _OWNER, str(tmp_path)], env=env, stdout=subprocess.PIPE
    )
    try:
        server_pid = int(await read_line(owner))
        # Past trio's worker-thread idle timeout (10 s) would matter if the fork were done
        # from a worker thread; it is not, so the server lives as long as its owner.
        assert processes_in(tmp_path) == [server_pid]
        owner.send_signal(signal.SIGKILL)
        await owner.wait()
        t0 = trio.current_time()
        await wait_for(lambda: processes_in(tmp_path) == [], timeout=2)
        assert trio.current_time() - t0 < 2
    finally:
        if owner.returncode is None:
            owner.kill()
            await owner.wait()
    # The next owner starts cleanly on the same files.
    async with open_bus(data_dir=tmp_path) as bus:
        assert await bus.transport.command("PING") == b"PONG"


async def test_a_server_left_behind_by_an_older_crash_is_stopped_first(tmp_path: Path) -> None:
    # An older owner that crashed without taking its server along: a server running in the
    # data directory, not our child, with its pid in server.pid.
    password = read_password(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port, password)
    stray = await trio.lowlevel.open_process(
        server_argv(find_server_binary(), config), stdout=subprocess.DEVNULL
    )
    try:
        (tmp_path / PID_FILE).write_text(f'{{"pid": {stray.pid}}}\n')
        await wait_for(lambda: stray.pid in processes_in(tmp_path), timeout=10)
        async with start_server(tmp_path) as server:
            assert stray.pid not in processes_in(tmp_path), "the left-behind server still runs"
            assert processes_in(tmp_path) == [server.pid]
            assert await stray.wait() == 0  # it was asked to stop (SIGTERM), not killed
    finally:
        await stop_process(stray)


async def test_a_pid_file_naming_someone_else_is_left_alone(tmp_path: Path) -> None:
    # A reused pid: a live process that is not a server in this directory is never signalled.
    (tmp_path / PID_FILE).write_text(f'{{"pid": {os.getpid()}}}\n')
    async with start_server(tmp_path):
        pass  # we are still alive to tell


def test_start_server_checks_its_restart_budget() -> None:
    async def main() -> None:
        async with start_server(max_restarts=-1):
            pass

    with pytest.raises(ValueError, match="max_restarts"):
        trio.run(main)
