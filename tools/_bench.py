"""Helpers the benchmarks in this folder share (reading INFO, cleaning up after ``--url``,
filling a queue, draining it with a no-op consumer, reading a process's memory, stopping the
service a tool started)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import trio

from echomq_trio import Bus, Consumer, Job, RetryIn, ids, jobs
from echomq_trio._replies import as_text
from echomq_trio.jobs import Outcome

__all__ = [
    "TUNED",
    "drop_queue",
    "enqueue_batches",
    "info",
    "proc_status_kib",
    "run_noop_consumer",
    "server_version",
    "stop_service",
]

DONE_POLL_S = 0.002  # how often a consumer run checks whether all jobs are acked


async def info(bus: Bus, section: str) -> dict[str, str]:
    """One INFO section as a dict."""
    text = as_text(await bus.transport.command("INFO", section))
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key: value.strip() for key, value in pairs}


async def server_version(bus: Bus) -> str:
    fields = await info(bus, "server")
    valkey = fields.get("valkey_version")
    return f"valkey {valkey}" if valkey else f"redis {fields.get('redis_version', 'unknown')}"


async def drop_queue(bus: Bus, queue: str) -> None:
    """Delete every key of ``queue`` (only for a server given by ``--url``: leave it clean)."""
    pattern = bus.keys(queue).prefix + "*"  # braces are not glob characters
    cursor = "0"
    while True:
        cursor_raw, found = await bus.transport.command(
            "SCAN", cursor, "MATCH", pattern, "COUNT", "10000"
        )
        if found:
            await bus.transport.command("UNLINK", *found)
        cursor = as_text(cursor_raw)
        if cursor == "0":
            return


async def enqueue_batches(bus: Bus, queue: str, total: int, payload: bytes, batch: int) -> float:
    """Enqueue ``total`` flat jobs of ``payload`` with ``enqueue_many``, ``batch`` per call, one
    call at a time; jobs per second."""
    start = trio.current_time()
    for first in range(0, total, batch):
        items = [(ids.generate("JOB"), payload) for _ in range(min(batch, total - first))]
        outcomes = await jobs.enqueue_many(bus, queue, items)
        if any(o.outcome is not Outcome.ENQUEUED for o in outcomes):
            raise RuntimeError(f"enqueue_many on {queue} reported a duplicate")
    return total / (trio.current_time() - start)


# The best settings found by hand in an earlier round; the untuned defaults beat them since
# 2026-12-01 (the consumer holds jobs ahead at its handlers' pace).
TUNED = {"concurrency": 64, "prefetch": 256, "claim_batch": 256}


async def run_noop_consumer(
    bus: Bus, queue: str, total: int, *, tuned: bool = True, settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Drain ``total`` pre-enqueued jobs with a no-op handler through one ``Consumer``: with
    ``settings`` when given, else with ``tuned`` ``Consumer(concurrency=64, prefetch=256,
    claim_batch=256)`` (``TUNED``), else with no settings at all (the defaults); time from the
    start of claiming (just after ``nursery.start`` returns) to the moment all ``total`` jobs
    are acked."""
    first_handle: list[float] = []

    async def handler(job: Job) -> RetryIn | None:
        if not first_handle:
            first_handle.append(trio.current_time())
        return None

    # Warm up the client and the claim/ack scripts (a first EVALSHA may meet NOSCRIPT) on a queue
    # of our own, so the timing below is of steady-state work.
    warm_queue = queue + "-warmup"
    await jobs.claim(bus, warm_queue, 1)
    await jobs.ack(bus, warm_queue, ids.generate("JOB"), 1)
    chosen = settings if settings is not None else TUNED if tuned else {}
    consumer = Consumer(bus, queue, handler, **chosen)
    async with trio.open_nursery() as nursery:
        await nursery.start(consumer.run)
        start = trio.current_time()
        # Consumer offers no hook for "acked", so poll its counters (2 ms granularity).
        while consumer.statistics().acked < total:  # noqa: ASYNC110
            await trio.sleep(DONE_POLL_S)
        end = trio.current_time()
        nursery.cancel_scope.cancel()
    stats = consumer.statistics()
    elapsed = end - start
    return {
        "jobs": total,
        "elapsed_s": round(elapsed, 4),
        "per_s": round(total / elapsed, 1),
        "first_handle_after_ms": round((first_handle[0] - start) * 1000, 2),
        "acked": stats.acked,
        "stale": stats.stale,
        "released": stats.released,
    }


def proc_status_kib(pid: int, field: str) -> int:
    """A KiB figure of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``, ...); 0 when it has none."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def stop_service(process: trio.Process, grace_s: float = 30.0) -> None:
    """Stop a service a tool started: SIGTERM (a clean stop), then SIGKILL after ``grace_s``."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(grace_s):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
