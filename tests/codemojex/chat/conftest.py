"""The chat side in one process for the tests: a stand-in, the notification worker on
``cm.notify`` (where the game's notices go), and the updates queue's poller, game and
metronome on a queue of the test's own."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio

from codemojex.chat import ChatGame, Poller
from codemojex.chat.service import poll_updates
from codemojex.notify import NOTIFY_QUEUE, NotificationWorker, RateLimiter
from codemojex.standin import TelegramStandIn
from codemojex.telegram import Limits, Window, open_bot
from echomq_trio import Bus, Metronome

TOKEN = "123456:TEST"
BOT_ID = 123456
BOT = "codemojex_bot"  # the stand-in's username
ROOMY = Limits(Window(1000, 1000), Window(1000, 1000), Window(1000, 1000))


def group_id() -> int:
    """A group chat id no other test uses (the room of a chat is kept in the server)."""
    return -random.randrange(10**9, 10**12)


def user_id() -> int:
    return random.randrange(10**9, 10**10)


@asynccontextmanager
async def playing(
    bus: Bus, queue: str, tg: TelegramStandIn, **game: Any
) -> AsyncIterator[tuple[ChatGame, Poller]]:
    """Everything that plays a chat, until the block ends."""
    async with open_bot(TOKEN, tg.api_url) as bot, trio.open_nursery() as nursery:
        limiter = RateLimiter(bus, ROOMY, tag=queue)
        await nursery.start(NotificationWorker(bus, bot, limiter).run)
        await nursery.start(Metronome(bus, NOTIFY_QUEUE, beat_ms=100).run)
        await nursery.start(Metronome(bus, queue, beat_ms=100).run)
        chat = ChatGame(bus, BOT_ID, BOT, queue=queue, **game)
        await nursery.start(chat.run)
        polling = partial(poll_updates, bus, TOKEN, tg.api_url, BOT_ID, queue=queue)
        poller = await nursery.start(polling)
        yield chat, poller
        nursery.cancel_scope.cancel()
