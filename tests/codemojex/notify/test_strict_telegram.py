"""The limiter against a Telegram stricter than it believes: the stand-in's flood rules are its
own (``FloodRules``), tighter than the limiter's ``Limits``, with ``retry_after`` growing on
repeated violations. The pipeline must adapt (pause on a 429, honour ``retry_after``, spend no
attempt on it) and lose nothing: every notice delivered once, in order per chat, none dead."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from codemojex.notify.notifier import notify
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.worker import NotificationWorker
from codemojex.standin import FloodRules, Penalty, TelegramStandIn, open_stand_in
from codemojex.telegram.bot import open_bot
from codemojex.telegram.limits import Limits, Window
from echomq_trio import Bus, Metronome, events, jobs
from tests.support import wait_for

pytestmark = pytest.mark.slow

TOKEN = "123456:TEST"
LIMITS = Limits().scaled(4)  # what the limiter believes: 30/250 ms, 3/750 ms a chat, 20/15 s
PENALTY = Penalty(growth=2.0, max_s=4, forgive_s=2.0)


@asynccontextmanager
async def worker(bus: Bus, queue: str, tg: TelegramStandIn) -> AsyncIterator[NotificationWorker]:
    async with open_bot(TOKEN, tg.api_url) as bot, trio.open_nursery() as nursery:
        w = NotificationWorker(bus, bot, RateLimiter(bus, LIMITS, tag=queue), queue=queue)
        await nursery.start(w.run)
        await nursery.start(Metronome(bus, queue, beat_ms=50).run)
        yield w
        nursery.cancel_scope.cancel()


async def deliver_all(bus: Bus, queue: str, rules: FloodRules, chats: list[int], each: int) -> None:
    async with open_stand_in(TOKEN, rules, keep=len(chats) * each) as tg:
        for n in range(each):
            for chat in chats:
                await notify(bus, chat, f"{chat}:{n}", queue=queue)
        async with worker(bus, queue, tg) as w:
            with trio.fail_after(100):
                await tg.wait_deliveries(len(chats) * each)

            async def settled() -> bool:
                c = await jobs.counts(bus, queue)
                return c.pending == c.active == c.scheduled == 0

            await wait_for(settled, timeout=30)
        assert tg.rate_limited > 0, "the stricter stand-in never had to refuse: a test of nothing"
        assert w.statistics().flood_waits == tg.rate_limited  # each 429 honoured as a wait
        paused = w.limiter.statistics()
        assert paused.paused_chat + paused.paused_global >= 1  # the limiter was paused
        by_chat = tg.by_chat()
        for chat in chats:
            assert by_chat[chat] == [f"{chat}:{n}" for n in range(each)], f"chat {chat} order"
        assert tg.delivered() == len(chats) * each  # each once
        counts = await jobs.counts(bus, queue)
        assert (counts.dead, w.statistics().retried, w.statistics().dropped) == (0, 0, 0)
        claimed = [int(e.fields["attempt"]) for e in await events.read(bus, queue, count=10_000)
                   if e.kind == "claimed"]  # fmt: skip
        assert set(claimed) == {1}, "a 429 spent an attempt"
        # What the stand-in delivered kept to its own, stricter, rules.
        for chat in chats:
            window = rules.for_chat(chat)
            assert tg.max_in_window(window.window_ms, chat) <= window.limit
        assert tg.max_in_window(rules.bot.window_ms) <= rules.bot.limit


@pytest.mark.timeout_s(150)
async def test_chats_stricter_than_the_limiter_believes(bus: Bus, queue: str) -> None:
    # Telegram allows 2 a second in a private chat and 2 in 4 s in a group; the limiter sends 3
    # in 750 ms and 20 in 15 s, so each chat's bursts meet 429s.
    rules = FloodRules(bot=LIMITS.global_, private=Window(2, 1000), group=Window(2, 4000),
                       penalty=PENALTY)  # fmt: skip
    await deliver_all(bus, queue, rules, [101, 102, 103, -104], 6)


@pytest.mark.timeout_s(150)
async def test_a_bot_limit_stricter_than_the_limiter_believes(bus: Bus, queue: str) -> None:
    # Telegram allows the bot 8 a second; the limiter sends 30 in 250 ms across chats.
    rules = FloodRules(bot=Window(8, 1000), private=LIMITS.private, group=LIMITS.group,
                       penalty=PENALTY)  # fmt: skip
    await deliver_all(bus, queue, rules, list(range(201, 213)), 2)
