"""The notification pipeline while the server's clock steps an hour (libfaketime on a server of
the test's own) mid-burst. What must hold, counted where the sends arrive (the Bot API stand-in,
on its own clock): delivery goes on and every notice arrives once, in order per chat; the bot's
30/s and each chat's window hold at Telegram; no chat waits longer than its rule allows (no gap
between a chat's deliveries near an hour, or even the step's detection); the step is logged
once, with its size."""

from __future__ import annotations

import itertools
import logging
import time

import pytest
import trio

from codemojex.notify.notifier import notify
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.worker import NotificationWorker
from codemojex.standin import TELEGRAM_FLOOD, open_stand_in
from codemojex.telegram.bot import open_bot
from codemojex.telegram.limits import Limits
from echomq_trio import Metronome, jobs, open_bus
from tests.support import SteppingServer, wait_for

pytestmark = pytest.mark.slow

TOKEN = "123456:TEST"
CHATS = list(range(1001, 1031))  # 30 private chats: 3 in 3 s each, 30/s for the bot
EACH = 8
QUEUE = "cm.notify"


@pytest.mark.timeout_s(150)
@pytest.mark.parametrize("step_s", [-3600, 3600])
async def test_a_burst_goes_on_within_telegram_s_limits_when_the_clock_steps(
    stepping_server: SteppingServer, step_s: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    total = len(CHATS) * EACH
    async with (
        open_bus(stepping_server.url) as bus,
        open_stand_in(TOKEN, TELEGRAM_FLOOD, keep=total) as tg,
        open_bot(TOKEN, tg.api_url) as bot,
    ):
        for n in range(EACH):
            for chat in CHATS:
                await notify(bus, chat, f"{chat}:{n}", queue=QUEUE)
        limiter = RateLimiter(bus, Limits(), tag=QUEUE)
        worker = NotificationWorker(bus, bot, limiter, queue=QUEUE)
        metronome = Metronome(bus, QUEUE, beat_ms=200)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await nursery.start(metronome.run)
            # Mid-burst: a third delivered (each chat is held to 1/s, so this takes seconds).
            with trio.fail_after(60):
                await tg.wait_deliveries(total // 3)
            await stepping_server.step(step_s)
            stepped_at = time.monotonic()  # the stand-in's clock
            with trio.fail_after(90):
                await tg.wait_deliveries(total)

            async def settled() -> bool:
                c = await jobs.counts(bus, QUEUE)
                return c.pending == c.active == c.scheduled == 0

            await wait_for(settled, timeout=30)
            nursery.cancel_scope.cancel()
    # Every notice once, in order, none dead or dropped.
    assert tg.delivered() == total
    by_chat = tg.by_chat()
    for chat in CHATS:
        assert by_chat[chat] == [f"{chat}:{n}" for n in range(EACH)], f"chat {chat} order"
    counts = await _counts(stepping_server.url)
    assert counts.dead == 0
    # Telegram's limits held at Telegram (its clock never stepped): no 429 and no window over.
    assert tg.rate_limited == 0
    assert tg.max_in_window(1000) <= 30
    for chat in CHATS:
        assert tg.max_in_window(3000, chat) <= 3
    # No chat waited longer than its rule allows after the step: a private chat's window is
    # 3 in 3 s, and the limiter's margin and a beat of the metronome come on top.
    for chat in CHATS:
        times = [d.at for d in tg.deliveries if d.chat_id == chat and d.at >= stepped_at]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert max(gaps, default=0) < 6, (chat, gaps)
    told = [r.getMessage() for r in caplog.records if "server clock stepped" in r.getMessage()]
    way = "back" if step_s < 0 else "forward"
    assert len(told) == 1 and f"stepped {way} 1 h (" in told[0], told


async def _counts(url: str) -> jobs.Counts:
    async with open_bus(url) as bus:
        return await jobs.counts(bus, QUEUE)
