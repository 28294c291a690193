"""A primary and its replica, two test server processes (``replicaof``), for the tests of
``durability.Replicas``: started linked, the replica's replication held back on demand
(``CLIENT PAUSE WRITE`` on the replica: it takes nothing more from its primary's stream, and
acknowledges nothing more), the primary killed (``SIGKILL``) and the replica promoted
(``REPLICAOF NO ONE``: what it had not applied yet is dropped with its link, as a failover
would)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from echomq_trio._replies import as_text
from echomq_trio.resp import open_resp
from echomq_trio.server import free_port
from tests.support import PASSWORD, start_test_server, stop_servers, wait_for

__all__ = ["Pair", "replicated_pair"]


def _url(port: int) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{port}"


@attrs.define
class Pair:
    """A primary (``primary_url``) and its replica (``replica_url``)."""

    primary: subprocess.Popen[bytes]
    replica: subprocess.Popen[bytes]
    primary_port: int
    replica_port: int

    @property
    def primary_url(self) -> str:
        return _url(self.primary_port)

    @property
    def replica_url(self) -> str:
        return _url(self.replica_port)

    async def replica_command(self, *args: str) -> object:
        async with open_resp(self.replica_url) as wire:
            return await wire.command(*args)

    async def linked(self, within_s: float = 20) -> None:
        """Return once the replica is online and in step with its primary."""

        async def in_step() -> bool:
            async with open_resp(self.primary_url) as wire:
                info = as_text(await wire.command("INFO", "replication"))
                return "connected_slaves:1" in info and "state=online" in info

        await wait_for(in_step, timeout=within_s, step=0.05)

    async def hold_back(self) -> None:
        """The replica takes nothing more from its primary's stream (and acknowledges nothing)
        until ``release``."""
        await self.replica_command("CLIENT", "PAUSE", "600000", "WRITE")

    async def release(self) -> None:
        await self.replica_command("CLIENT", "UNPAUSE")

    async def fail_over(self) -> None:
        """``kill -9`` the primary, then promote the replica (held back or not: what it has not
        applied is dropped with its link) and let its clients write."""
        self.primary.kill()
        self.primary.wait()
        await self.replica_command("REPLICAOF", "NO", "ONE")
        await self.release()


@contextlib.contextmanager
def replicated_pair(root: Path, primary_extra: Sequence[tuple[str, str]] = ()) -> Iterator[Pair]:
    """Start a primary (with ``primary_extra`` settings) and a replica of it in ``root``; stop
    both on exit."""
    primary_port, replica_port = free_port(), free_port()
    procs = [start_test_server(root / "primary", list(primary_extra), primary_port)]
    try:
        link = [("replicaof", f"127.0.0.1 {primary_port}"), ("masterauth", PASSWORD)]
        procs.append(start_test_server(root / "replica", link, replica_port))
        yield Pair(procs[0], procs[1], primary_port, replica_port)
    finally:
        stop_servers(procs)
