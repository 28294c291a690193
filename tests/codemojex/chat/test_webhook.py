"""The webhook endpoint on the page server, over real HTTP: it refuses a wrong or missing
secret and a body over the limit before it admits anything, admits an update once however often
Telegram sends it, and answers 200 only once the update is on the bus. Then the whole of webhook
mode: the stand-in delivers to the endpoint registered with ``setWebhook``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from codemojex.chat import WEBHOOK_PATH, Webhook, new_secret, register_webhook
from codemojex.chat.webhook import SECRET_HEADER
from codemojex.game import PageServer
from codemojex.standin import open_stand_in
from codemojex.telegram import open_bot
from echomq_trio import Bus, jobs, lanes
from tests.codemojex.chat.conftest import BOT_ID, TOKEN, group_id

SECRET = new_secret()
HEADER = SECRET_HEADER.decode()


def update(update_id: int, chat: int, text: str = "/top") -> dict[str, object]:
    return {"update_id": update_id, "message": {"message_id": 1, "date": 0, "text": text,
            "chat": {"id": chat, "type": "group", "title": "G"},
            "from": {"id": 1, "is_bot": False, "first_name": "A"}}}  # fmt: skip


@pytest.fixture
async def endpoint(bus: Bus, queue: str) -> AsyncIterator[tuple[str, Webhook]]:
    hook = Webhook(bus, BOT_ID, SECRET, queue=queue, max_bytes=4096)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(PageServer(bus, 0, routes={WEBHOOK_PATH: hook.answer}).serve)
        yield url + WEBHOOK_PATH, hook
        nursery.cancel_scope.cancel()


async def test_refused_before_anything_is_admitted(
    bus: Bus, queue: str, endpoint: tuple[str, Webhook]
) -> None:
    url, hook = endpoint
    good = update(1, group_id())
    big = update(2, group_id(), "😀" * 2000)  # over 4096 bytes

    async def chunks() -> AsyncIterator[bytes]:  # no declared length: counted as it is read
        for _ in range(10):
            yield b" " * 1000

    async with httpx.AsyncClient() as client:
        refused = await client.post(url, json=good)
        assert refused.status_code == 401 and refused.headers["connection"] == "close"
        assert (await client.post(url, json=good, headers={HEADER: "wrong"})).status_code == 401
        assert (await client.post(url, json=good, headers={HEADER: ""})).status_code == 401
        assert (await client.post(url, json=big, headers={HEADER: "wrong"})).status_code == 401
        assert (await client.post(url, json=big, headers={HEADER: SECRET})).status_code == 413
        chunked = await client.post(url, content=chunks(), headers={HEADER: SECRET})
        assert chunked.status_code == 413
        assert (await client.get(url, headers={HEADER: SECRET})).status_code == 405
        assert (await client.post(url, content=b"[1]", headers={HEADER: SECRET})).status_code == 400
        assert (await client.post(url, json={"x": 1}, headers={HEADER: SECRET})).status_code == 400
    assert not (await jobs.counts(bus, queue)).exists  # nothing was admitted, not even a queue
    assert (hook.admitted, hook.refused) == (0, 9)


async def test_an_update_is_admitted_once_however_often_it_comes(
    bus: Bus, queue: str, endpoint: tuple[str, Webhook]
) -> None:
    url, hook = endpoint
    chat = group_id()
    async with httpx.AsyncClient() as client:
        for _ in range(3):  # Telegram sends again when it missed the answer
            response = await client.post(url, json=update(7, chat), headers={HEADER: SECRET})
            assert (response.status_code, response.json()) == (200, {"ok": True})
        await client.post(url, json=update(8, chat, "/me"), headers={HEADER: SECRET})
    waiting = await lanes.jobs(bus, queue, str(chat))
    assert [json.loads(j.payload)["update_id"] for j in waiting] == [7, 8]
    assert hook.admitted == 4


async def test_a_call_sent_again_after_a_later_one_is_admitted_once(
    bus: Bus, queue: str, endpoint: tuple[str, Webhook]
) -> None:
    """Telegram sends update 21 again after 22 went through (the first call's answer was
    lost): 21 is admitted, after 22; every update sent once more is a duplicate."""
    url, _ = endpoint
    chat = group_id()
    async with httpx.AsyncClient() as client:
        for update_id in (20, 22, 21, 21, 22, 20):
            response = await client.post(
                url, json=update(update_id, chat), headers={HEADER: SECRET}
            )
            assert response.status_code == 200
    waiting = await lanes.jobs(bus, queue, str(chat))
    assert [json.loads(j.payload)["update_id"] for j in waiting] == [20, 22, 21]


@pytest.mark.timeout_s(30)
async def test_the_stand_in_delivers_to_the_registered_webhook(
    bus: Bus, queue: str, endpoint: tuple[str, Webhook]
) -> None:
    url, _ = endpoint
    chat = group_id()
    async with open_stand_in(TOKEN, None) as tg, open_bot(TOKEN, tg.api_url) as bot:
        await register_webhook(bot, url, SECRET)
        first = tg.updates.user_says(chat, 5, "/newgame", name="Ann")
        tg.updates.user_says(chat, 5, "/round", name="Ann")
        await tg.updates.wait_confirmed(2)  # answered 200: on the bus
        waiting = await lanes.jobs(bus, queue, str(chat))
        assert [json.loads(j.payload)["update_id"] for j in waiting] == [first, first + 1]
        assert tg.updates.webhook_statuses == {200: 2}
        async with httpx.AsyncClient() as client:  # polling is refused while a webhook is set
            answer = await client.post(tg.method_url("getUpdates"))
        assert answer.status_code == 409 and "webhook is active" in answer.json()["description"]
