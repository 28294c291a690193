"""The poller's loop in virtual time (``MockClock(autojump_threshold=0)`` through pytest-trio's
``autojump_clock``): Telegram's side is a handler of httpx's own ``MockTransport`` that answers
each ``getUpdates`` as a scenario says (an outage of 502s, a 429 with its ``retry_after``, long
polls held open for their timeout), so a minute of polling runs in no real time. No update
comes, so the bus is never called (an in-memory queue stands for it). Admitting updates and
their offsets against the stand-in and a real server is ``test_poller.py``'s."""

from __future__ import annotations

import itertools
import json
import logging

import httpx
import pytest
import trio
import trio.testing

from codemojex.chat import Poller
from codemojex.telegram.bot import TelegramBot
from echomq_trio import Bus
from echomq_trio.backoff import reconnect_delay_s
from tests.codemojex.chat.conftest import BOT_ID, TOKEN
from tests.echomq_trio.inmemory import InMemoryQueue
from tests.support import wait_for

OUTAGE_S = 30.0  # Telegram's proxy answers 502 until then
RETRY_AFTER_S = 7  # then one 429
HOLD_S = 25  # then each long poll is held open this long, answering no update


@pytest.mark.timeout_s(600)  # virtual seconds
async def test_an_outage_then_a_429_then_long_polls_are_paced_as_the_poller_says(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="codemojex.chat.poller")
    polls: list[tuple[float, int]] = []  # (virtual time, status answered)
    limited = [False]

    async def telegram(request: httpx.Request) -> httpx.Response:
        assert request.url.path == f"/bot{TOKEN}/getUpdates"
        assert json.loads(request.content)["timeout"] == HOLD_S
        now = trio.current_time()
        if now < OUTAGE_S:
            polls.append((now, 502))
            return httpx.Response(502, text="<html>Bad Gateway</html>")
        if not limited[0]:
            limited[0] = True
            polls.append((now, 429))
            body = {"ok": False, "error_code": 429, "description": "Too Many Requests",
                    "parameters": {"retry_after": RETRY_AFTER_S}}  # fmt: skip
            return httpx.Response(429, json=body)
        polls.append((now, 200))
        await trio.sleep(HOLD_S)  # a long poll: held open until its timeout, then no update
        return httpx.Response(200, json={"ok": True, "result": []})

    transport = httpx.MockTransport(telegram)
    async with httpx.AsyncClient(transport=transport, base_url="http://telegram.test") as client:
        bot = TelegramBot(TOKEN, client, "http://telegram.test", timeout_s=HOLD_S + 15)
        poller = Poller(Bus(InMemoryQueue()), bot, BOT_ID, timeout_s=HOLD_S)
        async with trio.open_nursery() as nursery:
            await nursery.start(poller.run)
            await wait_for(lambda: sum(s == 200 for _, s in polls) >= 3, timeout=300)
            nursery.cancel_scope.cancel()

    failed = [t for t, s in polls if s == 502]
    # Tried again after reconnect_delay_s of the failures in a row (0.1 s doubling to 1 s):
    gaps = [b - a for a, b in itertools.pairwise(failed)]
    assert gaps == pytest.approx([reconnect_delay_s(n) for n in range(1, len(failed))])
    ((limited_at, _),) = [(t, s) for t, s in polls if s == 429]
    answered = [t for t, s in polls if s == 200]
    assert limited_at - failed[-1] == pytest.approx(reconnect_delay_s(len(failed)))
    assert answered[0] - limited_at == pytest.approx(RETRY_AFTER_S)  # the 429's wait, no more
    # Long polls one after the other, each asked as soon as the one before answered:
    assert [b - a for a, b in itertools.pairwise(answered)] == pytest.approx([HOLD_S] * 2)
    # The outage is one warning and one line at its end (the retries are debug lines).
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO], lines
    assert "getUpdates answered 502" in lines[0][1]
    assert f"after {round(answered[0] - failed[0])} s of failed polls" in lines[1][1]
    stats = poller.statistics()
    assert (stats.errors, stats.admitted) == (len(failed), 0)
