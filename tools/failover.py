"""The failover experiment: how many acknowledged writes a failover loses with
``durability.Replicas(1, 100)`` and without (``InMemory``), and what the wait costs. Prints one
JSON object.

    python3 -m tools.failover [--rounds 3] [--enqueuers 4] [--healthy-s 3] [--held-s 1]
                              [--backlog 20000] [--cluster]

Each round, for each mode in turn (the order alternates): a fresh primary and its replica (two
server processes of ``find_server_binary``, ``replicaof``, each with its append-only file);
a backlog of ``--backlog`` jobs enqueued first (and replicated: the acks made later are of jobs
the replica has, and jobs enqueued later wait behind them); then ``--enqueuers`` tasks enqueue
one job at a time (each with its own id) and one task claims and acks in batches of 8, all on
one bus. Every call that returns is written to a ledger
(this process: it outlives the kill). ``--healthy-s`` seconds of that measure throughput and
latency with replication in step; then replication is held back (``CLIENT PAUSE WRITE`` on the
replica: it takes nothing more from its primary's stream) for ``--held-s`` seconds of load; then
the primary is killed (``SIGKILL``) and the replica promoted (``REPLICAOF NO ONE``, as a
failover does: what it had not applied is dropped with its link; ``--cluster``: the two form a
cluster, every slot the primary's, and the replica takes over with ``CLUSTER FAILOVER
TAKEOVER``). Then, on the promoted replica:

* ``lost_enqueues``: enqueues that returned ``ENQUEUED`` (and whose job no ack was sent for)
  with no job row there: admitted, then gone;
* ``undone_acks``: acks that returned ``ACKED`` whose job row is there again: the job runs a
  second time;
* ``refused``: calls that raised ``NotReplicated`` (told; not in the ledger);
* ``enqueue_p50_ms``/``p99``, ``enqueues_per_s``, ``acks_per_s``: measured while healthy.

Expect losses without ``Replicas`` (everything acknowledged while held back) and none with.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import tempfile
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import trio

from echomq_trio import ids, jobs, open_bus
from echomq_trio._replies import as_text
from echomq_trio.durability import Durability, InMemory, NotReplicated, Replicas
from echomq_trio.errors import BusError
from echomq_trio.jobs import Outcome
from echomq_trio.resp import open_resp
from echomq_trio.server import (
    cluster_node_config,
    cluster_url,
    find_server_binary,
    form_cluster,
    free_port,
    server_argv,
    write_config,
)

PASSWORD = "failover"
QUEUE = "failover"


def _url(port: int) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{port}"


async def _command(port: int, *args: str) -> Any:
    async with open_resp(_url(port)) as wire:
        return await wire.command(*args)


async def _until(what: str, check: Any, within_s: float = 30) -> None:
    with trio.move_on_after(within_s):
        while True:
            with contextlib.suppress(BusError, OSError):
                if await check():
                    return
            await trio.sleep(0.05)
    raise RuntimeError(f"{what}: not within {within_s} s")


@contextlib.asynccontextmanager
async def _pair(
    root: Path, cluster: bool
) -> AsyncIterator[tuple[subprocess.Popen[bytes], int, int]]:
    """A primary and its replica (``cluster``: a cluster of the two, every slot the primary's)."""
    binary = find_server_binary()
    primary, replica = (free_port(with_bus_port=cluster) for _ in range(2))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, port in (("primary", primary), ("replica", replica)):
            folder = root / name
            folder.mkdir(parents=True)
            if cluster:
                extra = cluster_node_config(folder, PASSWORD)
            elif name == "replica":
                extra = [("replicaof", f"127.0.0.1 {primary}"), ("masterauth", PASSWORD)]
            else:
                extra = []
            config = write_config(folder, port, PASSWORD, extra)
            argv = server_argv(binary, config)
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))  # noqa: ASYNC220
        for port in (primary, replica):
            await _until("the server answering", partial(_command, port, "PING"))
        if cluster:
            await form_cluster([_url(primary)], [primary])
            node_id = as_text(await _command(primary, "CLUSTER", "MYID"))
            await _command(replica, "CLUSTER", "MEET", "127.0.0.1", str(primary))
            await _until("the replica of the node", partial(_command, replica, "CLUSTER",
                                                             "REPLICATE", node_id))  # fmt: skip

        async def linked() -> bool:
            info = as_text(await _command(primary, "INFO", "replication"))
            return "connected_slaves:1" in info and "state=online" in info

        await _until("the replica in step", linked)
        yield procs[0], primary, replica
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _bus_url(port: int, cluster: bool) -> str:
    return cluster_url(PASSWORD, [port]) + "&timeout_ms=2000" if cluster else _url(port)


async def _promote(replica: int, cluster: bool) -> None:
    """Make the replica the primary, as a failover does (its primary is dead)."""
    if not cluster:
        await _command(replica, "REPLICAOF", "NO", "ONE")
        return
    await _command(replica, "CLUSTER", "FAILOVER", "TAKEOVER")

    async def serving() -> bool:
        info = as_text(await _command(replica, "INFO", "replication"))
        return "role:master" in info

    await _until("the replica promoted", serving)


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


async def _one(durability: Durability, args: argparse.Namespace) -> dict[str, Any]:
    enqueued: list[str] = []
    acked: list[str] = []
    tried: set[str] = set()
    latencies: list[float] = []
    refused = 0
    healthy = True
    with tempfile.TemporaryDirectory() as folder:
        async with _pair(Path(folder), args.cluster) as (primary_proc, primary, replica):
            url = _bus_url(primary, args.cluster)
            if not args.cluster:
                url += "?timeout_ms=2000"
            async with open_bus(url, durability=durability) as bus:
                # A backlog, enqueued (and replicated) first: the acks made while replication is
                # held back are of jobs the replica has, and the jobs enqueued meanwhile wait
                # behind it (unclaimed) when the primary dies.
                for start in range(0, args.backlog, 1000):
                    n = min(1000, args.backlog - start)
                    await jobs.enqueue_many(bus.with_durability(Replicas(1, 60_000)), QUEUE,
                                            ["backlog"] * n)  # fmt: skip

                async def enqueuer() -> None:
                    nonlocal refused
                    while True:
                        job_id = ids.generate("JOB")
                        t = trio.current_time()
                        try:
                            await jobs.enqueue(bus, QUEUE, "x", job_id=job_id)
                        except NotReplicated:
                            refused += 1
                            continue
                        if healthy:
                            latencies.append(trio.current_time() - t)
                        enqueued.append(job_id)

                async def acker() -> None:
                    nonlocal refused
                    while True:
                        claimed = await jobs.claim(bus, QUEUE, 8)
                        if not claimed:
                            await trio.sleep(0.002)
                            continue
                        tried.update(j.id for j in claimed)
                        try:
                            got = await jobs.ack_many(
                                bus, QUEUE, [(j.id, j.token) for j in claimed]
                            )
                        except NotReplicated:
                            refused += 1
                            continue
                        acked.extend(j.id for j, o in zip(claimed, got, strict=True)
                                     if o == Outcome.ACKED)  # fmt: skip

                async def until_killed(fn: Any) -> None:
                    with contextlib.suppress(BusError):
                        await fn()

                async with trio.open_nursery() as nursery:
                    for _ in range(args.enqueuers):
                        nursery.start_soon(until_killed, enqueuer)
                    nursery.start_soon(until_killed, acker)
                    await trio.sleep(args.healthy_s)
                    healthy = False
                    healthy_enqueues, healthy_acks = len(enqueued), len(acked)
                    await _command(replica, "CLIENT", "PAUSE", "600000", "WRITE")
                    held_at = len(enqueued), len(acked)
                    await trio.sleep(args.held_s)
                    returned_while_held = len(enqueued) - held_at[0], len(acked) - held_at[1]
                    primary_proc.kill()
                    primary_proc.wait()
                    await _promote(replica, args.cluster)
                    await _command(replica, "CLIENT", "UNPAUSE")
                    await trio.sleep(0.3)  # the load meets the dead primary and ends
                    nursery.cancel_scope.cancel()
            async with open_bus(_bus_url(replica, args.cluster)) as promoted:
                k = promoted.keys(QUEUE)
                done = set(acked)
                lost = [j for j in enqueued if j not in tried
                        and not await promoted.command("EXISTS", k.job(j))]  # fmt: skip
                undone = [j for j in done if await promoted.command("EXISTS", k.job(j))]
    return {
        "lost_enqueues": len(lost),
        "undone_acks": len(undone),
        "refused": refused,
        "enqueues_returned": len(enqueued),
        "acks_returned": len(acked),
        "returned_while_held": {"enqueues": returned_while_held[0], "acks": returned_while_held[1]},
        "enqueues_per_s": healthy_enqueues / args.healthy_s,
        "acks_per_s": healthy_acks / args.healthy_s,
        "enqueue_p50_ms": 1000 * _pct(latencies, 0.5),
        "enqueue_p99_ms": 1000 * _pct(latencies, 0.99),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    modes: list[tuple[str, Durability]] = [
        ("in_memory", InMemory()),
        ("replicas_1_100", Replicas(1, 100)),
    ]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in modes}
    for r in range(args.rounds):
        for name, durability in modes if r % 2 == 0 else modes[::-1]:
            runs[name].append(await _one(durability, args))
    version = await trio.run_process([find_server_binary(), "--version"], capture_stdout=True)
    out: dict[str, Any] = {
        "args": vars(args),
        "server": version.stdout.decode().strip(),
        "cpus": os.cpu_count(),
        "runs": runs,
        "median": {},
        "total": {},
    }
    for name, results in runs.items():
        numbers = [k for k, v in results[0].items() if isinstance(v, int | float)]
        out["median"][name] = {k: statistics.median(r[k] for r in results) for k in numbers}
        out["total"][name] = {
            k: sum(r[k] for r in results) for k in ("lost_enqueues", "undone_acks", "refused")
        }
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--enqueuers", type=int, default=4)
    parser.add_argument("--healthy-s", type=float, default=3.0)
    parser.add_argument("--held-s", type=float, default=1.0)
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--cluster", action="store_true", help="a cluster of the two nodes")
    print(json.dumps(trio.run(main, parser.parse_args()), indent=2))
