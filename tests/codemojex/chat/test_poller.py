"""The poller against the stand-in: updates reach the bus before their offset is confirmed, so
a poller that stops in between finds them again and the bus answers ``DUPLICATE``; a conflict
(a webhook, another poller) or a wrong token stops it with one line naming the cause."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
import trio

from codemojex.chat import Poller, TelegramRefused
from codemojex.chat.poller import refusal
from codemojex.standin import open_stand_in
from codemojex.standin.outage import open_outage
from codemojex.telegram import open_bot
from echomq_trio import Bus, lanes
from tests.codemojex.chat.conftest import BOT_ID, TOKEN, group_id
from tests.support import wait_for


@pytest.mark.timeout_s(30)
async def test_offsets_are_confirmed_only_after_the_bus_has_the_updates(
    bus: Bus, queue: str
) -> None:
    chats = [group_id(), group_id()]
    async with open_stand_in(TOKEN, None) as tg, open_bot(TOKEN, tg.api_url) as bot:
        feed = tg.updates
        feed.hold_confirmations = True  # as if the confirming call never reached Telegram
        sent = [feed.user_says(chats[n % 2], 7, f"/top {n}", name="Ann") for n in range(6)]
        assert all(isinstance(u, int) for u in sent)
        last = max(u for u in sent if u is not None)
        async with trio.open_nursery() as nursery:
            first = Poller(bus, bot, BOT_ID, queue=queue, timeout_s=1)
            await nursery.start(first.run)
            await feed.wait_offset(last + 1)  # it asks past them: they are on the bus
            nursery.cancel_scope.cancel()  # and it stops before Telegram forgot them
        assert (first.statistics().admitted, len(feed.pending)) == (6, 6)

        feed.hold_confirmations = False
        async with trio.open_nursery() as nursery:
            second = Poller(bus, bot, BOT_ID, queue=queue, timeout_s=1)
            await nursery.start(second.run)
            await feed.wait_confirmed(6)
            nursery.cancel_scope.cancel()
        assert (second.statistics().duplicates, second.statistics().admitted) == (6, 0)
    for chat in chats:  # each once, in the order sent
        texts = [json.loads(j.payload)["message"]["text"] for j in await lanes.jobs(bus, queue,
                 str(chat))]  # fmt: skip
        assert texts == [f"/top {n}" for n in range(6) if chats[n % 2] == chat]


async def run_until_refused(poller: Poller) -> str:
    with pytest.raises(TelegramRefused) as refused:
        await poller.run()
    return str(refused.value)


@pytest.mark.timeout_s(30)
async def test_a_webhook_or_another_poller_is_a_clear_conflict(bus: Bus, queue: str) -> None:
    async with open_stand_in(TOKEN, None) as tg, open_bot(TOKEN, tg.api_url) as bot:
        async with httpx.AsyncClient() as client:
            await client.post(tg.method_url("setWebhook"), json={"url": "https://example.org/h"})
        text = await run_until_refused(Poller(bus, bot, BOT_ID, queue=queue))
        assert text.startswith("Telegram refused getUpdates (409 Conflict): a webhook is set")
        assert "--updates webhook" in text and "\n" not in text
        async with httpx.AsyncClient() as client:
            await client.post(tg.method_url("deleteWebhook"))

        async with trio.open_nursery() as nursery:
            found: list[str] = []

            async def first() -> None:
                found.append(await run_until_refused(Poller(bus, bot, BOT_ID, queue=queue)))

            nursery.start_soon(first)
            await wait_for(lambda: tg.updates.polls == 1)  # waiting in a long poll
            await nursery.start(Poller(bus, bot, BOT_ID, queue=queue, timeout_s=1).run)
            await wait_for(lambda: bool(found))
            nursery.cancel_scope.cancel()
        assert found[0].startswith("Telegram refused getUpdates (409 Conflict): another process")


async def test_a_wrong_token_stops_the_poller(bus: Bus, queue: str) -> None:
    async with open_stand_in(TOKEN, None) as tg, open_bot("123456:WRONG", tg.api_url) as bot:
        text = await run_until_refused(Poller(bus, bot, BOT_ID, queue=queue))
    assert text == "Telegram refused getUpdates (401): the bot token is wrong or revoked"


def test_other_answers_are_not_refusals() -> None:
    for status in (200, 429, 500, 502):
        assert refusal(status, {"ok": False, "description": "x"}) is None


@pytest.mark.timeout_s(60)
async def test_an_outage_of_get_updates_is_one_warning_and_one_line_when_it_ends(
    bus: Bus, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "codemojex.chat.poller")
    async with (
        open_stand_in(TOKEN, None) as tg,
        open_outage(tg) as outage,
        open_bot(TOKEN, outage.api_url) as bot,
        trio.open_nursery() as nursery,
    ):
        outage.mode = "not_json"  # every answer a proxy's page
        poller = Poller(bus, bot, BOT_ID, queue=queue, timeout_s=1)
        await nursery.start(poller.run)
        await wait_for(lambda: poller.statistics().errors >= 3, timeout=30)
        outage.mode = None
        tg.updates.user_says(group_id(), 7, "/top", name="Ann")
        await wait_for(lambda: poller.statistics().admitted == 1, timeout=30)
        nursery.cancel_scope.cancel()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name.endswith("poller")]
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert lines[1][1].startswith("getUpdates answers again, after ")
