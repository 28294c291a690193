"""Where a scheduled job's lateness goes, job by job: prints one block per load.

Run ``PYTHONPATH=<tree> python3 tools/bench_lateness_parts.py URL [--transport trio]`` against a
server on this host (its ``TIME`` and this process's ``time.time()`` read the same clock). A
``Metronome(beat_ms=1000)`` and a ``Consumer(concurrency=16)`` in this process; 100 jobs 30 ms
apart (light), then 1,000 jobs 2 ms apart (load), as ``bench_bus.bench_lateness`` schedules them.
For each job: its run-at to the send of the promote that moved it (the metronome's wake: the
server's whole-ms clock and trio's sleep), that promote's round trip, and its answer to the
handler's start (the wake push, the consumer's ``BLPOP`` returning, its claim, the dispatch).
The low percentiles (p10, p25) show the parts' systematic share where a loaded machine's
scheduling swamps p50 and p99.
Under load one beat moves several jobs, so the parts are each job's from the last beat before
its handler started (a job moved a beat earlier can show a negative wake).

Before each load, the machine's floor in the same run (``floor``): 100 times, a sleep to a
deadline 30 ms (light) or 2 ms (load) ahead on the metronome's timer (``_timer.sleep_until``),
then a ``PING`` on the bus's connection: how late the sleep ended (``sleep``), and the deadline to
the ``PING``'s answer (``+ ping``): a wake and one round trip, what a scheduled job's lateness
cannot go below here (the promote's own work and the claim's come on top). Its p99 beside the
total's tells the machine's tail from the bus's. Last, how many promotes were sent and how many
of them woke too early (moved nothing, with a job due within a ms of the server's reading)."""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import trio

from echomq_trio import Consumer, Job, Metronome, jobs, open_bus
from echomq_trio._timer import sleep_until

beats: list[tuple[float, float]] = []  # (sent, answered) wall ms of each promote that moved jobs
promotes: list[tuple[int, float]] = []  # (jobs moved, next due - server now ms) of each promote
_promote = Metronome._promote


async def _timed_promote(self: Metronome) -> Any:
    sent = time.time() * 1000
    p = await _promote(self)
    ahead = -1.0 if p.next_due_ms is None else p.next_due_ms - p.server_now_ms
    promotes.append((p.moved, ahead - getattr(p, "server_now_us", 0) / 1000))
    if p.moved:
        beats.append((sent, time.time() * 1000))
    return p


def _early_wakes() -> int:
    """Promotes that moved nothing with a job due within the ms after the server's reading: the
    metronome woke before the server's clock reached the due ms (each costs a beat more)."""
    return sum(1 for moved, ahead in promotes if not moved and 0 < ahead <= 1)


Metronome._promote = _timed_promote  # type: ignore[method-assign]


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


async def run(bus: Any, queue: str, count: int, step_ms: int, lead_ms: int = 500) -> None:
    beats.clear()
    promotes.clear()
    starts: list[tuple[int, float]] = []
    done = trio.Event()

    async def handler(job: Job) -> None:
        starts.append((int(job.payload), time.time() * 1000))
        if len(starts) >= count:
            done.set()

    consumer = Consumer(bus, queue, handler, concurrency=16)
    metronome = Metronome(bus, queue, beat_ms=1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(metronome.run)
        await nursery.start(consumer.run)
        base = await bus.transport.server_time_ms() + lead_ms

        async def schedule(first: int) -> None:
            for i in range(first, count, 64):
                await jobs.enqueue_at(bus, queue, str(base + i * step_ms), base + i * step_ms)

        async with trio.open_nursery() as scheduler:
            for first in range(64):
                scheduler.start_soon(schedule, first)
        with trio.move_on_after(lead_ms / 1000 + count * step_ms / 1000 + 5):
            await done.wait()
        nursery.cancel_scope.cancel()
    parts: dict[str, list[float]] = {"wake": [], "promote": [], "to handler": [], "total": []}
    for due, start in starts:
        sent, answered = max((b for b in beats if b[0] < start), key=lambda b: b[0])
        parts["wake"].append(sent - due)
        parts["promote"].append(answered - sent)
        parts["to handler"].append(start - answered)
        parts["total"].append(start - due)
    _show(parts)
    print(f"  promotes {len(promotes)}, of them early wakes {_early_wakes()}")


def _show(parts: dict[str, list[float]]) -> None:
    for name, values in parts.items():
        print(f"  {name:11s} p10 {_pct(values, 10):6.2f}  p25 {_pct(values, 25):6.2f}  "
              f"p50 {_pct(values, 50):6.2f}  p99 {_pct(values, 99):6.2f}  "
              f"min {min(values):6.2f} ms")  # fmt: skip


async def floor(bus: Any, step_ms: int, count: int = 100) -> None:
    parts: dict[str, list[float]] = {"floor sleep": [], "  + ping": []}
    for _ in range(count):
        deadline = trio.current_time() + step_ms / 1000
        await sleep_until(deadline)
        woke = trio.current_time()
        await bus.transport.command("PING")
        parts["floor sleep"].append((woke - deadline) * 1000)
        parts["  + ping"].append((trio.current_time() - deadline) * 1000)
    _show(parts)


async def main(url: str, transport: str) -> None:
    async with open_bus(url, transport=transport) as bus:
        for name, count, step_ms in (("light", 100, 30), ("load", 1_000, 2)):
            print(f"{name}: {count} jobs {step_ms} ms apart")
            await floor(bus, step_ms)
            await run(bus, f"parts-{name}-{time.time_ns()}", count, step_ms)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("url")
    parser.add_argument("--transport", choices=("glide", "trio"), default="trio")
    args = parser.parse_args()
    trio.run(main, args.url, args.transport)
