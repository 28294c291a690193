"""Worker processes (``tests.echomq_trio.proc worker``) killed and replaced in a test: the ledger
they leave (``done_key``: every job id a handler finished, in a list that survives the kill)."""

from __future__ import annotations

import signal

from echomq_trio import Bus, jobs
from tests.echomq_trio.proc import done_key
from tests.support import read_line, spawn, wait_for


async def finished(bus: Bus, queue: str) -> list[str]:
    """The job ids the workers' handlers finished, in order, repeats included."""
    return [x.decode() for x in await bus.transport.command("LRANGE", done_key(queue), "0", "-1")]


async def kill_a_worker_mid_run(bus: Bus, server_url: str, queue: str, after: int = 20) -> None:
    """Start a worker process (handlers of 50 ms, leases of 1 s, 5 at once) and SIGKILL it once
    its handlers finished ``after`` jobs, so it dies holding leased jobs."""

    async def enough() -> bool:
        return int(await bus.transport.command("LLEN", done_key(queue))) >= after

    async with spawn(
        "worker", server_url, queue, "--handle-ms", "50", "--lease-ms", "1000",
        "--concurrency", "5",
    ) as first:  # fmt: skip
        assert await read_line(first) == "ready"
        await wait_for(enough, timeout=60)
        first.send_signal(signal.SIGKILL)
        await first.wait()


async def finish_with_a_second_worker(bus: Bus, server_url: str, queue: str) -> None:
    """A second worker process, with a metronome (which reaps the dead one's leases), runs until
    nothing is pending, active or scheduled."""

    async def all_done() -> bool:
        c = await jobs.counts(bus, queue)
        return c.pending == c.active == c.scheduled == 0

    async with spawn("worker", server_url, queue, "--metronome") as second:
        assert await read_line(second) == "ready"
        await wait_for(all_done, timeout=60)
