"""Benchmark of the echomq_trio job bus; prints ONE JSON object on stdout.

Run ``python tools/bench_bus.py [--url URL] [--quick] [--transport {glide,trio}]``. Without
``--url`` it starts the embedded server (``open_bus()`` with no URL: a redis-server child process
in a temporary directory). The machine this was written for has 2 noisy cores, so every figure is
measured in the same run and the JSON carries ratios against plain SET round trips, which are
less sensitive to that noise than absolute numbers. Stops by itself within about four minutes (a
hard limit cancels it). ``--transport`` is ``open_bus``'s (``trio`` by default, the bus's own,
``echomq_trio.resp``; or ``glide``), for this process and its worker alike.

What each number means (rates are operations per second of wall time):

* ``set_sequential_per_s``: ``await bus.transport.command("SET", key, "v")`` one at a time, so one
  client round trip each; the floor every other figure is compared with. It and
  ``enqueue_single_per_s`` are measured in turn, blocks of 50 calls each, 2 s of each in all.
* ``set_concurrent_per_s``: the same from 64 trio tasks at once (the client pipelines them).
* ``enqueue_single_per_s``: ``jobs.enqueue(bus, q, payload)`` one at a time (one EVALSHA round
  trip each, including minting the id); goal: >= 0.85 of ``set_sequential_per_s``.
  ``enqueue_single_concurrent_per_s`` is the same from 64 tasks (their enqueues coalesce into
  shared script calls); goal: >= 40,000 jobs/s.
* ``enqueue_batched_per_s``: ``jobs.enqueue_many`` with batches of 1,000 jobs, one at a time.
  Goal: >= 40,000 jobs/s.
* ``noop_throughput_per_s``: end to end with one consumer in a separate Python process. N jobs
  (50,000; 10,000 with ``--quick``) are enqueued first; the worker (this file, ``--worker``) runs
  ``Consumer(concurrency=64, prefetch=256, claim_batch=256)`` with a handler that does nothing and
  reports N divided by the time from starting to claim to the last ack. Goal: >= 10,000 jobs/s.
  ``noop_inprocess_per_s`` is the same with the consumer inside the benchmark process.
  ``noop_default_per_s`` is the worker process again with ``Consumer(bus, q, handler)``: no
  settings at all; goal: >= 0.9 of ``noop_throughput_per_s`` (the tuned one).
* ``lateness_ms``: 1,000 jobs scheduled with ``jobs.enqueue_at`` at run-at = server now + 500 ms +
  i * 2 ms (500 jobs/s coming due for 2 s), a ``Metronome(beat_ms=1000)`` and a ``Consumer`` in
  this process. Lateness is server time when the handler starts minus run-at; server time is
  estimated as local ``time.time()`` plus an offset measured once (the lowest-round-trip of 20
  ``TIME`` samples, read to the microsecond), so it carries an error of up to about half that
  round trip. Reported as
  p50/p99/max/min/count. Goal: p99 <= 10 ms. ``early_count`` counts jobs that started more than
  1 ms before their run-at (should be 0: a job must never run early).
* ``ratios``: each rate divided by a SET rate; ``goals``: whether each goal was met;
  ``details``: what was measured (durations, counts, checks of the queues afterwards).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from _bench import TUNED, drop_queue, enqueue_batches, info, run_noop_consumer, server_version

import echomq_trio
from echomq_trio import Bus, Consumer, Job, Metronome, RetryIn, jobs, open_bus
from echomq_trio.jobs import Outcome

CONCURRENT_TASKS = 64
BATCH = 1_000
PAYLOAD = b'{"kind":"bench","value":12345}'
HARD_LIMIT_S = 240.0  # the whole run is cancelled after this
WORKER_LIMIT_S = 120.0  # a worker that has not finished by then gives up
URL_ENV = "BENCH_BUS_URL"  # the worker's server URL (kept out of argv: it holds the password)
THIS_FILE = os.path.abspath(__file__)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(echomq_trio.__file__)))

GOAL_ENQUEUE_BATCHED_PER_S = 40_000
GOAL_NOOP_PER_S = 10_000
GOAL_ENQUEUE_VS_SET = 0.85
GOAL_ENQUEUE_CONCURRENT_PER_S = 40_000
GOAL_DEFAULT_VS_TUNED = 0.9
GOAL_LATENESS_P99_MS = 10.0
EARLY_TOLERANCE_MS = 1.0


# --- helpers -------------------------------------------------------------------------------


def _queue(label: str, run_id: str) -> str:
    return f"bench-{run_id}-{label}"


def _round(value: float, digits: int = 1) -> float:
    return round(value, digits)


def _percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    index = max(0, math.ceil(pct / 100 * len(ordered)) - 1)
    return ordered[index]


async def _interleaved_rates(
    ops: dict[str, Callable[[], Awaitable[object]]], duration_s: float, block: int = 50
) -> dict[str, float]:
    """Run each of ``ops`` back to back in blocks of ``block`` calls, taking the ops in turn
    until each has had ``duration_s``; each op's calls per second of its own time. Taking them
    in turn exposes every op to the same moments of the machine, so their ratio holds where two
    runs one after the other swing apart."""
    spent = dict.fromkeys(ops, 0.0)
    counts = dict.fromkeys(ops, 0)
    while min(spent.values()) < duration_s:
        for name, op in ops.items():
            start = trio.current_time()
            for _ in range(block):
                await op()
            spent[name] += trio.current_time() - start
            counts[name] += block
    return {name: counts[name] / spent[name] for name in ops}


async def _concurrent_rate(
    make_op: Callable[[int], Callable[[], Awaitable[object]]], tasks: int, duration_s: float
) -> float:
    """Run ``tasks`` loops of ``make_op(task_index)`` for ``duration_s``; operations per second."""
    counts = [0] * tasks
    start = trio.current_time()
    deadline = start + duration_s

    async def loop(index: int) -> None:
        op = make_op(index)
        while trio.current_time() < deadline:
            await op()
            counts[index] += 1

    async with trio.open_nursery() as nursery:
        for index in range(tasks):
            nursery.start_soon(loop, index)
    return sum(counts) / (trio.current_time() - start)


async def _server_load(bus: Bus) -> dict[str, Any]:
    """Server-side events that disturb timings (an append-only-file rewrite forks the server)."""
    fields = {**await info(bus, "persistence"), **await info(bus, "stats")}
    return {
        "aof_size_mb": _round(int(fields.get("aof_current_size", "0")) / 1e6),
        "aof_rewrites": int(fields.get("aof_rewrites", "0")),
        "forks": int(fields.get("total_forks", "0")),
        "latest_fork_ms": _round(int(fields.get("latest_fork_usec", "0")) / 1000, 2),
    }


async def _worker_main(queue: str, total: int, tuned: bool, transport: str) -> None:
    url = os.environ[URL_ENV]
    with trio.fail_after(WORKER_LIMIT_S):
        async with open_bus(url, transport=transport) as bus:
            result = await run_noop_consumer(bus, queue, total, tuned=tuned)
    print(json.dumps(result), flush=True)


async def _noop_subprocess(
    url: str, queue: str, total: int, *, transport: str, tuned: bool = True
) -> dict[str, Any]:
    # The worker imports echomq_trio from wherever this process did (PYTHONPATH may be unset).
    path = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, URL_ENV: url, "PYTHONPATH": path}
    argv = [sys.executable, THIS_FILE, "--worker", queue, str(total), "--transport", transport]
    if not tuned:
        argv.append("--defaults")
    with trio.fail_after(WORKER_LIMIT_S + 10):
        done = await trio.run_process(argv, capture_stdout=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker exited with code {done.returncode}")
    lines = done.stdout.decode().strip().splitlines()
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# --- scheduled-job lateness ----------------------------------------------------------------


async def _clock_offset(bus: Bus, samples: int = 20) -> tuple[float, float]:
    """(server ms - local ms, round trip ms) of the sample with the smallest round trip."""
    best: tuple[float, float] | None = None
    for _ in range(samples):
        before = time.time() * 1000
        secs, micros = await bus.transport.command("TIME")  # to the microsecond
        after = time.time() * 1000
        rtt = after - before
        offset = int(secs) * 1000 + int(micros) / 1000 - (before + after) / 2
        if best is None or rtt < best[1]:
            best = (offset, rtt)
    assert best is not None
    return best


async def bench_lateness(
    bus: Bus, queue: str, count: int = 1_000, lead_ms: int = 500, step_ms: int = 2
) -> dict[str, Any]:
    offset_ms, rtt_ms = await _clock_offset(bus)
    lateness: list[float] = []
    all_handled = trio.Event()

    async def handler(job: Job) -> RetryIn | None:
        server_now = time.time() * 1000 + offset_ms
        lateness.append(server_now - int(job.payload))
        if len(lateness) >= count:
            all_handled.set()
        return None

    consumer = Consumer(bus, queue, handler, concurrency=16)
    metronome = Metronome(bus, queue, beat_ms=1000)
    scheduled_late = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await nursery.start(consumer.run)
        base = await bus.transport.server_time_ms() + lead_ms
        started = trio.current_time()

        async def schedule(first: int) -> None:
            nonlocal scheduled_late
            for i in range(first, count, CONCURRENT_TASKS):
                run_at = base + i * step_ms
                got = await jobs.enqueue_at(bus, queue, str(run_at), run_at)
                if got.outcome is not Outcome.SCHEDULED:
                    raise RuntimeError(f"enqueue_at answered {got.outcome}")
                if time.time() * 1000 + offset_ms > run_at:
                    scheduled_late += 1

        async with trio.open_nursery() as scheduler:
            for first in range(CONCURRENT_TASKS):
                scheduler.start_soon(schedule, first)
        scheduling_ms = (trio.current_time() - started) * 1000
        with trio.move_on_after(lead_ms / 1000 + count * step_ms / 1000 + 10):
            await all_handled.wait()
        nursery.cancel_scope.cancel()
    ordered = sorted(lateness)
    if not ordered:
        raise RuntimeError("no scheduled job ran")
    return {
        "lateness_ms": {
            "p50": _round(_percentile(ordered, 50), 2),
            "p99": _round(_percentile(ordered, 99), 2),
            "max": _round(ordered[-1], 2),
            "min": _round(ordered[0], 2),
            "count": len(ordered),
        },
        "early_count": sum(1 for x in ordered if x < -EARLY_TOLERANCE_MS),
        "details": {
            "jobs": count,
            "clock_offset_ms": _round(offset_ms, 3),
            "clock_offset_rtt_ms": _round(rtt_ms, 3),
            "scheduling_took_ms": _round(scheduling_ms, 1),
            "scheduled_after_run_at": scheduled_late,
            "promoted": metronome.statistics().promoted,
            "over_10ms": sum(1 for x in ordered if x > GOAL_LATENESS_P99_MS),
            "sorted_ms": [_round(x, 2) for x in ordered],  # the distribution, for its figure
        },
    }


# --- the benchmark -------------------------------------------------------------------------


async def bench(url: str | None, quick: bool, transport: str = "trio") -> dict[str, Any]:
    duration_s = 1.0 if quick else 2.0
    noop_jobs = 10_000 if quick else 50_000
    run_id = uuid.uuid4().hex[:8]
    began = trio.current_time()
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "quick": quick,
        "transport": transport,
    }
    details: dict[str, Any] = {"duration_s_per_rate": duration_s, "tasks": CONCURRENT_TASKS}
    async with open_bus(url, transport=transport) as bus:
        server_url = bus.server.url if bus.server is not None else str(url)
        out["server"] = "url" if bus.server is None else "embedded"
        out["server_version"] = await server_version(bus)
        queues: list[str] = []

        def queue(label: str) -> str:
            name = _queue(label, run_id)
            queues.append(name)
            return name

        # 1. SET round trips.
        set_key = f"bench-{run_id}-set"

        async def set_once() -> object:
            return await bus.transport.command("SET", set_key, "v")

        for _ in range(200):
            await set_once()

        def set_op(index: int) -> Callable[[], Awaitable[object]]:
            key = f"{set_key}-{index}"
            return lambda: bus.transport.command("SET", key, "v")

        out["set_concurrent_per_s"] = _round(
            await _concurrent_rate(set_op, CONCURRENT_TASKS, duration_s)
        )

        # 2. Single enqueues.
        q_single = queue("single")

        async def enqueue_once() -> object:
            return await jobs.enqueue(bus, q_single, PAYLOAD)

        for _ in range(200):  # also loads the script
            await enqueue_once()
        rates = await _interleaved_rates({"set": set_once, "enqueue": enqueue_once}, duration_s)
        out["set_sequential_per_s"] = _round(rates["set"])
        out["enqueue_single_per_s"] = _round(rates["enqueue"])
        out["enqueue_single_concurrent_per_s"] = _round(
            await _concurrent_rate(lambda _: enqueue_once, CONCURRENT_TASKS, duration_s)
        )

        # 3 and 4. Batched enqueue (which also fills the queues of the no-op runs), then drain.
        q_sub = queue("noop-sub")
        q_default = queue("noop-default")
        q_in = queue("noop-in")
        batched_sub = await enqueue_batches(bus, q_sub, noop_jobs, PAYLOAD, BATCH)
        sub = await _noop_subprocess(server_url, q_sub, noop_jobs, transport=transport)
        batched_default = await enqueue_batches(bus, q_default, noop_jobs, PAYLOAD, BATCH)
        default = await _noop_subprocess(
            server_url, q_default, noop_jobs, transport=transport, tuned=False
        )
        batched_in = await enqueue_batches(bus, q_in, noop_jobs, PAYLOAD, BATCH)
        inproc = await run_noop_consumer(bus, q_in, noop_jobs)
        out["enqueue_batched_per_s"] = _round(batched_sub)
        out["noop_throughput_per_s"] = sub["per_s"]
        out["noop_default_per_s"] = default["per_s"]
        out["noop_inprocess_per_s"] = inproc["per_s"]
        after = [await jobs.counts(bus, q) for q in (q_sub, q_default, q_in)]
        details["enqueue_batched_runs_per_s"] = [
            _round(batched_sub), _round(batched_default), _round(batched_in)
        ]  # fmt: skip
        details["noop_subprocess"] = sub
        details["noop_default_subprocess"] = default
        details["noop_inprocess"] = inproc
        details["noop_tuned_settings"] = TUNED
        details["noop_queues_drained"] = all(
            c.pending == c.active == c.dead == 0 and c.completed_total == noop_jobs for c in after
        )

        # 5. Scheduled-job lateness.
        late = await bench_lateness(bus, queue("late"))
        out["lateness_ms"] = late["lateness_ms"]
        out["early_count"] = late["early_count"]
        details["lateness"] = late["details"]

        details["server_load"] = await _server_load(bus)
        if bus.server is None:  # a server we do not own: leave it as we found it
            for name in queues:
                await drop_queue(bus, name)
            await bus.transport.command(
                "DEL", set_key, *(f"{set_key}-{i}" for i in range(CONCURRENT_TASKS))
            )

    seq, conc = out["set_sequential_per_s"], out["set_concurrent_per_s"]
    out["ratios"] = {
        "enqueue_single_vs_set_sequential": _round(out["enqueue_single_per_s"] / seq, 3),
        "enqueue_single_concurrent_vs_set_concurrent": _round(
            out["enqueue_single_concurrent_per_s"] / conc, 3
        ),
        "enqueue_batched_vs_set_sequential": _round(out["enqueue_batched_per_s"] / seq, 3),
        "enqueue_batched_vs_set_concurrent": _round(out["enqueue_batched_per_s"] / conc, 3),
        "noop_vs_set_sequential": _round(out["noop_throughput_per_s"] / seq, 3),
        "noop_vs_set_concurrent": _round(out["noop_throughput_per_s"] / conc, 3),
        "noop_inprocess_vs_set_sequential": _round(out["noop_inprocess_per_s"] / seq, 3),
        "noop_inprocess_vs_noop": _round(
            out["noop_inprocess_per_s"] / out["noop_throughput_per_s"], 3
        ),
        "noop_default_vs_tuned": _round(
            out["noop_default_per_s"] / out["noop_throughput_per_s"], 3
        ),
    }
    out["goals"] = {
        "enqueue_batched_ge_40000": out["enqueue_batched_per_s"] >= GOAL_ENQUEUE_BATCHED_PER_S,
        "noop_ge_10000": out["noop_throughput_per_s"] >= GOAL_NOOP_PER_S,
        "lateness_p99_le_10ms": out["lateness_ms"]["p99"] <= GOAL_LATENESS_P99_MS,
        "none_early": out["early_count"] == 0,
        "enqueue_single_ge_085_set": out["ratios"]["enqueue_single_vs_set_sequential"]
        >= GOAL_ENQUEUE_VS_SET,
        "enqueue_64_tasks_ge_40000": out["enqueue_single_concurrent_per_s"]
        >= GOAL_ENQUEUE_CONCURRENT_PER_S,
        "noop_default_ge_090_tuned": out["ratios"]["noop_default_vs_tuned"]
        >= GOAL_DEFAULT_VS_TUNED,
    }
    details["total_s"] = _round(trio.current_time() - began, 1)
    out["details"] = details
    return out


async def _main(url: str | None, quick: bool, transport: str) -> None:
    with trio.fail_after(HARD_LIMIT_S):
        result = await bench(url, quick, transport)
    print(json.dumps(result, indent=2), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="server URL; default: start an embedded server")
    parser.add_argument("--quick", action="store_true", help="shorter runs, 10,000 no-op jobs")
    parser.add_argument(
        "--transport", choices=("glide", "trio"), default="trio", help="open_bus's transport"
    )
    parser.add_argument(
        "--worker",
        nargs=2,
        metavar=("QUEUE", "N"),
        help=f"internal: drain N jobs of QUEUE with a no-op consumer (URL from ${URL_ENV})",
    )
    parser.add_argument(
        "--defaults", action="store_true", help="internal: the worker runs an untuned Consumer"
    )
    args = parser.parse_args(argv)
    if args.worker:
        queue, total = args.worker
        trio.run(_worker_main, queue, int(total), not args.defaults, args.transport)
    else:
        trio.run(_main, args.url, args.quick, args.transport)


if __name__ == "__main__":
    main()
