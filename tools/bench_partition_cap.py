"""A partitioned queue's cap on jobs in flight across its partitions, on a 3-primary cluster:
how much of the total the shares use when the work is skewed, against a fixed cap of
``ceil(total / 3)`` on each partition, and what one round costs. Prints ONE JSON object on
stdout, progress on stderr.

Run ``PYTHONPATH=. python3 tools/bench_partition_cap.py`` (well under a minute; ``--jobs``,
``--total``, ``--work-ms``, ``--share-ms``, ``--rounds`` to change it). It starts three cluster
nodes of its own (``bench_partitions.cluster``) and stops them at the end.

Each drain admits ``--jobs`` flat jobs to a queue of 3 partitions, skewed 70/20/10 over them,
and drains them with handlers that sleep ``--work-ms`` (``PartitionedConsumer``, ``concurrency``
the total on each partition, and a ``PartitionedMetronome`` with ``--share-ms``), once with the
queue-wide cap (``pq.set_limit(total)``: ``shared``) and once with ``queues.set_limit`` of
``ceil(total / 3)`` on each partition (``fixed``). A sampler reads every partition's jobs in
flight (``ZCARD`` of ``active``) every 10 ms.

What each number means, per drain:

* ``per_s``: jobs over the drain's time.
* ``in_flight_mean``: the mean of the sampled jobs in flight (all partitions added up), and
  ``use``: that over the total; ``in_flight_peak``: the most sampled (a sample is three reads,
  not one instant: the cap's guarantee is what the tests check, not this).
* ``round_ms``: ``pq.share_cap()`` on an idle queue, ``--rounds`` times: the median and the
  95th percentile of the client's time for one round (one call on partition 0, then one per
  partition, then lowers and raises where the shares move).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

from echomq_trio import Bus, Job, jobs, open_bus, partitions, queues
from echomq_trio._replies import as_text
from echomq_trio.server import cluster_url
from tools.bench_partitions import PASSWORD, cluster

SKEW = (0.7, 0.2, 0.1)  # the share of the jobs each partition gets
SAMPLE_S = 0.01


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def in_flight(bus: Bus, names: tuple[str, ...]) -> int:
    return sum([int(as_text(await bus.command("ZCARD", bus.keys(q).active))) for q in names])


async def drain(bus: Bus, queue: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    pq = await partitions.create(bus, queue, 3)
    if mode == "shared":
        await pq.set_limit(args.total)
    else:
        for q in pq.names:
            await queues.set_limit(bus, q, math.ceil(args.total / 3))
    for q, share in zip(pq.names, SKEW, strict=True):
        count = round(args.jobs * share)
        for start in range(0, count, 500):
            await jobs.enqueue_many(bus, q, [b"x"] * min(500, count - start))
    want = sum(round(args.jobs * s) for s in SKEW)

    finished, done = [0], trio.Event()

    async def handler(job: Job) -> None:
        await trio.sleep(args.work_ms / 1000)
        finished[0] += 1
        if finished[0] == want:
            done.set()

    consumer = partitions.PartitionedConsumer(pq, handler, concurrency=args.total)
    metronome = partitions.PartitionedMetronome(pq, beat_ms=100, share_ms=args.share_ms)
    samples: list[int] = []
    async with trio.open_nursery() as nursery:
        started = trio.current_time()
        await nursery.start(consumer.run)
        await nursery.start(metronome.run)

        async def sample() -> None:
            while True:
                samples.append(await in_flight(bus, pq.names))
                await trio.sleep(SAMPLE_S)

        nursery.start_soon(sample)
        await done.wait()
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    mean = statistics.fmean(samples) if samples else 0.0
    return {"per_s": round(want / took), "in_flight_mean": round(mean, 2),
            "use": round(mean / args.total, 3), "in_flight_peak": max(samples, default=0),
            "rounds": metronome.rounds}  # fmt: skip


async def round_cost(bus: Bus, queue: str, rounds: int) -> dict[str, float]:
    pq = await partitions.create(bus, queue, 3)
    await pq.set_limit(12)
    took = []
    for _ in range(rounds):
        sent = trio.current_time()
        await pq.share_cap()
        took.append((trio.current_time() - sent) * 1000)
    took.sort()
    return {"median": round(statistics.median(took), 3),
            "p95": round(took[int(len(took) * 0.95) - 1], 3)}  # fmt: skip


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="bench-cap-") as root:
        async with cluster(Path(root)) as ports, open_bus(cluster_url(PASSWORD, ports)) as bus:
            for mode in ("shared", "fixed"):
                log(f"drain, {mode} cap of {args.total} ...")
                out[mode] = await drain(bus, f"bench.cap.{mode}", mode, args)
                log(f"  {out[mode]}")
            out["round_ms"] = await round_cost(bus, "bench.cap.rounds", args.rounds)
            log(f"round: {out['round_ms']}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--total", type=int, default=12, help="the cap on jobs in flight")
    parser.add_argument("--work-ms", type=int, default=5, help="each handler's sleep")
    parser.add_argument("--share-ms", type=int, default=200, help="the rounds' period")
    parser.add_argument("--rounds", type=int, default=300, help="rounds timed on an idle queue")
    print(json.dumps(trio.run(bench, parser.parse_args(argv))))


if __name__ == "__main__":
    main()
