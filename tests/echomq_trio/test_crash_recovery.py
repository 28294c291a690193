"""kill -9 a worker mid-run: its jobs come back through lease expiry and the reaper, and a second
worker finishes them all. Nothing is missing; only jobs in flight at the kill may run twice."""

import pytest
import trio

from echomq_trio import Bus, ids, jobs
from tests.echomq_trio.proc import done_key
from tests.echomq_trio.workers import finish_with_a_second_worker, finished, kill_a_worker_mid_run
from tests.support import read_line, spawn, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.mark.timeout_s(120)
async def test_sigkill_mid_run_loses_nothing(bus: Bus, queue: str, server_url: str) -> None:
    all_ids = [ids.generate("JOB") for _ in range(200)]
    await jobs.enqueue_many(bus, queue, [(i, "x") for i in all_ids])
    await kill_a_worker_mid_run(bus, server_url, queue)
    c = await jobs.counts(bus, queue)
    assert c.active > 0, "the kill should have left leased jobs behind"
    await finish_with_a_second_worker(bus, server_url, queue)
    done = await finished(bus, queue)
    assert set(done) == set(all_ids), "a job was lost"
    assert len(done) - len(set(done)) <= 5  # at most the kill's in-flight jobs ran twice
    assert (await jobs.counts(bus, queue)).dead == 0


@pytest.mark.timeout_s(180)
async def test_eight_producers_three_consumer_processes_exactly_once(
    bus: Bus, queue: str, server_url: str
) -> None:
    per_producer = 250
    key = done_key(queue)
    async with (
        spawn("worker", server_url, queue, "--concurrency", "8") as w1,
        spawn("worker", server_url, queue, "--concurrency", "8") as w2,
        spawn("worker", server_url, queue, "--concurrency", "8") as w3,
    ):
        for w in (w1, w2, w3):
            assert await read_line(w) == "ready"
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(_produce, server_url, queue, per_producer)

        async def all_done() -> bool:
            return int(await bus.transport.command("LLEN", key)) >= 8 * per_producer

        await wait_for(all_done, timeout=120)

        async def all_acked() -> bool:
            c = await jobs.counts(bus, queue)
            return (c.pending, c.active, c.completed_total) == (0, 0, 8 * per_producer)

        await wait_for(all_acked, timeout=30)
    done = [x.decode() for x in await bus.transport.command("LRANGE", key, "0", "-1")]
    assert len(done) == len(set(done)) == 8 * per_producer, "a job ran twice"
    assert all(ids.is_valid(d, "JOB") for d in done)


async def _produce(url: str, queue: str, n: int) -> None:
    async with spawn("produce", url, queue, str(n)) as p:
        assert await read_line(p) == "produced"
        await p.wait()
        assert p.returncode == 0
