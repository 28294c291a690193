"""The notification pipeline end to end: the bus, the shared rate limiter, real HTTP to the Bot
API stand-in, in this process and in worker processes (``python -m codemojex.notify``). Rates
are the defaults made faster (the stand-in enforces the same limits)."""

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from codemojex.notify.notice import decode
from codemojex.notify.notifier import notify
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.worker import NotificationWorker
from codemojex.standin.bot_api import Scripted, TelegramStandIn, open_stand_in
from codemojex.telegram.bot import open_bot
from codemojex.telegram.limits import Limits
from echomq_trio import Bus, Metronome, events, jobs
from tests.support import ROOT, read_line, spawn, wait_for

pytestmark = pytest.mark.slow

SCALE = 4
LIMITS = Limits().scaled(SCALE)  # 30 per 250 ms, 3 per 750 ms per private chat
TOKEN = "123456:TEST"
# A send may arrive up to half the margin off its slot and still fit (rate_take.lua). CI saw
# arrivals more than 100 ms off on a loaded 2-core machine with three workers, the stand-in and
# the server sharing it; 600 ms leaves 300 ms for that jitter, at 35 sends/s across the workers.
MARGIN_MS = 600


@asynccontextmanager
async def in_process_worker(
    bus: Bus, queue: str, tg: TelegramStandIn
) -> AsyncIterator[NotificationWorker]:
    async with open_bot(TOKEN, tg.api_url) as bot, trio.open_nursery() as nursery:
        limiter = RateLimiter(bus, LIMITS, tag=queue, margin_ms=MARGIN_MS)
        worker = NotificationWorker(bus, bot, limiter, queue=queue)
        await nursery.start(worker.run)
        await nursery.start(Metronome(bus, queue, beat_ms=100).run)
        yield worker
        nursery.cancel_scope.cancel()


def worker_process(url: str, queue: str, tg: TelegramStandIn, *extra: str):  # type: ignore[no-untyped-def]
    limits = ["--global-limit", str(LIMITS.global_), "--private-limit", str(LIMITS.private),
              "--group-limit", str(LIMITS.group)]  # fmt: skip
    return spawn(
        "--queue", queue, "--telegram-api-url", tg.api_url, *limits, "--margin-ms",
        str(MARGIN_MS), "--beat-ms", "100", *extra, module="codemojex.notify",
        env={"ECHOMQ_URL": url, "CODEMOJEX_TELEGRAM_TOKEN": TOKEN},
    )  # fmt: skip


@pytest.mark.timeout_s(240)
async def test_hundred_chats_through_three_processes_in_order_within_limits(
    bus: Bus, queue: str, server_url: str
) -> None:
    chats, each = [1000 + c for c in range(100)], 8
    async with open_stand_in(TOKEN, LIMITS, keep=len(chats) * each) as tg:  # every delivery kept
        async with (
            worker_process(server_url, queue, tg) as w1,
            worker_process(server_url, queue, tg) as w2,
            worker_process(server_url, queue, tg) as w3,
        ):
            for w in (w1, w2, w3):
                assert await read_line(w) == "ready"
            for n in range(each):
                for chat in chats:
                    await notify(bus, chat, f"{chat}:{n}", queue=queue)
            with trio.fail_after(180):
                await tg.wait_deliveries(len(chats) * each)
        by_chat = tg.by_chat()
        for chat in chats:
            assert by_chat[chat] == [f"{chat}:{n}" for n in range(each)], f"chat {chat} order"
        assert tg.rate_limited == 0, "the stand-in had to answer a rate-limit 429"
        assert tg.max_in_window(LIMITS.global_.window_ms) <= LIMITS.global_.limit
        for chat in chats:
            assert tg.max_in_window(LIMITS.private.window_ms, chat) <= LIMITS.private.limit
        assert len(tg.deliveries) == len(chats) * each


@pytest.mark.timeout_s(120)
async def test_a_flood_to_one_chat_does_not_delay_the_others(bus: Bus, queue: str) -> None:
    flood_chat = 7
    async with open_stand_in(TOKEN, LIMITS) as tg:
        for n in range(1000):
            await notify(bus, flood_chat, f"flood {n}", queue=queue)
        async with in_process_worker(bus, queue, tg):
            await tg.wait_deliveries(3, flood_chat)  # the flood is going on
            sent_at = trio.current_time()
            for chat in range(100, 200):
                await notify(bus, chat, "hello", queue=queue)
            with trio.fail_after(60):
                while tg.delivered() - tg.delivered(flood_chat) < 100:
                    await tg.wait_deliveries(tg.delivered() + 1)
            took = trio.current_time() - sent_at
            flood_so_far = tg.delivered(flood_chat)
        # 100 notices at the global rate take 100 / (30 per scaled second); allow wide slack.
        budget = 100 / LIMITS.global_.per_second
        assert took < budget * 10 + 5, f"small chats waited {took:.1f}s (budget {budget:.2f}s)"
        assert flood_so_far < 200, "the flood was not rate-limited per chat"
        assert tg.rate_limited == 0


async def _claimed_attempts(bus: Bus, queue: str) -> list[int]:
    return [int(e.fields["attempt"]) for e in await events.read(bus, queue, count=1000)
            if e.kind == "claimed"]  # fmt: skip


@pytest.mark.timeout_s(60)
async def test_429_is_honoured_and_costs_no_attempt(bus: Bus, queue: str) -> None:
    async with open_stand_in(TOKEN, LIMITS) as tg:
        tg.script(42, Scripted.flood_wait(2))
        await notify(bus, 42, "after the flood wait", queue=queue)
        async with in_process_worker(bus, queue, tg) as worker:
            (delivery,) = await tg.wait_deliveries(1)
        first_try = tg.requests[0]
        assert first_try.status == 429
        assert delivery.at - first_try.at >= 2.0
        assert set(await _claimed_attempts(bus, queue)) == {1}
        assert worker.statistics().flood_waits == 1 and worker.statistics().retried == 0


@pytest.mark.timeout_s(60)
async def test_three_server_errors_then_delivered_on_attempt_four(bus: Bus, queue: str) -> None:
    async with open_stand_in(TOKEN, LIMITS) as tg:
        tg.script(43, Scripted.server_error(500), Scripted.server_error(502),
                  Scripted.server_error(503))  # fmt: skip
        await notify(bus, 43, "eventually", queue=queue)
        async with in_process_worker(bus, queue, tg) as worker:
            await tg.wait_deliveries(1)
            await wait_for(lambda: worker.bus_statistics().acked == 1)
        # A rate-limit deferral claims the same attempt again; the attempts go 1, 2, 3, 4.
        assert list(dict.fromkeys(await _claimed_attempts(bus, queue))) == [1, 2, 3, 4]
        assert worker.statistics().retried == 3
        # Every send Telegram answered (the three errors too) was stamped with its answer.
        assert worker.limiter.statistics().confirmed == len(tg.requests) == 4


@pytest.mark.timeout_s(60)
async def test_blocked_chat_is_dropped_with_its_reason_and_later_notices_still_tried(
    bus: Bus, queue: str
) -> None:
    async with open_stand_in(TOKEN, LIMITS) as tg:
        tg.script(44, Scripted.forbidden())
        await notify(bus, 44, "one", queue=queue)
        await notify(bus, 44, "two", queue=queue)
        async with in_process_worker(bus, queue, tg) as worker:
            await wait_for(lambda: worker.bus_statistics().dead == 2)
        # The block stays, as on Telegram (the stand-in used to answer it once and deliver
        # "two"): the later notice is still tried, and dropped with the same reason.
        dead = sorted(await jobs.dead_jobs(bus, queue), key=lambda j: decode(j.payload).text)
        assert [j.last_error for j in dead] == ["Forbidden: bot was blocked by the user"] * 2
        assert [decode(j.payload).text for j in dead] == ["one", "two"]
        assert [(q.text, q.status) for q in tg.requests if q.chat_id == 44] == [
            ("one", 403), ("two", 403)]  # fmt: skip
        assert tg.by_chat().get(44) is None


@pytest.mark.timeout_s(60)
async def test_migrated_chat_gets_its_notices_at_the_new_id_in_order(bus: Bus, queue: str) -> None:
    async with open_stand_in(TOKEN, LIMITS) as tg:
        tg.script(-100, Scripted.migrate(-1009))
        for n in range(4):
            await notify(bus, -100, f"m{n}", queue=queue)
        async with in_process_worker(bus, queue, tg) as worker:
            await tg.wait_deliveries(4, -1009)
        assert tg.by_chat() == {-1009: ["m0", "m1", "m2", "m3"]}
        assert worker.statistics().migrated == 1


@pytest.mark.timeout_s(120)
async def test_kill_9_of_a_worker_loses_nothing(bus: Bus, queue: str, server_url: str) -> None:
    chats = [2000 + c for c in range(30)]
    async with open_stand_in(TOKEN, LIMITS) as tg:
        for n in range(10):
            for chat in chats:
                await notify(bus, chat, f"{chat}:{n}", queue=queue)
        async with worker_process(server_url, queue, tg, "--lease-ms", "1500") as first:
            assert await read_line(first) == "ready"
            with trio.fail_after(60):
                await tg.wait_deliveries(60)
            first.send_signal(signal.SIGKILL)
            await first.wait()
        async with worker_process(server_url, queue, tg, "--lease-ms", "1500") as second:
            assert await read_line(second) == "ready"

            async def settled() -> bool:
                c = await jobs.counts(bus, queue)
                return c.pending == c.active == c.scheduled == 0

            await wait_for(settled, timeout=90)
        texts = [d.text for d in tg.deliveries]
        expected = {f"{chat}:{n}" for chat in chats for n in range(10)}
        assert set(texts) == expected, "a notice was lost"
        assert len(texts) - len(set(texts)) <= 16  # only those in flight at the kill
        assert (await jobs.counts(bus, queue)).dead == 0


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"CODEMOJEX_TELEGRAM_TOKEN": TOKEN}, "needs --url (or ECHOMQ_URL)"),
        ({"ECHOMQ_URL": "redis://127.0.0.1:1"}, "needs the bot token in"),
    ],
)
async def test_a_worker_process_without_a_server_or_token_says_so_in_one_line(
    env: dict[str, str], words: str
) -> None:
    unset = ("ECHOMQ_URL", "CODEMOJEX_TELEGRAM_TOKEN")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    done = await trio.run_process(
        [sys.executable, "-m", "codemojex.notify"], cwd=ROOT, capture_stdout=True,
        capture_stderr=True, check=False, env=base | env | {"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 2 and words in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and done.stdout == b""
