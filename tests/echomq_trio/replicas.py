"""A primary and its replica, two test server processes (``replicaof``), for the tests of
``durability.Replicas``: started linked, the replica's replication held back on demand
(``CLIENT PAUSE WRITE`` on the replica: it takes nothing more from its primary's stream, and
acknowledges nothing more), the primary killed (``SIGKILL``) and the replica promoted
(``REPLICAOF NO ONE``: what it had not applied yet is dropped with its link, as a failover
would). And a cluster of primaries with a replica each (``replicated_cluster``), whose
primary is killed and replica promoted the same way (``CLUSTER FAILOVER TAKEOVER``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from functools import partial
from pathlib import Path

import attrs

from echomq_trio._replies import as_text
from echomq_trio.errors import BusError, ServerError
from echomq_trio.resp import open_resp
from echomq_trio.server import cluster_node_config, cluster_url, form_cluster, free_port
from tests.support import PASSWORD, start_test_server, stop_servers, wait_for

__all__ = ["Pair", "ReplicatedCluster", "replicated_cluster", "replicated_pair"]


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


async def _on(port: int, *args: str) -> object:
    async with open_resp(_url(port)) as wire:
        return await wire.command(*args)


async def _replicate(port: int, node_id: str) -> bool:
    try:
        await _on(port, "CLUSTER", "REPLICATE", node_id)
    except ServerError:  # the primary is not known to this node yet: try again
        return False
    return True


async def _in_step(port: int) -> bool:
    info = as_text(await _on(port, "INFO", "replication"))
    return "connected_slaves:1" in info and "state=online" in info


@attrs.define
class ReplicatedCluster:
    """A cluster of primaries (``primary_ports``, the slots shared in equal ranges in that
    order, as ``form_cluster`` shares them) with a replica each (``replica_ports``, in the same
    order); ``procs`` are the primaries' processes, then the replicas', each node's files in
    ``root / f"node{port}"``. After ``fail_over(i)`` and ``rejoin(i)`` the two nodes of pair
    ``i`` have swapped their roles (and their places in these lists)."""

    root: Path
    primary_ports: list[int]
    replica_ports: list[int]
    procs: list[subprocess.Popen[bytes]]

    @property
    def url(self) -> str:
        return cluster_url(PASSWORD, self.primary_ports)

    def owner(self, slot: int) -> int:
        """The index of the primary that serves ``slot`` (as ``form_cluster`` shares them)."""
        return min(slot // (16384 // len(self.primary_ports)), len(self.primary_ports) - 1)

    async def replica_command(self, i: int, *args: str) -> object:
        return await _on(self.replica_ports[i], *args)

    async def fail_over(self, i: int) -> None:
        """``kill -9`` primary ``i``, then make its replica the slots' owner without the
        cluster's vote (``CLUSTER FAILOVER TAKEOVER``: what it has not applied yet is lost, as
        in any failover), let its clients write (a replica held back with ``CLIENT PAUSE
        WRITE`` is let go) and return once it serves them and every live node says the
        cluster is ``ok``."""
        proc = self.procs[i]
        proc.kill()
        proc.wait()
        await self.replica_command(i, "CLUSTER", "FAILOVER", "TAKEOVER")
        await self.replica_command(i, "CLIENT", "UNPAUSE")
        live = [p for j, p in enumerate(self.primary_ports) if j != i]
        live += self.replica_ports

        async def promoted() -> bool:
            info = as_text(await self.replica_command(i, "INFO", "replication"))
            return "role:master" in info

        async def ok(port: int) -> bool:
            try:
                return "cluster_state:ok" in as_text(await _on(port, "CLUSTER", "INFO"))
            except BusError:
                return False

        await wait_for(promoted, timeout=20, step=0.05)
        for port in live:
            await wait_for(partial(ok, port), timeout=20, step=0.05)

    async def rejoin(self, i: int) -> None:
        """Start pair ``i``'s killed primary again on its files: it learns that its slots have
        a new owner and becomes its replica, so a write to them can be replicated again.
        Returns once it is in step; from then on the two have swapped places."""
        n = len(self.primary_ports)
        port = self.primary_ports[i]
        folder = self.root / f"node{port}"
        self.procs[i] = start_test_server(folder, cluster_node_config(folder, PASSWORD), port)
        self.primary_ports[i], self.replica_ports[i] = self.replica_ports[i], port
        self.procs[i], self.procs[n + i] = self.procs[n + i], self.procs[i]
        await wait_for(partial(_in_step, self.primary_ports[i]), timeout=30, step=0.05)


@contextlib.asynccontextmanager
async def replicated_cluster(root: Path, primaries: int) -> AsyncIterator[ReplicatedCluster]:
    """Start ``primaries`` cluster primaries (the slots shared) with a replica each in
    ``root``, every replica in step with its primary; stop them all on exit (a stopped one is
    continued first)."""
    procs: list[subprocess.Popen[bytes]] = []
    primary_ports = [free_port(with_bus_port=True) for _ in range(primaries)]
    replica_ports = [free_port(with_bus_port=True) for _ in range(primaries)]
    try:
        for port in primary_ports + replica_ports:
            folder = root / f"node{port}"
            procs.append(start_test_server(folder, cluster_node_config(folder, PASSWORD), port))
        await form_cluster([_url(p) for p in primary_ports], primary_ports)
        for primary, replica in zip(primary_ports, replica_ports, strict=True):
            node_id = as_text(await _on(primary, "CLUSTER", "MYID"))
            await _on(replica, "CLUSTER", "MEET", "127.0.0.1", str(primary_ports[0]))
            await wait_for(partial(_replicate, replica, node_id), timeout=20, step=0.1)
        for primary in primary_ports:
            await wait_for(partial(_in_step, primary), timeout=30, step=0.05)
        yield ReplicatedCluster(root, primary_ports, replica_ports, procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
        stop_servers(procs)
