"""Helpers shared by tests of both packages: the test servers the fixtures start (password
``PASSWORD``); helper processes started from a test (and ended
with it), processes of a data directory, and running ``python -m codemojex.run`` as a user
does, reading its output line by line; samples of a Prometheus scrape by name and labels;
garbage put in the middle of a stopped server's append-only file, and ``echomq`` run on it;
whether a server has written what it answered to that file; the
live Python memory blocks a module's code allocated (``tracemalloc``); ``wait_for``, a poll of a
condition with a deadline; ``SteppingServer``, the handle of a server whose clock a test steps
(the fixture that starts it is ``stepping_server`` in ``tests/conftest.py``); which server the
tests start (Valkey or Redis), for the few tests of one server's own behaviour. Helpers live here
and are imported from here; ``tests/conftest.py`` holds fixtures and hooks only."""

from __future__ import annotations

import functools
import gc
import inspect
import json
import linecache
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from echomq_trio.errors import ServerNotFound
from echomq_trio.resp import open_resp
from echomq_trio.server import find_server_binary, server_argv, write_config
from echomq_trio.transport import Transport

ROOT = Path(__file__).resolve().parents[1]


@asynccontextmanager
async def spawn(
    *args: str, module: str = "tests.echomq_trio.proc", env: Mapping[str, str] | None = None
) -> AsyncIterator[trio.Process]:
    """Run ``python -m module *args`` (stdout piped, ``env`` added to the environment); SIGKILL
    it on exit if it is still running."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
            await proc.wait()


async def read_line(proc: trio.Process) -> str:
    """The next line ``proc`` writes to its stdout, without the line end."""
    assert proc.stdout is not None
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = await proc.stdout.receive_some(1)
        if not chunk:
            raise AssertionError(f"process ended before a line (code {proc.returncode})")
        buf += chunk
    return buf.decode().strip()


def processes_in(folder: Path) -> list[int]:
    """Live processes whose working directory is ``folder`` (a server chdirs to its data)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwd = os.readlink(entry / "cwd")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if Path(cwd) == folder.resolve() and state not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def all_cmdlines() -> list[bytes]:
    """The command line of every process on the machine."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes())
            except OSError:
                continue
    return lines


def server_pid(data_dir: Path) -> int:
    """The pid of the embedded server that owns ``data_dir`` now (from its pid file)."""
    return int(json.loads((data_dir / "server.pid").read_text())["pid"])


async def start_service(data_dir: Path, *args: str) -> trio.Process:
    """``python -m codemojex.run`` on ``data_dir`` with free ports; stdout+stderr piped. The
    test is skipped where the service cannot run: its embedded server keeps notices with
    ``OnDisk``, which needs ``WAITAOF`` (not on Redis 7.0; the service refuses it in one line)."""
    if "--url" not in args and not server_has_waitaof():
        pytest.skip("codemojex.run's embedded server needs WAITAOF for OnDisk (Redis 7.2+)")
    return await trio.lowlevel.open_process(
        [sys.executable, "-m", "codemojex.run", "--data-dir", str(data_dir), "--page-port", "0",
         "--feed-port", "0", *args],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


async def start_and_stop(
    data_dir: Path, ready: str, *args: str, stop: signal.Signals = signal.SIGTERM
) -> Lines:
    """``start_service(data_dir, *args)``, wait for a line matching ``ready``, send ``stop``
    and wait for a clean exit (status 0, within 15 s); its output. Killed if anything fails."""
    proc = await start_service(data_dir, *args)
    try:
        out = Lines(proc)
        with trio.fail_after(60):
            await out.until(ready)
        proc.send_signal(stop)
        with trio.fail_after(15):
            await proc.wait()
        assert proc.returncode == 0, "\n".join(await out.rest())
        return out
    finally:
        await stop_process(proc)


async def stop_process(proc: trio.Process) -> None:
    """SIGKILL ``proc`` if it still runs, and reap it."""
    if proc.returncode is None:
        proc.kill()
    with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
        await proc.wait()


class Lines:
    """The output of a process, line by line; ``until`` waits for a line matching a pattern."""

    def __init__(self, proc: trio.Process) -> None:
        assert proc.stdout is not None
        self.stream = proc.stdout
        self.buf = b""
        self.seen: list[str] = []

    async def until(self, pattern: str, *, timeout_s: float | None = None) -> re.Match[str]:
        """The first line from here on that matches ``pattern``. With ``timeout_s``, a line
        not seen in time fails with what the process said meanwhile."""
        if timeout_s is not None:
            with trio.move_on_after(timeout_s):
                return await self.until(pattern)
            raise AssertionError(
                f"no line matching {pattern!r} in {timeout_s} s; output:\n" + "\n".join(self.seen)
            )
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode(errors="replace")
                self.seen.append(text)
                if m := re.search(pattern, text):
                    return m
            chunk = await self.stream.receive_some(4096)
            if not chunk:
                raise AssertionError("process ended; output:\n" + "\n".join(self.seen))
            self.buf += chunk

    async def rest(self) -> list[str]:
        """Everything until the process closes its output."""
        while chunk := await self.stream.receive_some(4096):
            self.buf += chunk
        self.seen += [t.decode(errors="replace") for t in self.buf.split(b"\n") if t]
        self.buf = b""
        return self.seen

    def text(self) -> str:
        return "\n".join(self.seen)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample by name and sorted labels."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def aof_written(transport: Transport) -> bool:
    """Whether the server has written every write it answered to its append-only file (its
    ``aof_buffer_length`` is 0), so a server process killed now keeps them. With ``appendfsync
    everysec``, Redis and Valkey hold their writes (and answer them all the same) while the
    last second's sync of the file is still running, for up to 2 s."""
    info = await transport.command("INFO", "persistence")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "\naof_buffer_length:0\r" in text


GARBAGE = b"\x00GARBAGE-in-the-middle!\x00"  # 24 bytes


def damage_aof(data_dir: Path, after: int = 0) -> tuple[Path, int]:
    """Put ``GARBAGE`` into the last file of a stopped server's append-only file, at the first
    command that begins past the middle of its bytes from ``after`` on: the server refuses the
    file from there. The file and the offset of the damage."""
    folder = data_dir / "appendonlydir"
    manifest = next(folder.glob("*.manifest")).read_text()
    last = [line.split()[1] for line in manifest.splitlines() if " type i" in line][-1]
    path = folder / last
    data = path.read_bytes()
    at = data.index(b"\r\n*", after + (len(data) - after) // 2) + 2
    path.write_bytes(data[:at] + GARBAGE + data[at:])
    return path, at


@functools.cache
def _server_version_line() -> str:
    """What the server the tests start (``find_server_binary``: Valkey by default, Redis with
    ``ECHOMQ_SERVER_BIN`` naming one) says of itself with ``--version``; ``""`` where no server
    can run (the fast tier, which selects no test that asks)."""
    try:
        binary = find_server_binary()
    except ServerNotFound:
        return ""
    done = subprocess.run([binary, "--version"], capture_output=True, text=True)
    return done.stdout


def server_is_valkey() -> bool:
    """Whether the server the tests start is Valkey."""
    return _server_version_line().startswith("Valkey")


def server_version() -> tuple[int, int]:
    """The server's version as (major, minor); Valkey counts as Redis 7.2 or later, as its
    commands are (and a server whose version cannot be read as the newest)."""
    found = re.search(r"v=(\d+)\.(\d+)", _server_version_line())
    if server_is_valkey() or found is None:
        return (99, 0)
    return (int(found[1]), int(found[2]))


def server_has_waitaof() -> bool:
    """Whether the server has ``WAITAOF`` (Valkey, Redis 7.2 and later; not Debian's Redis
    7.0). Other 7.2 additions the tests meet (``ZRANK … WITHSCORE``) ask ``server_version``."""
    return server_version() >= (7, 2)


def server_rewrites_its_manifest_at_a_start() -> bool:
    """Whether the server rewrites its append-only file's manifest at every start, so cannot
    start on a full disk: Redis 8 does; Valkey 9 and Redis 7.0 do not (7.2 and 7.4 untried)."""
    return not server_is_valkey() and server_version() >= (8, 0)


needs_waitaof = pytest.mark.skipif(
    not server_has_waitaof(), reason="the server has no WAITAOF (Redis 7.2 and later have it)"
)

# libfaketime (Debian's faketime package; .ci/run installs it): a server whose clock a test steps.
FAKETIME_LIBS = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))


def faketime_env(offset_file: Path) -> dict[str, str]:
    """The environment that runs a process under libfaketime at the offset ``offset_file`` holds
    (read afresh on every call; the monotonic clock untouched)."""
    return {
        "LD_PRELOAD": str(FAKETIME_LIBS[0]),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


@functools.cache
def server_runs_under_faketime() -> bool:
    """Whether the server binary runs under libfaketime at all: Debian's Redis 7.0 (linked to
    the system's shared jemalloc) hangs at its first clock read there, even for ``--version``,
    so the tests that step its clock cannot run on it. ``True`` where no server can run."""
    if not FAKETIME_LIBS:
        return True  # the fixture says libfaketime is missing
    try:
        binary = find_server_binary()
    except ServerNotFound:
        return True
    with tempfile.TemporaryDirectory() as folder:
        offset = Path(folder) / "faketime"
        offset.write_text("+0\n")
        try:
            subprocess.run(
                [binary, "--version"], env=dict(os.environ, **faketime_env(offset)),
                capture_output=True, timeout=5, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
    return True


async def echomq(*args: str) -> subprocess.CompletedProcess[bytes]:
    """``python -m echomq_trio *args`` as an operator runs it: its exit status and output."""
    return await trio.run_process(
        [sys.executable, "-m", "echomq_trio", *args], cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL,
        capture_stdout=True, capture_stderr=True, check=False,
    )  # fmt: skip


@contextmanager
def tracing(frames: int = 25) -> Iterator[None]:
    """Trace Python's allocations (``tracemalloc``) for the block, keeping ``frames`` frames of
    each allocation's traceback, deep enough to reach the module that asked for it."""
    tracemalloc.start(frames)
    try:
        yield
    finally:
        tracemalloc.stop()


def traced_blocks(path_suffix: str) -> int:
    """How many live blocks were allocated with the file ``path_suffix`` (a path's end, such as
    ``"codemojex/game/feed.py"``) on the way, after a full garbage collection: what that
    module's code holds now, directly or through what it called. Not counted: what CPython
    3.11's ``BaseExceptionGroup.split`` allocated (it keeps something of its calls, a few
    hundred blocks at most, whoever calls it; trio splits the ``Cancelled`` out of every
    cancelled nursery)."""
    gc.collect()
    path_suffix = os.sep + path_suffix.replace("/", os.sep)
    by_traceback = tracemalloc.take_snapshot().statistics("traceback")
    return sum(s.count for s in by_traceback
               if any(f.filename.endswith(path_suffix) for f in s.traceback)
               and not _splits(s.traceback[-1]))  # fmt: skip


def _splits(frame: tracemalloc.Frame) -> bool:
    return ".split(" in linecache.getline(frame.filename, frame.lineno)


async def wait_for(
    condition: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout: float = 20,  # noqa: ASYNC109 - the deadline is the point of this helper
    step: float = 0.01,
) -> None:
    """Poll ``condition`` until true; fail with a clear message after ``timeout`` seconds."""
    with trio.move_on_after(timeout):
        while True:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await trio.sleep(step)
    raise AssertionError(f"condition not met within {timeout}s")


class SteppingServer:
    """A server of its own whose clock (``TIME``, key expiry: the wall clock, not its monotonic
    one) the test steps with ``step(seconds)``, as NTP or an operator would."""

    def __init__(self, url: str, offset_file: Path) -> None:
        self.url = url
        self.offset_file = offset_file
        self.offset_s = 0.0

    async def step(self, seconds: float) -> None:
        """Step the server's clock by ``seconds``, and return once the server tells the stepped
        time (under load a server has been seen to answer a few calls at its old time first,
        which would make the step land later than the test meant)."""
        self.offset_s += seconds
        tmp = self.offset_file.with_suffix(".tmp")
        tmp.write_text(f"{self.offset_s:+.3f}\n")
        os.replace(tmp, self.offset_file)  # libfaketime never reads half a file
        async with open_resp(self.url) as server:
            with trio.fail_after(10):
                while True:
                    told = await server.server_time_ms()
                    if abs(told - (time.time() + self.offset_s) * 1000) < 2_000:
                        return
                    await trio.sleep(0.01)


# --- test servers (the fixtures in tests/conftest.py start them) -------------------------------

PASSWORD = "test-" + uuid.uuid4().hex[:12]  # every test server's


def wait_server_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """Block until the test server on ``port`` answers ``PING`` (sync: for fixtures)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(f"AUTH {PASSWORD}\r\nPING\r\n".encode())
                data = b""
                while b"PONG" not in data and b"-" not in data:
                    chunk = s.recv(100)
                    if not chunk:
                        break
                    data += chunk
                if b"PONG" in data:
                    return
        except OSError:
            pass
        time.sleep(0.05)  # sync fixture, outside any trio run
    raise RuntimeError(f"server on {port} not ready in {timeout}s")


def start_test_server(
    folder: Path, extra: list[tuple[str, str]], port: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A test server (``find_server_binary``, password ``PASSWORD``) in ``folder`` on ``port``,
    with ``extra`` config lines, answering once this returns; one that never answers is killed
    (a server hung at its start is not left behind)."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = server_argv(find_server_binary(), write_config(folder, port, PASSWORD, extra))
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env and {**os.environ, **env}
    )
    try:
        wait_server_ready(port, proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def stop_servers(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop test servers: SIGTERM, then SIGKILL after 10 s."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
