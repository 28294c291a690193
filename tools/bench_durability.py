"""What ``durability.OnDisk`` costs against the default ``InMemory``, measured on one embedded
server (append-only file, ``appendfsync everysec``) in one run, the modes taken in turn.

For each mode: one enqueue at a time (latency p50/p99, jobs/s), and enqueues from many tasks at
once (jobs/s: their waits share each sync of the file). Prints one JSON object. The modes:
``in_memory``; ``on_disk`` (``WAITAOF``, as through a URL); ``on_disk_synced`` (``WAITAOF``,
then a sync of the file from this process, as ``open_bus`` does for its embedded server).

    python3 tools/bench_durability.py [--sequential 200] [--tasks 64] [--each 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import trio

from echomq_trio import jobs, open_bus
from echomq_trio.durability import Durability, InMemory, OnDisk
from echomq_trio.server import start_server
from echomq_trio.storage import file_sync


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


async def _one_mode(
    url: str, durability: Durability, args: argparse.Namespace, folder: Path | None
) -> dict[str, Any]:
    async with open_bus(url, durability=durability) as bus:
        if folder is not None:
            assert bus.durable is not None
            bus.durable.sync_file = file_sync(folder)  # before the first call
        queue = f"bench.{type(durability).__name__}.{folder is not None}.{trio.current_time():.0f}"
        latencies = []
        t0 = trio.current_time()
        for i in range(args.sequential):
            t = trio.current_time()
            await jobs.enqueue(bus, queue, f"job {i}")
            latencies.append(trio.current_time() - t)
        sequential_s = trio.current_time() - t0

        async def task(n: int) -> None:
            for i in range(args.each):
                await jobs.enqueue(bus, queue, f"task {n} job {i}")

        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            for n in range(args.tasks):
                nursery.start_soon(task, n)
        concurrent_s = trio.current_time() - t0
    return {
        "sequential_per_s": args.sequential / sequential_s,
        "sequential_p50_ms": 1000 * _pct(latencies, 0.5),
        "sequential_p99_ms": 1000 * _pct(latencies, 0.99),
        "concurrent_per_s": args.tasks * args.each / concurrent_s,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    modes: list[tuple[str, Durability]] = [
        ("in_memory", InMemory()), ("on_disk", OnDisk()), ("on_disk_synced", OnDisk())
    ]  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in modes}
    with tempfile.TemporaryDirectory() as folder:
        async with start_server(folder) as server:
            for r in range(args.rounds):
                order = modes if r % 2 == 0 else modes[::-1]
                for name, durability in order:
                    synced = Path(folder) if name == "on_disk_synced" else None
                    runs[name].append(await _one_mode(server.url, durability, args, synced))
    out: dict[str, Any] = {"args": vars(args), "runs": runs, "median": {}}
    for name, results in runs.items():
        out["median"][name] = {k: statistics.median(r[k] for r in results) for k in results[0]}
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--each", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    print(json.dumps(trio.run(main, parser.parse_args()), indent=2))
