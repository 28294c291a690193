"""``echomq_trio.metrics`` scraped over real HTTP while a consumer and a metronome run a short
burst, parsed with prometheus_client's own parser: the server's state as ``jobs.counts`` reports
it, the process-local counters as the consumer's and the metronome's statistics report them."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from prometheus_client import CollectorRegistry

from echomq_trio import Bury, Bus, Consumer, Job, Metronome, RetryIn, flows, jobs, memory
from echomq_trio.flows import Flow
from echomq_trio.jobs import Outcome
from echomq_trio.metrics import CONTENT_TYPE_LATEST, BusMetrics, QueueReadings, render
from tests.support import parse, value, wait_for

pytestmark = pytest.mark.cluster


@asynccontextmanager
async def metrics_server(
    registry: CollectorRegistry, readings: QueueReadings
) -> AsyncIterator[str]:
    """A minimal ASGI app answering every request with ``render``, served by hypercorn."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = await render(registry, [readings])
        headers = [(b"content-type", CONTENT_TYPE_LATEST.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 0.2
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, app, config)  # type: ignore[arg-type]
        yield binds[0]
        nursery.cancel_scope.cancel()


async def handler(job: Job) -> RetryIn | Bury | None:
    if job.text == "bury":
        return Bury("buried on purpose")
    if job.text == "retry" and job.attempts == 1:
        return RetryIn(20, "once more")
    return None


@pytest.mark.timeout_s(60)
async def test_a_scrape_during_a_burst_matches_what_the_bus_reports(bus: Bus, queue: str) -> None:
    registry = CollectorRegistry()
    instruments = BusMetrics(registry)
    readings = QueueReadings(bus, [queue], registry)
    consumer = Consumer(bus, queue, handler, concurrency=4, claim_batch=4, metrics=instruments)
    metronome = Metronome(bus, queue, beat_ms=50, metrics=instruments)
    burst = [("ok", 60), ("bury", 5), ("retry", 5)]
    n = 0
    for text, count in burst:
        await jobs.enqueue_many(bus, queue, [(f"JOB{n + i:011d}", text) for i in range(count)])
        n += count
    for i in range(10):
        await jobs.enqueue_in(bus, queue, "ok", 30, job_id=f"JOB{n + i:011d}")
    async with metrics_server(registry, readings) as url, httpx.AsyncClient() as client:
        async with trio.open_nursery() as nursery:
            await nursery.start(metronome.run)
            await nursery.start(consumer.run)
            # During the burst: each scrape reports the reading it was rendered from.
            scraped = 0
            while scraped == 0 or consumer.statistics().acked < 75:
                answer = await client.get(url + "/metrics")
                assert answer.status_code == 200
                assert answer.headers["content-type"] == CONTENT_TYPE_LATEST
                got = parse(answer.text)
                c = readings.last()[queue]
                for state in ("pending", "scheduled", "active", "dead"):
                    assert value(got, "echomq_jobs", queue=queue, state=state) == getattr(c, state)
                assert value(got, "echomq_queue_jobs_total", queue=queue, outcome="completed") == (
                    c.completed_total
                )
                scraped += 1
                await trio.sleep(0.01)

            async def quiet() -> bool:
                c = await jobs.counts(bus, queue)
                return c.pending + c.scheduled + c.active == 0

            await wait_for(quiet)
            nursery.cancel_scope.cancel()
        got = parse((await client.get(url + "/metrics")).text)

    counts = await jobs.counts(bus, queue)
    assert (counts.completed_total, counts.dead_total, counts.retried_total) == (75, 5, 5)
    for state in ("pending", "scheduled", "active", "dead"):
        assert value(got, "echomq_jobs", queue=queue, state=state) == getattr(counts, state)
    for outcome in ("completed", "retried", "dead", "deferred"):
        assert value(got, "echomq_queue_jobs_total", queue=queue, outcome=outcome) == getattr(
            counts, f"{outcome}_total"
        )
    assert value(got, "echomq_repeats", queue=queue) == 0
    # The server's memory, for its pressure against maxmemory (the test servers have a ceiling).
    use = await memory.memory_use(bus)
    assert value(got, "echomq_server_memory_max_bytes") == use.max_bytes > 0
    assert 0 < value(got, "echomq_server_memory_used_bytes") <= use.max_bytes
    # It writes its append-only file (a server given by URL: no disk of a data directory shown).
    assert value(got, "echomq_server_writes_refused") == 0
    assert not [name for name, _ in got if name == "echomq_server_disk_free_bytes"]
    # Process-local: what this consumer settled, as its statistics count it.
    stats = consumer.statistics()
    assert (stats.acked, stats.retried, stats.dead) == (75, 5, 5)
    for outcome in ("acked", "retried", "deferred", "dead", "stale"):
        assert value(got, "echomq_consumer_jobs_total", queue=queue, outcome=outcome) == getattr(
            stats, outcome
        )
    # Claim batches: every claimed job in one, at most claim_batch per batch.
    claims = value(got, "echomq_claim_batch_size_count", queue=queue)
    assert value(got, "echomq_claim_batch_size_sum", queue=queue) == stats.claimed == 85
    assert math.ceil(stats.claimed / 4) <= claims <= stats.claimed
    assert value(got, "echomq_claim_batch_size_bucket", queue=queue, le="4.0") == claims
    # Lateness: one observation per job the metronome promoted (10 scheduled + 5 retries).
    promoted = metronome.statistics().promoted
    assert promoted == 15
    assert value(got, "echomq_scheduled_lateness_seconds_count", queue=queue) == promoted
    assert value(got, "echomq_scheduled_lateness_seconds_sum", queue=queue) >= 0


async def test_parents_waiting_for_their_children_are_a_state_of_the_jobs_gauge(
    bus: Bus, queue: str
) -> None:
    root = Flow("root", [Flow("mid", [Flow("leaf")]), Flow("other")])
    assert (await flows.add(bus, queue, root)).ok
    registry = CollectorRegistry()
    readings = QueueReadings(bus, [queue], registry)
    got = parse((await render(registry, [readings])).decode())
    counts = await jobs.counts(bus, queue)
    assert counts.waiting_children == 2  # root and mid
    for state in ("pending", "waiting_children"):
        assert value(got, "echomq_jobs", queue=queue, state=state) == getattr(counts, state)
    # the leaf and the other child run; mid, then root, are released
    while done := await jobs.claim(bus, queue, 10):
        for job in done:
            assert await jobs.ack(bus, queue, job.id, job.token) is Outcome.ACKED
    got = parse((await render(registry, [readings])).decode())
    assert value(got, "echomq_jobs", queue=queue, state="waiting_children") == 0


async def test_without_metrics_the_metronome_asks_for_no_lateness(bus: Bus, queue: str) -> None:
    await jobs.enqueue_in(bus, queue, "x", 0, job_id="JOB00000000001")
    plain = await jobs.promote(bus, queue)
    assert (plain.moved, plain.lateness_ms) == (1, ())
    await jobs.enqueue_in(bus, queue, "x", 0, job_id="JOB00000000002")
    await jobs.enqueue_in(bus, queue, "x", 0, job_id="JOB00000000003")
    asked = await jobs.promote(bus, queue, lateness=True)
    assert asked.moved == 2 and len(asked.lateness_ms) == 2
    assert all(ms >= 0 for ms in asked.lateness_ms)


def test_registries_are_separate() -> None:
    one, two = CollectorRegistry(), CollectorRegistry()
    BusMetrics(one), BusMetrics(two)  # no clash: nothing is global
    with pytest.raises(ValueError, match="Duplicated"):
        BusMetrics(one)
