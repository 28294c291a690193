"""An operator reaches the service's embedded server with ``echomq``, as a user runs both: by
``--data-dir``, and from the data directory's parent with no option at all; after a restart the
port is the same and the command still reaches it; a stopped or killed service is one line
naming the directory; the record is 0600 and the password is on no command line and in no log.
A start refused for a busy port leaves no directory behind, and an existing one as it was."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.support import (
    ROOT,
    Lines,
    all_cmdlines,
    processes_in,
    server_pid,
    start_service,
    wait_for,
)

pytestmark = pytest.mark.slow

SERVICE_QUEUES = {"cm.notify", "cm.game", "cm.updates"}
SERVER_LINE = r"server: redis://:\*\*\*@127\.0\.0\.1:(\d+)/0 \(data in \S+: echomq --data-dir "


async def echomq(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """``python -m echomq_trio *args`` in ``cwd``, with no ``ECHOMQ_URL`` in its environment."""
    env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_URL"}
    return await trio.run_process(
        [sys.executable, "-m", "echomq_trio", *args], cwd=cwd, env=env | {"PYTHONPATH": str(ROOT)},
        capture_stdout=True, capture_stderr=True, check=False,
    )  # fmt: skip


async def _lists_the_service_queues(*args: str, cwd: Path) -> bool:
    done = await echomq(*args, "--json", "queues", cwd=cwd)
    assert done.returncode == 0, done.stderr.decode()
    return {row["queue"] for row in json.loads(done.stdout)} >= SERVICE_QUEUES


def _one_line(done: subprocess.CompletedProcess[bytes]) -> str:
    assert done.returncode == 1 and done.stdout == b"", done
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


async def _start(data: Path) -> tuple[trio.Process, Lines, int]:
    """The service on ``data``, once it runs (its first screen shown): process, output, port."""
    proc = await start_service(data, "--summary-every", "0")
    out = Lines(proc)
    with trio.fail_after(60):
        port = int((await out.until(SERVER_LINE))[1])
        await out.until(r"updates: ")
    return proc, out, port


@pytest.mark.timeout_s(240)
async def test_echomq_reaches_the_service_by_its_data_dir_across_restarts(tmp_path: Path) -> None:
    data = tmp_path / "codemojex-data"  # the service's default name: found from tmp_path
    proc, out, port = await _start(data)
    try:
        record_path = data / "server.json"
        assert stat.S_IMODE(record_path.stat().st_mode) == 0o600
        record = json.loads(record_path.read_text())
        password = (data / "password").read_text().strip()
        assert record["state"] == "running" and record["port"] == port
        assert (record["owner_pid"], record["pid"]) == (proc.pid, server_pid(data))
        assert record["url"] == f"redis://:{password}@127.0.0.1:{port}"

        await wait_for(lambda: _lists_the_service_queues("--data-dir", str(data), cwd=ROOT),
                       timeout=60, step=0.5)  # fmt: skip
        found = await echomq("queues", cwd=tmp_path)  # no option: ./codemojex-data is found
        assert found.returncode == 0, found.stderr.decode()
        assert set(found.stdout.decode().split()) >= SERVICE_QUEUES
        assert found.stderr.decode() == (
            f"echomq: using the server recorded in {data} (127.0.0.1:{port}); --url or "
            "--data-dir names another\n"
        )
        assert not any(password.encode() in line for line in all_cmdlines())

        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await out.until(r"^stopped$")
            await proc.wait()
        assert proc.returncode == 0
        shown = "\n".join(await out.rest())
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stopped = json.loads(record_path.read_text())
    assert (stopped["state"], stopped["port"], stopped["url"]) == ("stopped", port, None)
    assert stat.S_IMODE(record_path.stat().st_mode) == 0o600
    line = _one_line(await echomq("--data-dir", str(data), "queues", cwd=ROOT))
    assert line.startswith(f"echomq: the server of {data} is stopped: its owner (pid {proc.pid})")

    again, out, port_again = await _start(data)  # a restart keeps the port
    try:
        assert port_again == port
        assert await _lists_the_service_queues(cwd=tmp_path)
        assert await _lists_the_service_queues("--data-dir", str(data), cwd=ROOT)
        again.kill()  # no clean stop: the record is left saying "running"
        await again.wait()
        shown += "\n".join(await out.rest())
    finally:
        if again.returncode is None:
            again.kill()
            await again.wait()
    await wait_for(lambda: processes_in(data) == [], timeout=20)  # its server died with it
    for args, cwd in ((["--data-dir", str(data)], ROOT), ([], tmp_path)):
        line = _one_line(await echomq(*args, "stats", "cm.notify", cwd=cwd))
        assert line.startswith(f"echomq: the server recorded in {data} (127.0.0.1:{port}, pid ")
        assert f"its owner (pid {again.pid}) ended without stopping it" in line
    logs = shown + (data / "server.log").read_text(errors="replace")
    assert password not in logs


def _busy_port() -> socket.socket:
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    return squatter


async def _refused(data: Path, busy: int) -> str:
    done = await trio.run_process(
        [sys.executable, "-m", "codemojex.run", "--data-dir", str(data), "--page-port",
         str(busy), "--feed-port", "0"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_stdout=True,
        capture_stderr=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done
    return done.stderr.decode()


async def test_a_start_refused_for_a_busy_port_leaves_no_litter(tmp_path: Path) -> None:
    with _busy_port() as squatter:
        busy = squatter.getsockname()[1]
        said = await _refused(tmp_path / "new" / "codemojex-data", busy)
        assert f"port {busy} on 127.0.0.1 is in use" in said
        assert list(os.scandir(tmp_path)) == [], "the refused start left a directory"
        existing = tmp_path / "existing"
        existing.mkdir()
        existing.chmod(0o755)
        (existing / "notes.txt").write_text("mine")
        await _refused(existing, busy)
        assert [e.name for e in os.scandir(existing)] == ["notes.txt"]
        assert stat.S_IMODE(existing.stat().st_mode) == 0o755
