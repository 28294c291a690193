"""What a server killed with SIGKILL loses of what it answered, per durability mode, on the
embedded server (append-only file, ``appendfsync everysec``): every trial starts a server on a
data directory of its own, kills it, lets its supervisor restart it from the file, and looks
for every job whose ``enqueue`` returned.

- ``first``: one enqueue on a new server (its first sync holds the bus's function library),
  then the kill;
- ``burst``: tasks enqueueing one job after another on a server in use, killed at a random
  moment 0.3-1.7 s into the burst (``--seed`` makes the moments repeat).

``open_bus`` with ``OnDisk`` asks a Valkey first whether its ``WAITAOF`` waits for the sync (a
few writes of its own, and one warning line per trial: it does not).

Prints one JSON object: per scenario and mode, the trials, the jobs answered and the jobs lost.

    python3 tools/bench_kill.py [--trials 20] [--tasks 16] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from typing import Any

import trio

from echomq_trio import BusError, ids, jobs, open_bus
from echomq_trio.durability import Durability, InMemory, OnDisk
from echomq_trio.server import EmbeddedServer, start_server

QUEUE = "kill"


async def _restarted(server: EmbeddedServer, restarts: int) -> None:
    with trio.fail_after(30):
        while server.restarts < restarts:  # noqa: ASYNC110 - the server has no event for it
            await trio.sleep(0.01)


async def _lost(url: str, answered: list[str]) -> int:
    """How many of the ``answered`` jobs the restarted server does not have."""
    with trio.fail_after(30):
        while True:  # the bus's connection comes back by itself
            try:
                async with open_bus(url) as bus:
                    return sum([await jobs.get_job(bus, QUEUE, job) is None for job in answered])
            except BusError:
                await trio.sleep(0.05)


async def _first(durability: Durability) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as folder:
        async with start_server(folder) as server:
            async with open_bus(server.url, durability=durability) as bus:
                job = ids.generate("JOB")
                await jobs.enqueue(bus, QUEUE, "one", job_id=job)
                server.kill()
            await _restarted(server, 1)
            return 1, await _lost(server.url, [job])


async def _burst(durability: Durability, tasks: int) -> tuple[int, int]:
    answered: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        async with start_server(folder) as server:
            async with open_bus(server.url, durability=durability) as bus:
                await jobs.enqueue(bus, QUEUE, "warm")  # the library loaded and synced
                await trio.sleep(1.5)

                async def enqueue_until_cancelled() -> None:
                    while True:
                        job = ids.generate("JOB")
                        try:
                            await jobs.enqueue(bus, QUEUE, "burst", job_id=job)
                        except BusError:  # the kill cut it: not answered
                            return
                        answered.append(job)

                async with trio.open_nursery() as nursery:
                    for _ in range(tasks):
                        nursery.start_soon(enqueue_until_cancelled)
                    await trio.sleep(random.uniform(0.3, 1.7))
                    server.kill()
                    nursery.cancel_scope.cancel()
            await _restarted(server, 1)
            return len(answered), await _lost(server.url, answered)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    random.seed(args.seed)
    modes: list[tuple[str, Durability]] = [("in_memory", InMemory()), ("on_disk", OnDisk())]
    out: dict[str, Any] = {"args": vars(args)}
    for scenario in ("first", "burst"):
        rows = out[scenario] = {name: {"trials": 0, "answered": 0, "lost": 0, "trials_losing": 0}
                                for name, _ in modes}  # fmt: skip
        for t in range(args.trials):
            for name, durability in modes if t % 2 == 0 else modes[::-1]:
                if scenario == "first":
                    answered, lost = await _first(durability)
                else:
                    answered, lost = await _burst(durability, args.tasks)
                row = rows[name]
                row["trials"] += 1
                row["answered"] += answered
                row["lost"] += lost
                row["trials_losing"] += lost > 0
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--seed", type=int, default=random.randrange(2**32))
    print(json.dumps(trio.run(main, parser.parse_args()), indent=2))
