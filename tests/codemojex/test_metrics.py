"""``/metrics`` of the page server (``codemojex.metrics``), scraped over real HTTP during a short
burst of notices to the Telegram stand-in and parsed with prometheus_client's own parser: the
notification counters match the worker's statistics, the queue's match ``jobs.counts``; a
server that cannot be read answers 503; ``python -m codemojex.run`` serves it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from codemojex.game import PageServer
from codemojex.metrics import ServiceMetrics
from codemojex.notify.notifier import notify
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.worker import NotificationWorker
from codemojex.standin.bot_api import Scripted, TelegramStandIn, open_stand_in
from codemojex.telegram.bot import open_bot
from codemojex.telegram.limits import Limits
from echomq_trio import Bus, ConnectionLost, Metronome, jobs
from echomq_trio.metrics import CONTENT_TYPE_LATEST
from echomq_trio.testing import FaultyTransport, scripts
from tests.support import Lines, parse, start_service, stop_process, value, wait_for

LIMITS = Limits().scaled(4)
TOKEN = "123456:METRICS"


@asynccontextmanager
async def service(
    bus: Bus, queue: str, tg: TelegramStandIn
) -> AsyncIterator[tuple[str, NotificationWorker, ServiceMetrics]]:
    """A worker, a metronome and the page server in this process, with one ServiceMetrics."""
    metrics = ServiceMetrics(bus, [queue])
    async with open_bot(TOKEN, tg.api_url) as bot, trio.open_nursery() as nursery:
        limiter = RateLimiter(bus, LIMITS, tag=queue)
        worker = NotificationWorker(bus, bot, limiter, queue=queue, metrics=metrics.notify)
        metrics.watch(worker=worker)
        await nursery.start(worker.run)
        await nursery.start(Metronome(bus, queue, beat_ms=100, metrics=metrics.bus_metrics).run)
        url = await nursery.start(PageServer(bus, 0, metrics).serve, "127.0.0.1", 0)
        yield url, worker, metrics
        nursery.cancel_scope.cancel()


@pytest.mark.timeout_s(90)
async def test_notification_counters_scraped_during_a_burst_match_the_worker(
    bus: Bus, queue: str
) -> None:
    chats = [2000 + c for c in range(10)]
    async with (
        open_stand_in(TOKEN, LIMITS) as tg,
        service(bus, queue, tg) as (url, worker, _),
        httpx.AsyncClient() as client,
    ):
        tg.script(chats[0], Scripted.flood_wait(1))  # a 429: a flood wait, then delivered
        tg.script(chats[1], Scripted.server_error())  # a 5xx: retried, then delivered
        tg.script(chats[2], Scripted.forbidden())  # blocked for good: its 3 notices dropped
        for n in range(3):
            for chat in chats:
                await notify(bus, chat, f"{chat}:{n}", queue=queue)
        delivered_now = 0.0
        while True:  # scrape during the burst: counters only grow
            answer = await client.get(url + "/metrics")
            assert answer.status_code == 200
            assert answer.headers["content-type"] == CONTENT_TYPE_LATEST
            got = parse(answer.text)
            delivered = value(got, "codemojex_notices_total", outcome="delivered")
            assert delivered >= delivered_now
            delivered_now = delivered
            if worker.statistics().delivered + worker.statistics().dropped >= 30:
                break
            await trio.sleep(0.05)

        async def quiet() -> bool:
            c = await jobs.counts(bus, queue)
            return c.pending + c.scheduled + c.active == 0

        await wait_for(quiet)
        got = parse((await client.get(url + "/metrics")).text)
        stats = worker.statistics()
        limiter = worker.limiter.statistics()
        consumer = worker.bus_statistics()
        counts = await jobs.counts(bus, queue)

    # A block stays, as on Telegram: all three notices to chats[2] are dropped (the stand-in
    # used to answer the block once, and this test counted 29 delivered and 1 dropped).
    assert (stats.delivered, stats.dropped) == (27, 3)
    assert stats.flood_waits >= 1 and stats.retried >= 1  # the scripted 429 and 5xx happened
    for outcome, n in (("delivered", stats.delivered), ("deferred", stats.deferred),
                       ("flood_wait", stats.flood_waits), ("retried", stats.retried),
                       ("dropped", stats.dropped)):  # fmt: skip
        assert value(got, "codemojex_notices_total", outcome=outcome) == n, outcome
    for answer_ in ("taken", "denied_global", "denied_chat", "denied_paused"):
        assert value(got, "codemojex_rate_limit_answers_total", answer=answer_) == getattr(
            limiter, answer_
        )
    # One delay per delivery, all to private chats.
    assert value(got, "codemojex_notice_delay_seconds_count", chat_type="private") == 27
    assert value(got, "codemojex_notice_delay_seconds_count", chat_type="group") == 0
    ratio = value(got, "codemojex_rate_budget_used_ratio")
    assert ratio > 0  # sends were taken moments ago
    # The bus: the queue's totals as the server reports them, the consumer's own counters.
    assert counts.completed_total == 27 and counts.dead_total == 3
    for outcome in ("completed", "retried", "dead", "deferred"):
        assert value(got, "echomq_queue_jobs_total", queue=queue, outcome=outcome) == getattr(
            counts, f"{outcome}_total"
        )
    for state in ("pending", "scheduled", "active", "dead"):
        assert value(got, "echomq_jobs", queue=queue, state=state) == getattr(counts, state)
    for outcome in ("acked", "retried", "deferred", "dead"):
        assert value(got, "echomq_consumer_jobs_total", queue=queue, outcome=outcome) == getattr(
            consumer, outcome
        )
    assert value(got, "echomq_claim_batch_size_sum", queue=queue) == consumer.claimed


@pytest.mark.timeout_s(30)
async def test_metrics_answer_503_while_the_server_cannot_be_read(bus: Bus, queue: str) -> None:
    faulty = FaultyTransport(bus.transport)
    down = faulty.fail(scripts("counts"), ConnectionLost("injected"), times=1)
    metrics = ServiceMetrics(Bus(faulty), [queue])
    async with trio.open_nursery() as nursery, httpx.AsyncClient() as client:
        url = await nursery.start(PageServer(bus, 0, metrics).serve, "127.0.0.1", 0)
        first = await client.get(url + "/metrics")
        assert (first.status_code, first.text) == (503, "the server is unavailable\n")
        assert down.fired
        again = await client.get(url + "/metrics")
        assert again.status_code == 200
        assert value(parse(again.text), "echomq_jobs", queue=queue, state="pending") == 0
        nursery.cancel_scope.cancel()


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_codemojex_run_serves_metrics_next_to_the_page(tmp_path: Path) -> None:
    proc = await start_service(tmp_path, "--summary-every", "0")
    try:
        out = Lines(proc)
        page_url = (await out.until(r"Leaderboard: (http://\S+)"))[1]
        metrics_url = (await out.until(r"metrics: (http://\S+)"))[1]
        assert metrics_url == page_url + "/metrics"
        async with httpx.AsyncClient() as client:

            async def demo_delivered() -> bool:
                got = parse((await client.get(metrics_url)).text)
                return value(got, "codemojex_notices_total", outcome="delivered") > 0

            async def updates_handled() -> bool:  # the demo's players talk through the stand-in
                got = parse((await client.get(metrics_url)).text)
                key = (("outcome", "acked"), ("queue", "cm.updates"))
                return got.get(("echomq_consumer_jobs_total", key), 0) > 0

            await wait_for(demo_delivered, timeout=60, step=0.5)
            await wait_for(updates_handled, timeout=60, step=0.5)
            got = parse((await client.get(metrics_url)).text)
        for queue in ("cm.notify", "cm.game", "cm.updates"):
            assert ("echomq_jobs", (("queue", queue), ("state", "pending"))) in got
        assert value(got, "echomq_repeats", queue="cm.game") >= 1  # the daily digest
        assert value(got, "codemojex_archive_fenced") == 0
        assert ("codemojex_archive_rows_total", ()) in got
        assert value(got, "echomq_consumer_jobs_total", queue="cm.notify", outcome="acked") > 0
    finally:
        await stop_process(proc)
