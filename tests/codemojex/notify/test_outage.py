"""Garbage and silence from Telegram (issue 23, item 4), against a real server and the Bot API
stand-in over real HTTP behind ``codemojex.standin.outage``'s switch: answers that are not the
Bot API's (a 200 page for 20 s, bodies cut short) are an outage of the bot, not of the notices
(0 dead, no attempt spent, one outage logged, every notice delivered in order afterwards); a
Telegram that hangs is logged once while it hangs, shown on the summary line and in the metrics,
and loses nothing; the service itself (``python -m codemojex.run``) says so on its output."""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import groupby
from pathlib import Path

import httpx
import pytest
import trio

from codemojex.game import PageServer
from codemojex.metrics import ServiceMetrics
from codemojex.notify import DeliveryStats
from codemojex.notify.notifier import NOTIFY_QUEUE, job_id_of, notify
from codemojex.notify.outage import DEFAULT_HANG_AFTER_S
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.worker import NotificationWorker
from codemojex.run import summary_line
from codemojex.standin.bot_api import open_stand_in
from codemojex.standin.outage import open_outage
from codemojex.telegram.bot import open_bot
from echomq_trio import Bus, Metronome, events, jobs, lanes, open_bus
from tests.codemojex.notify.test_pipeline import LIMITS, MARGIN_MS, TOKEN
from tests.support import Lines, Samples, parse, start_service, stop_process, value, wait_for

pytestmark = [pytest.mark.slow]

OUTAGE_LOG = "codemojex.notify.outage"
# The garbage scenario's length: long enough for the prober (from 0.5 s, doubling, full jitter)
# to fail five probes at the latest by 15.5 s. How a minute reads (``1 min``) is test_health's.
GARBAGE_S = 20


@asynccontextmanager
async def worker_at(
    bus: Bus,
    queue: str,
    api_url: str,
    *,
    timeout_s: float = 10.0,
    hang_after_s: float = DEFAULT_HANG_AFTER_S,
    metrics: ServiceMetrics | None = None,
) -> AsyncIterator[NotificationWorker]:
    async with open_bot(TOKEN, api_url, timeout_s=timeout_s) as bot, trio.open_nursery() as nursery:
        limiter = RateLimiter(bus, LIMITS, tag=queue, margin_ms=MARGIN_MS)
        observe = None if metrics is None else metrics.notify
        worker = NotificationWorker(bus, bot, limiter, queue=queue, hang_after_s=hang_after_s,
                                    metrics=observe)  # fmt: skip
        if metrics is not None:
            metrics.watch(worker=worker)
        await nursery.start(worker.run)
        await nursery.start(Metronome(bus, queue, beat_ms=100).run)
        yield worker
        nursery.cancel_scope.cancel()


async def _job_events(bus: Bus, queue: str, after: str, ids: list[str]) -> list[events.Event]:
    """The events of the notices ``ids`` after stream id ``after`` (the queue may be shared)."""
    mine = {job_id_of(i) for i in ids}
    return [e for e in await events.read(bus, queue, after, count=10_000) if e.subject in mine]


async def _unspent_and_alive(bus: Bus, queue: str, after: str, ids: list[str]) -> None:
    """Each notice was claimed with its first attempt only, and none went dead."""
    seen = await _job_events(bus, queue, after, ids)
    assert {int(e.fields["attempt"]) for e in seen if e.kind == "claimed"} == {1}
    assert not [e for e in seen if e.kind == "dead"]


async def _settled(bus: Bus, queue: str, chats: list[int]) -> bool:
    """Nothing of these chats waits or is in flight."""
    status = await lanes.status(bus, queue, [str(c) for c in chats])
    return all(s.depth == 0 and s.in_flight == 0 for s in status)


async def _held_unspent(bus: Bus, queue: str, notice_ids: list[str]) -> None:
    """Every notice is still on the bus, none dead, none with more than the attempt its claim
    took, none with an error recorded: nothing was spent on the outage."""
    for notice_id in notice_ids:
        info = await jobs.get_job(bus, queue, job_id_of(notice_id))
        assert info is not None, notice_id
        assert info.state != "dead" and info.attempts <= 1 and not info.last_error, info


def _outage_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == OUTAGE_LOG]


async def _notify_all(bus: Bus, queue: str, chats: list[int], each: int) -> list[str]:
    ids = []
    for n in range(each):
        for chat in chats:
            notice_id = await notify(bus, chat, f"{chat}:{n}", queue=queue)
            assert notice_id is not None
            ids.append(notice_id)
    return ids


@pytest.mark.timeout_s(300)
async def test_telegram_answering_not_json_for_20_s_loses_nothing_and_spends_no_attempt(
    bus: Bus, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=OUTAGE_LOG)
    chats, each = [6000 + c for c in range(20)], 5  # 100 notices, as the issue measured
    async with open_stand_in(TOKEN, LIMITS, keep=1000) as tg, open_outage(tg) as outage:
        async with worker_at(bus, queue, outage.api_url) as worker:
            outage.mode = "not_json"  # every request: 200 with a page, not the Bot API's JSON
            ids = await _notify_all(bus, queue, chats, each)
            await wait_for(lambda: not worker.outage.is_open, timeout=30)
            await trio.sleep(GARBAGE_S)  # the garbage lasts (a scenario, not a wait)
            trouble = worker.outage.statistics().trouble
            assert trouble is not None and (trouble.cause, trouble.paused) == ("not_bot_api", True)
            line = await summary_line(bus, worker.statistics(), None, telegram=lambda: trouble)
            shown = re.search(
                r" \| TELEGRAM OUTAGE (\d+) s: .* not the Bot API's .*; sending paused$", line
            )
            assert shown and int(shown[1]) >= GARBAGE_S, line
            await _held_unspent(bus, queue, ids)
            # Only the sends in hand when it began went into the garbage; then only probes.
            assert 1 <= outage.refused_sends <= worker.concurrency
            assert worker.outage.probes >= 5 and tg.statistics().requests == 0
            outage.mode = None
            with trio.fail_after(60):
                await tg.wait_deliveries(len(ids))
            await wait_for(lambda: _settled(bus, queue, chats), timeout=30)
            assert worker.outage.statistics().trouble is None
        by_chat = tg.by_chat()
        assert by_chat == {chat: [f"{chat}:{n}" for n in range(each)] for chat in chats}
        assert tg.statistics().delivered == len(ids)  # once each
    await _unspent_and_alive(bus, queue, "-", ids)  # no attempt spent, none dead
    assert (await jobs.counts(bus, queue)).dead == 0
    stats = worker.outage.statistics()
    assert (stats.outages, stats.not_bot_api) == (1, 1)
    assert worker.statistics().retried == 0 and worker.statistics().outages == 1
    (warning, info) = _outage_lines(caplog)  # exactly one outage logged: its start and its end
    assert (
        warning[0] == logging.WARNING and "Telegram's answers are not the Bot API's" in warning[1]
    )
    assert 'HTTP 200 OK: not JSON (text/html, "Network notice")' in warning[1]
    lasted = re.search(r"Telegram answers the bot again after (\d+) s \(", info[1])
    assert info[0] == logging.INFO and lasted and int(lasted[1]) >= GARBAGE_S, info


@pytest.mark.timeout_s(120)
async def test_bodies_cut_short_are_an_outage_and_only_the_sends_cut_arrive_again(
    bus: Bus, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=OUTAGE_LOG)
    chats, each = [6100 + c for c in range(10)], 3
    async with open_stand_in(TOKEN, LIMITS, keep=1000) as tg, open_outage(tg) as outage:
        async with worker_at(bus, queue, outage.api_url) as worker:
            outage.mode = "truncated"  # delivered, but every answer cut to half its length
            ids = await _notify_all(bus, queue, chats, each)
            await wait_for(lambda: not worker.outage.is_open, timeout=30)

            def only_probes() -> bool:  # the sends in hand when it began have their answers
                oldest = worker.bot.unanswered()
                return worker.outage.probes >= 2 and (oldest is None or oldest.method == "getMe")

            await wait_for(only_probes, timeout=30)
            await _held_unspent(bus, queue, ids)
            outage.mode = None
            with trio.fail_after(60):
                await tg.wait_deliveries(len(ids) + outage.cut_sends)
            await wait_for(lambda: _settled(bus, queue, chats), timeout=30)
        # The bot cannot know that a send whose answer was cut arrived: it is sent again, once,
        # right after itself; nothing else arrives twice, and the order holds.
        by_chat = tg.by_chat()
        for chat in chats:
            assert [t for t, _ in groupby(by_chat[chat])] == [f"{chat}:{n}" for n in range(each)]
        assert 1 <= outage.cut_sends <= worker.concurrency
        assert tg.statistics().delivered == len(ids) + outage.cut_sends
    await _unspent_and_alive(bus, queue, "-", ids)
    assert (await jobs.counts(bus, queue)).dead == 0
    assert worker.outage.statistics().not_bot_api == 1
    levels = [level for level, _ in _outage_lines(caplog)]
    assert levels == [logging.WARNING, logging.INFO]


async def _scrape(client: httpx.AsyncClient, url: str) -> Samples:
    return parse((await client.get(url + "/metrics")).text)


@pytest.mark.timeout_s(120)
async def test_a_hang_is_logged_once_while_it_lasts_marked_and_loses_nothing(
    bus: Bus, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=OUTAGE_LOG)
    chats, each = [6200 + c for c in range(10)], 2
    metrics = ServiceMetrics(bus, [queue])
    async with (
        open_stand_in(TOKEN, LIMITS, keep=1000) as tg,
        open_outage(tg) as outage,
        # The client gives up after 2 s; a request unanswered for 0.5 s is an outage already.
        worker_at(
            bus, queue, outage.api_url, timeout_s=2, hang_after_s=0.5, metrics=metrics
        ) as worker,  # fmt: skip
        trio.open_nursery() as nursery,
        httpx.AsyncClient() as client,
    ):
        url = await nursery.start(PageServer(bus, 0, metrics).serve, "127.0.0.1", 0)
        outage.mode = "hang"  # no answer at all, to any request
        ids = await _notify_all(bus, queue, chats, each)
        await wait_for(lambda: _outage_lines(caplog), timeout=30)
        ((level, message),) = _outage_lines(caplog)  # one line while it hangs
        assert level == logging.WARNING
        # A send (or, on a machine too busy to look sooner, the probe after it timed out).
        assert re.match(r"Telegram has not answered (sendMessage to chat 62\d\d|getMe) since 20",
                        message), message  # fmt: skip
        assert "it hangs" in message

        async def marked() -> bool:
            got = await _scrape(client, url)
            return (value(got, "codemojex_telegram_unanswered_seconds") >= 0.5
                    and value(got, "codemojex_telegram_outage_seconds") >= 0.5)  # fmt: skip

        await wait_for(marked, timeout=30, step=0.1)
        got = await _scrape(client, url)
        assert value(got, "codemojex_telegram_outages_total", cause="unanswered") == 1
        trouble = worker.outage.statistics().trouble
        line = await summary_line(bus, DeliveryStats(), None, telegram=lambda: trouble)
        assert " | TELEGRAM OUTAGE " in line and "Telegram has not answered " in line
        # The sends time out, getMe gets no answer either: sending pauses, still one outage.
        await wait_for(lambda: not worker.outage.is_open, timeout=30)
        trouble = worker.outage.statistics().trouble
        line = await summary_line(bus, DeliveryStats(), None, telegram=lambda: trouble)
        assert line.endswith("; sending paused")
        assert value(await _scrape(client, url), "codemojex_telegram_sending_paused") == 1
        await _held_unspent(bus, queue, ids)
        outage.mode = None
        with trio.fail_after(60):
            await tg.wait_deliveries(len(ids))
        await wait_for(lambda: _settled(bus, queue, chats), timeout=30)
        got = await _scrape(client, url)
        nursery.cancel_scope.cancel()
    assert {c: t for c, t in tg.by_chat().items() if c in chats} == {
        chat: [f"{chat}:{n}" for n in range(each)] for chat in chats
    }
    assert tg.statistics().delivered == len(ids)  # none twice: the held requests never arrived
    await _unspent_and_alive(bus, queue, "-", ids)
    assert (await jobs.counts(bus, queue)).dead == 0
    assert value(got, "codemojex_telegram_outage_seconds") == 0
    assert value(got, "codemojex_telegram_sending_paused") == 0
    for cause in ("no_answer", "server_error", "not_bot_api"):
        assert value(got, "codemojex_telegram_outages_total", cause=cause) == 0, cause
    # The hang: one warning while it lasted (counted once, above), one line when it ended. A
    # send after it that a loaded machine left unanswered past hang_after_s (0.5 s) is an
    # outage of its own, told the same way: a warning, then its end.
    warning, info, *later = _outage_lines(caplog)
    assert warning[0] == logging.WARNING
    assert info[0] == logging.INFO and info[1].startswith("Telegram answers the bot again after")
    assert info[1].endswith(": sending resumed")
    assert [level for level, _ in later] == [logging.WARNING, logging.INFO] * (len(later) // 2)
    assert value(got, "codemojex_telegram_outages_total", cause="unanswered") == 1 + len(later) // 2


@pytest.mark.timeout_s(180)
async def test_the_service_logs_an_outage_of_garbage_once_and_shows_it_until_it_ends(
    own_server_url: str, tmp_path: Path
) -> None:
    chats, each = [6300 + c for c in range(10)], 2
    async with (
        open_stand_in(TOKEN, None) as tg,
        open_outage(tg) as outage,
        open_bus(own_server_url) as bus,
        httpx.AsyncClient() as client,
    ):
        before = await events.last_id(bus, NOTIFY_QUEUE)
        proc = await start_service(
            tmp_path, "--url", own_server_url, "--telegram-token", TOKEN, "--telegram-api-url",
            outage.api_url, "--demo", "off", "--archive", "off", "--summary-every", "0.5",
        )  # fmt: skip
        try:
            out = Lines(proc)
            page_url = (await out.until(r"Leaderboard: (http://\S+)"))[1]
            await out.until(r"updates: polling getUpdates")
            outage.mode = "not_json"
            ids = await _notify_all(bus, NOTIFY_QUEUE, chats, each)
            with trio.fail_after(60):
                await out.until(r"TELEGRAM OUTAGE .*not the Bot API's.*; sending paused$")
            got = await _scrape(client, page_url)
            assert value(got, "codemojex_telegram_outages_total", cause="not_bot_api") == 1
            assert value(got, "codemojex_telegram_sending_paused") == 1
            await _held_unspent(bus, NOTIFY_QUEUE, ids)
            outage.mode = None
            with trio.fail_after(60):
                for chat in chats:
                    await tg.wait_deliveries(each, chat)
                await out.until(r"INFO codemojex\.notify\.outage: Telegram answers the bot again")
                # The next summary line: the mark is gone once Telegram answers (a line reads
                # the outage's state after its reads of the server, when it is written).
                summary = await out.until(r"notices sent ")
            assert "TELEGRAM" not in summary.string
            await wait_for(lambda: _settled(bus, NOTIFY_QUEUE, chats), timeout=30)
            await _unspent_and_alive(bus, NOTIFY_QUEUE, before, ids)
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                await proc.wait()
            lines = await out.rest()
            assert proc.returncode == 0, "\n".join(lines)
        finally:
            await stop_process(proc)
    outage_lines = [line for line in lines if " codemojex.notify.outage: " in line]
    assert len(outage_lines) == 2, "\n".join(outage_lines)
    assert (
        " WARNING codemojex.notify.outage: Telegram's answers are not the Bot API's"
        in (outage_lines[0])
    )
    assert " INFO codemojex.notify.outage: Telegram answers the bot again after" in outage_lines[1]
    assert {c: t for c, t in tg.by_chat().items() if c in chats} == {
        chat: [f"{chat}:{n}" for n in range(each)] for chat in chats
    }
