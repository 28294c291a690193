"""A slot the limiter's answer brought late is handed back, not sent on. The server sets a slot
when it runs ``rate_take``; the answer can reach the worker seconds later (the server blocked on
its disk before replying, the link or this process stalled), and a send then would land in a
window the limiter has since filled, a 429 at Telegram. What must hold, counted where the sends
arrive (the stand-in, enforcing the same limits): no 429 and no window over its limit, every
notice delivered, and the worker says it gave the late slot back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio

from codemojex.notify.notifier import notify
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.worker import NotificationWorker
from codemojex.standin.bot_api import open_stand_in
from codemojex.telegram.bot import open_bot
from echomq_trio import Bus, Metronome
from echomq_trio.testing import FaultyTransport
from tests.codemojex.notify.test_pipeline import LIMITS, MARGIN_MS, TOKEN

pytestmark = pytest.mark.slow

TAKE = "codemojex.notify/rate_take"
# The pipeline's wide margin keeps a loaded machine's own lateness out of the windows; held past
# it, the answer's slot is stale. (With a 100 ms margin and no hand-back, the late send met a 429
# in 5 runs of 5; that margin is too narrow to count on here under a loaded suite.)
LATE_S = 3 * MARGIN_MS / 1000


class LateAnswer(FaultyTransport):
    """Holds the answer of one ``rate_take`` for ``LATE_S`` once the server has run it (its slot
    set), as a server blocked before replying would: the first, or with ``passing_back`` the
    first that passes a booking back (its ARGV[8]: a refinement or a hand-back)."""

    def __init__(self, inner: Any, *, passing_back: bool) -> None:
        super().__init__(inner)
        self.passing_back = passing_back
        self.held: list[str] = []  # the answers held back
        self.released = trio.Event()

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        got = await super().script(name, keys, args)
        if name == TAKE and not self.held and (not self.passing_back or args[7]):
            self.held.append(repr(got))
            await trio.sleep(LATE_S)
            self.released.set()
        return got


@pytest.mark.timeout_s(90)
@pytest.mark.parametrize("passing_back", [False, True], ids=["a take", "a refinement"])
async def test_a_slot_answered_late_is_handed_back_within_telegram_s_limits(
    bus: Bus, queue: str, passing_back: bool
) -> None:
    chats = [5000 + c for c in range(240)]  # one notice each: the bot's window stays full
    late = LateAnswer(bus.transport, passing_back=passing_back)
    async with (
        open_stand_in(TOKEN, LIMITS, keep=len(chats)) as tg,
        open_bot(TOKEN, tg.api_url) as bot,
    ):
        for chat in chats:
            await notify(bus, chat, f"to {chat}", queue=queue)
        limiter = RateLimiter(Bus(late), LIMITS, tag=queue, margin_ms=MARGIN_MS)
        worker = NotificationWorker(bus, bot, limiter, queue=queue, concurrency=64)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await nursery.start(Metronome(bus, queue, beat_ms=100).run)
            with trio.fail_after(60):
                await late.released.wait()
                # The window was full when the late answer came: sends before it filled it.
                assert tg.delivered() > LIMITS.global_.limit
                await tg.wait_deliveries(len(chats))
            nursery.cancel_scope.cancel()
    # The fault happened on a slot (a take's: taken; a refinement's: taken or booked).
    assert late.held and ("taken" in late.held[0] or "booked" in late.held[0]), late.held
    assert worker.statistics().handed_back >= 1
    assert tg.rate_limited == 0, "the stand-in had to answer a rate-limit 429"
    assert tg.max_in_window(LIMITS.global_.window_ms) <= LIMITS.global_.limit
    assert sorted(d.chat_id for d in tg.deliveries) == chats  # each once
