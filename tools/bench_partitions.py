"""Partitioned queues on a 3-primary cluster: how one queue's work spreads over the primaries,
and its throughput with 1 partition and with 3, in the same run. Prints ONE JSON object on
stdout, progress and a short table on stderr.

Run ``PYTHONPATH=. python3 tools/bench_partitions.py`` (about a minute; ``--rounds``,
``--flat``, ``--lanes``, ``--per-lane`` to change it). It starts three cluster nodes of its
own in a temporary folder (``server.form_cluster``: slots 0-5460, 5461-10921, 10922-16383, the
split a 3-primary cluster has), and stops them at the end.

Each run admits ``--flat`` flat jobs (``PartitionedQueue.enqueue_many``, 500 a call) and
``--lanes`` lanes of ``--per-lane`` jobs each (``lane_enqueue_many``, one call a lane), then
drains them with no-op handlers (``PartitionedConsumer``, ``concurrency`` 32 a partition; with
1 partition one ``Consumer`` of 32) until every job is acked. Runs alternate 1 partition and 3,
``--rounds`` times each, on a flushed cluster; the medians are reported.

What each number means, per run:

* ``per_s``: jobs over the run's whole time (admission, then the drain), and ``drain_per_s``
  over the drain alone.
* ``nodes``: per primary, ``server_ms``: the server's time in commands (``INFO commandstats``,
  the sum of every command's ``usec``, reset before the run: scripts included, the time each
  script runs), and ``cpu_ms``: the server process's CPU (``INFO cpu``, ``used_cpu_sys`` +
  ``used_cpu_user``, before and after; it also counts the cluster bus and the event loop).
* ``partitions_jobs``: the jobs each partition ran, and ``partitions_node`` the primary that
  holds it (lanes are few, so their hash shares them out unevenly: 200 lanes fall 65/60/75).
* ``spread``: max / min of ``server_ms`` (and of ``cpu_ms``) over the three primaries, and
  ``off_mean``: the largest distance of a primary's ``server_ms`` from their mean, as a
  fraction (issue 28's goal: within 0.20 with 3 partitions). ``top``: per primary, the three
  commands that took the most of its time (calls, ms).

This machine has 2 cores for the client (one Python process) and three servers: the client is
the bottleneck, so 3 partitions cannot show more throughput here than 1; the spread of the
server's work is what this shows. On a machine with a core per primary and several client
processes, throughput of one queue would grow with the primaries (not measured here).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

from echomq_trio import Job, jobs, open_bus, partitions
from echomq_trio._replies import as_text
from echomq_trio.resp import open_resp
from echomq_trio.resp._cluster import SLOTS, key_slot
from echomq_trio.server import (
    cluster_node_config,
    cluster_url,
    find_server_binary,
    form_cluster,
    free_port,
    server_argv,
    write_config,
)

PASSWORD = "bench-partitions"
QUEUE = "bench.parts"
CONCURRENCY = 32  # handlers per partition's consumer
FLAT_BATCH = 500


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _url(port: int) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{port}"


async def _command(port: int, *args: str) -> Any:
    async with open_resp(_url(port)) as wire:
        return await wire.command(*args)


async def _info(port: int, section: str) -> dict[str, str]:
    text = as_text(await _command(port, "INFO", section))
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key: value.strip() for key, value in pairs}


@contextlib.asynccontextmanager
async def cluster(root: Path) -> AsyncIterator[list[int]]:
    """Three fresh cluster nodes sharing the slots evenly; their ports."""
    binary = find_server_binary()
    ports = [free_port(with_bus_port=True) for _ in range(3)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, port in enumerate(ports):
            folder = root / f"node{i}"
            folder.mkdir(parents=True)
            config = write_config(folder, port, PASSWORD, cluster_node_config(folder, PASSWORD))
            argv = server_argv(binary, config)
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))  # noqa: ASYNC220
        for port in ports:
            with trio.fail_after(30):
                while True:
                    try:
                        await _command(port, "PING")
                        break
                    except Exception:  # not up yet
                        await trio.sleep(0.05)
        await form_cluster([_url(p) for p in ports], ports)
        yield ports
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _node(slot: int, nodes: int) -> int:
    """The node (by index) of ``slot`` under ``server.form_cluster``'s split."""
    return min(slot // (SLOTS // nodes), nodes - 1)


async def _cpu_ms(port: int) -> float:
    fields = await _info(port, "cpu")
    return (float(fields["used_cpu_sys"]) + float(fields["used_cpu_user"])) * 1000


async def _commands(port: int) -> dict[str, tuple[int, int]]:
    """Each command's calls and usec since the stats were reset (``INFO commandstats``)."""
    out = {}
    for key, value in (await _info(port, "commandstats")).items():
        if key.startswith("cmdstat_"):
            parts = dict(p.split("=", 1) for p in value.split(","))
            out[key.removeprefix("cmdstat_")] = (int(parts["calls"]), int(parts["usec"]))
    return out


async def one_run(ports: list[int], n: int, args: argparse.Namespace) -> dict[str, Any]:
    for port in ports:
        await _command(port, "FLUSHALL")
        await _command(port, "CONFIG", "RESETSTAT")
    cpu_before = [await _cpu_ms(p) for p in ports]
    total = args.flat + args.lanes * args.per_lane
    acked = 0

    async def handler(job: Job) -> None:
        nonlocal acked
        acked += 1

    async with open_bus(cluster_url(PASSWORD, ports)) as bus:
        pq = await partitions.create(bus, QUEUE, n)
        start = trio.current_time()
        payload = b"x" * 100
        for first in range(0, args.flat, FLAT_BATCH):
            await pq.enqueue_many([payload] * min(FLAT_BATCH, args.flat - first))
        for lane in range(args.lanes):
            await pq.lane_enqueue_many(f"chat{lane}", [payload] * args.per_lane)
        admitted = trio.current_time()
        consumer = partitions.PartitionedConsumer(pq, handler, concurrency=CONCURRENCY)
        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            while consumer.statistics().acked < total:  # noqa: ASYNC110  # no hook for "acked"
                await trio.sleep(0.005)
            end = trio.current_time()
            nursery.cancel_scope.cancel()
        counts = await pq.counts()
        done = [(await jobs.counts(bus, name)).completed_total for name in pq.names]
        node_of = [_node(key_slot(bus.keys(name).meta), len(ports)) for name in pq.names]
    if counts.completed_total != total or counts.pending or counts.active:
        raise RuntimeError(f"{n} partitions: jobs left or lost: {counts}")
    commands = [await _commands(p) for p in ports]
    server = [sum(usec for _, usec in c.values()) / 1000 for c in commands]
    cpu = [await _cpu_ms(p) - b for p, b in zip(ports, cpu_before, strict=True)]
    mean = statistics.mean(server)
    return {
        "partitions": n,
        "jobs": total,
        "per_s": round(total / (end - start)),
        "drain_per_s": round(total / (end - admitted)),
        "nodes": [
            {"server_ms": round(s, 1), "cpu_ms": round(c, 1), "top": _top(cs)}
            for s, c, cs in zip(server, cpu, commands, strict=True)
        ],
        # jobs each partition ran, and the primary (by index) that holds it
        "partitions_jobs": done,
        "partitions_node": node_of,
        "spread": round(max(server) / max(min(server), 0.001), 3),
        "cpu_spread": round(max(cpu) / max(min(cpu), 0.001), 3),
        "off_mean": round(max(abs(s - mean) for s in server) / mean, 3),
    }


def _top(commands: dict[str, tuple[int, int]]) -> dict[str, list[int]]:
    """The three commands that took the most server time: name -> [calls, ms]."""
    ranked = sorted(commands.items(), key=lambda kv: -kv[1][1])[:3]
    return {name: [calls, round(usec / 1000)] for name, (calls, usec) in ranked}


def _median(runs: list[dict[str, Any]], field: str) -> float:
    return statistics.median(r[field] for r in runs)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as folder:
        async with cluster(Path(folder)) as ports:
            runs: dict[int, list[dict[str, Any]]] = {1: [], 3: []}
            for r in range(args.rounds):
                for n in (1, 3) if r % 2 == 0 else (3, 1):
                    run = await one_run(ports, n, args)
                    log(f"round {r + 1}, {n} partition(s): {run['per_s']} jobs/s, server ms per "
                        f"primary {[x['server_ms'] for x in run['nodes']]}, spread "
                        f"{run['spread']}")  # fmt: skip
                    runs[n].append(run)
    summary = {
        str(n): {
            "per_s": _median(rs, "per_s"),
            "drain_per_s": _median(rs, "drain_per_s"),
            "spread": _median(rs, "spread"),
            "cpu_spread": _median(rs, "cpu_spread"),
            "off_mean": _median(rs, "off_mean"),
        }
        for n, rs in runs.items()
    }
    return {
        "command": " ".join(sys.argv),
        "jobs_per_run": args.flat + args.lanes * args.per_lane,
        "rounds": args.rounds,
        "median": summary,
        "ratio_3_over_1": round(summary["3"]["per_s"] / summary["1"]["per_s"], 3),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flat", type=int, default=20_000)
    parser.add_argument("--lanes", type=int, default=200)
    parser.add_argument("--per-lane", type=int, default=50)
    args = parser.parse_args(argv)
    out = trio.run(bench, args)
    for n, m in out["median"].items():
        log(f"{n} partition(s): {m['per_s']} jobs/s (drain {m['drain_per_s']}), spread of the "
            f"servers' time {m['spread']} (cpu {m['cpu_spread']}), off the mean "
            f"{m['off_mean']}")  # fmt: skip
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
