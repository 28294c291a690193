"""The stand-in's side of updates over real HTTP, as Telegram behaves: long polling that returns
when a user writes, offsets that confirm, ``allowed_updates`` remembered, one poller at a time,
``setWebhook`` checked, and delivery to the webhook with the secret, tried again until a 2xx."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx
import pytest
import trio

from codemojex.standin import open_stand_in
from codemojex.standin.updates import UpdateFeed
from servicekit.asgi import Response, answer, read_body, serve_app
from tests.support import wait_for

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

TOKEN = "123456:TEST"


@pytest.mark.timeout_s(20)
async def test_long_polling_and_offsets() -> None:
    async with open_stand_in(TOKEN, None) as tg, httpx.AsyncClient(timeout=20) as client:
        url = tg.method_url("getUpdates")
        feed = tg.updates
        empty = await client.post(url, json={"timeout": 0})
        assert empty.json() == {"ok": True, "result": []}

        async def write_when_polled() -> None:
            await wait_for(lambda: feed.polls == 2)  # the long poll below is waiting
            feed.user_says(-5, 7, "/round", name="Ann", chat_title="G")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_when_polled)
            first = (await client.post(url, json={"timeout": 10})).json()["result"]
        (update,) = first
        assert update["message"]["text"] == "/round"
        assert update["message"]["chat"] == {"id": -5, "type": "group", "title": "G",
                                             "all_members_are_administrators": True}  # fmt: skip
        assert update["message"]["entities"][0]["type"] == "bot_command"
        uid = update["update_id"]
        feed.user_says(7, 7, "hi", name="Ann")  # a private chat
        again = (await client.post(url, json={"timeout": 0})).json()["result"]
        assert [u["update_id"] for u in again] == [uid, uid + 1]  # no offset: nothing confirmed
        rest = (await client.post(url, json={"offset": uid + 1})).json()["result"]
        assert [u["update_id"] for u in rest] == [uid + 1]
        assert rest[0]["message"]["chat"]["type"] == "private"
        assert [u["update_id"] for u in feed.pending] == [uid + 1]
        assert feed.confirmed == 1

        # allowed_updates is remembered; kinds outside it are not made
        query = {"offset": uid + 2, "allowed_updates": json.dumps(["message"])}
        await client.get(url, params=query)
        assert feed.push("edited_message", {"chat": {"id": -5}, "text": "x"}) is None
        assert feed.push("message", {"chat": {"id": -5}, "text": "y"}) == uid + 2


@pytest.mark.timeout_s(20)
async def test_a_second_poller_ends_the_first_with_a_conflict() -> None:
    async with open_stand_in(TOKEN, None) as tg, httpx.AsyncClient(timeout=20) as client:
        url = tg.method_url("getUpdates")
        answers: list[int] = []

        async def poll() -> None:
            answers.append((await client.post(url, json={"timeout": 10})).status_code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await wait_for(lambda: tg.updates.polls == 1)
            second = await client.post(url, json={"timeout": 0})
        assert (second.status_code, answers) == (200, [409])


class Receiver:
    """A webhook that answers 500 to its first ``fail`` calls, then 200."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.got: list[tuple[str | None, dict[str, object]]] = []

    async def app(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        await answer(scope, receive, send, self.handle)

    async def handle(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> Response:
        body = await read_body(receive, 1 << 16)
        secret = dict(scope["headers"]).get(b"x-telegram-bot-api-secret-token")
        self.got.append((secret.decode() if secret else None, json.loads(body or b"{}")))
        if len(self.got) <= self.fail:
            return Response(500, b"text/plain", b"down")
        return Response(200, b"application/json", b"{}")


@pytest.mark.timeout_s(30)
async def test_webhook_delivery_with_the_secret_until_answered() -> None:
    receiver = Receiver(fail=2)
    async with (
        open_stand_in(TOKEN, None) as tg,
        httpx.AsyncClient() as client,
        trio.open_nursery() as nursery,
    ):
        base = await nursery.start(serve_app, receiver.app, "127.0.0.1", 0, "test.receiver")
        set_url = tg.method_url("setWebhook")
        bad = await client.post(set_url, json={"url": base, "secret_token": "no spaces"})
        assert bad.status_code == 400 and "secret token" in bad.json()["description"]
        ok = await client.post(set_url, json={"url": base, "secret_token": "s3cret_-X"})
        assert ok.json() == {"ok": True, "result": True}
        first = tg.updates.user_says(-5, 7, "/top", name="Ann")
        second = tg.updates.user_says(-5, 7, "/me", name="Ann")
        with trio.fail_after(20):
            await tg.updates.wait_confirmed(2)
        assert [u["update_id"] for _, u in receiver.got] == [first, first, first, second]
        assert {s for s, _ in receiver.got} == {"s3cret_-X"}
        assert tg.updates.webhook_statuses == {500: 2, 200: 2}
        info = (await client.post(tg.method_url("getWebhookInfo"))).json()["result"]
        assert info == {"url": base, "pending_update_count": 0}
        await client.post(tg.method_url("deleteWebhook"))
        polled = await client.post(tg.method_url("getUpdates"))
        assert polled.json() == {"ok": True, "result": []}
        nursery.cancel_scope.cancel()


def test_a_user_writes_in_a_forum_topic_of_a_supergroup() -> None:
    feed = UpdateFeed(first_update_id=1)
    feed.user_says(-1001234567890, 7, "/top", name="Ann", chat_title="F", thread=12)
    (update,) = feed.pending
    message = update["message"]
    assert (message["message_thread_id"], message["is_topic_message"]) == (12, True)
    assert message["chat"] == {"id": -1001234567890, "type": "supergroup", "title": "F",
                               "is_forum": True}  # fmt: skip
    for chat, thread in ((-5, 12), (7, 12), (-1001234567890, 0)):  # no topics there; no such id
        with pytest.raises(ValueError, match="forum topic"):
            feed.user_says(chat, 7, "/top", thread=thread)
