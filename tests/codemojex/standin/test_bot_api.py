"""The Telegram stand-in, exercised over real HTTP on loopback with httpx.

Rate-limit arithmetic is checked with an injected manual clock (deterministic); one test per
window kind also runs on the real clock, sleeping a window's length where expiry is the point.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import attrs
import httpx
import pytest
import trio

from codemojex.standin.__main__ import main as standin_main
from codemojex.standin.bot_api import (
    MAX_MESSAGE_LENGTH,
    MAX_TEXT_BYTES,
    TELEGRAM_FLOOD,
    Delivery,
    FloodRules,
    Limits,
    Scripted,
    StandInStats,
    TelegramStandIn,
    Window,
    open_stand_in,
)

TOKEN = "123456:TEST"
NO_LIMITS = Limits(Window(10_000, 1000), Window(10_000, 1000), Window(10_000, 1000))


class ManualClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c


@pytest.fixture
async def tg() -> AsyncIterator[TelegramStandIn]:
    async with open_stand_in(TOKEN, limits=None) as stand_in:
        yield stand_in


async def send(
    client: httpx.AsyncClient, tg: TelegramStandIn, chat_id: Any, text: Any = "hi", **extra: Any
) -> httpx.Response:
    return await client.post(tg.method_url(), json={"chat_id": chat_id, "text": text, **extra})


def error_body(status: int, description: str, parameters: dict[str, int] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters is not None:
        body["parameters"] = parameters
    return body


def error_of(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert body["ok"] is False
    assert body["error_code"] == response.status_code
    return body


# ---- basics -------------------------------------------------------------------------------


async def test_get_me_by_get_and_post(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    assert tg.api_url.startswith("http://127.0.0.1:")
    for response in (
        await client.get(f"{tg.api_url}/bot{TOKEN}/getMe"),
        await client.post(f"{tg.api_url}/bot{TOKEN}/getMe"),
        await client.get(f"{tg.api_url}/bot{TOKEN}/getme"),
    ):
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {
            "ok": True,
            "result": {
                "id": 123456,
                "is_bot": True,
                "first_name": "codemojex",
                "username": "codemojex_bot",
                # Telegram's User "returned only in getMe" (Bot API 9.4)
                "can_join_groups": True,
                "can_read_all_group_messages": True,
                "supports_inline_queries": False,
                "can_connect_to_business": False,
                "has_main_web_app": False,
                "has_topics_enabled": False,
                "allows_users_to_create_topics": False,
            },
        }


async def test_only_get_me_has_the_bots_settings(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    """A sent message's ``from`` is the bot's plain User, as the Bot API server writes it
    (``JsonUser`` without ``full_bot_info``)."""
    me = (await client.get(tg.method_url("getMe"))).json()["result"]
    sent = (await send(client, tg, 5, "hi")).json()["result"]
    assert sent["from"] == {k: me[k] for k in ("id", "is_bot", "first_name", "username")}


async def test_send_message_json(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    r = await send(client, tg, 42, "hello <b>you</b>", parse_mode="HTML")
    assert r.status_code == 200
    body = r.json()
    assert body["ok"] is True
    result = body["result"]
    assert result["message_id"] == 1
    # As Telegram answers: a private chat has a first name; the markup is applied, so the text
    # comes back plain with its entities (the stand-in used to echo the chat thin and the markup).
    assert result["chat"] == {"id": 42, "first_name": "User 42", "type": "private"}
    assert result["text"] == "hello you"
    assert result["entities"] == [{"offset": 6, "length": 3, "type": "bold"}]
    assert isinstance(result["date"], int)
    assert abs(result["date"] - time.time()) < 60

    (d,) = tg.deliveries
    assert (d.chat_id, d.text, d.message_id, d.parse_mode) == (42, "hello <b>you</b>", 1, "HTML")
    assert (d.shown, [e.type for e in d.entities]) == ("hello you", ["bold"])
    assert d.wall_ms == pytest.approx(result["date"] * 1000, abs=2000)
    (rec,) = tg.requests
    assert (rec.chat_id, rec.text, rec.status, rec.description) == (
        42,
        "hello <b>you</b>",
        200,
        None,
    )


async def test_message_ids_increase_per_chat(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    ids = []
    for chat in (1, 1, -100200, 1, -100200):
        r = await send(client, tg, chat)
        assert r.status_code == 200
        ids.append((chat, r.json()["result"]["message_id"], r.json()["result"]["chat"]["type"]))
    # -100200 is a basic group's id (-1 .. -999999999999); the stand-in used to call every
    # negative id a supergroup.
    assert ids == [
        (1, 1, "private"),
        (1, 2, "private"),
        (-100200, 1, "group"),
        (1, 3, "private"),
        (-100200, 2, "group"),
    ]


async def test_send_message_form_and_query_string(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    r = await client.post(tg.method_url(), data={"chat_id": "-1001", "text": "form ✓"})
    assert r.status_code == 200, r.text
    assert r.json()["result"]["chat"]["id"] == -1001
    r = await client.get(tg.method_url(), params={"chat_id": "7", "text": "query"})
    assert r.status_code == 200, r.text
    r = await client.post(tg.method_url(), json={"chat_id": "8", "text": "numeric string"})
    assert r.status_code == 200, r.text
    assert tg.by_chat() == {-1001: ["form ✓"], 7: ["query"], 8: ["numeric string"]}
    assert all(d.parse_mode is None for d in tg.deliveries)


async def test_wrong_token_is_401(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    for method in ("getMe", "sendMessage", "noSuchMethod"):
        r = await client.post(
            f"{tg.api_url}/bot999:WRONG/{method}", json={"chat_id": 1, "text": "x"}
        )
        assert r.status_code == 401
        assert r.json() == {"ok": False, "error_code": 401, "description": "Unauthorized"}
    assert tg.deliveries == []
    assert [(q.chat_id, q.status) for q in tg.requests] == [(1, 401)]


async def test_wrong_token_wins_over_a_bad_body(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    for method in ("getMe", "sendMessage"):
        r = await client.post(
            f"{tg.api_url}/bot1:X/{method}",
            content=b"{oops",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 401
    assert [(q.chat_id, q.text, q.status) for q in tg.requests] == [(None, None, 401)]


async def test_unknown_method_and_path_are_404(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    not_found = {"ok": False, "error_code": 404, "description": "Not Found"}
    for path in (f"/bot{TOKEN}/", f"/bot{TOKEN}", "/", "/getMe"):
        r = await client.get(tg.api_url + path)
        assert r.status_code == 404, path
        assert r.json() == not_found
    # An unknown method under a right token: the Bot API server's own wording (Client::on_cmd),
    # where the stand-in used to answer the bare "Not Found".
    r = await client.get(tg.api_url + f"/bot{TOKEN}/sendPigeon")
    assert r.status_code == 404
    assert r.json() == {
        "ok": False,
        "error_code": 404,
        "description": "Not Found: method not found",
    }


UNCLOSED = 'Can\'t find end tag corresponding to start tag "b"'


@pytest.mark.parametrize(
    ("payload", "description"),
    [
        ({"text": "no chat"}, "Bad Request: chat_id is empty"),
        ({"chat_id": "", "text": "empty chat"}, "Bad Request: chat_id is empty"),
        ({"chat_id": "@nobody", "text": "x"}, "Bad Request: chat not found"),
        ({"chat_id": 5}, "Bad Request: message text is empty"),
        ({"chat_id": 5, "text": ""}, "Bad Request: message text is empty"),
        # whitespace is text to the Bot API server; TDLib trims it and refuses what is left
        ({"chat_id": 5, "text": "  \n "}, "Bad Request: text must be non-empty"),
        # the server reads the text before it looks for the chat (Client.cpp)
        ({}, "Bad Request: message text is empty"),
        ({"chat_id": ""}, "Bad Request: message text is empty"),
        ({"chat_id": "@nobody"}, "Bad Request: message text is empty"),
        ({"text": "x", "parse_mode": "Klingon"}, "Bad Request: unsupported parse_mode"),
        ({"text": "<b>", "parse_mode": "HTML"}, f"Bad Request: can't parse entities: {UNCLOSED}"),
        # and trims it after: whitespace with no chat names the chat
        ({"text": "  \n "}, "Bad Request: chat_id is empty"),
        (
            {"chat_id": 5, "text": "x" * (MAX_MESSAGE_LENGTH + 1)},
            "Bad Request: message is too long",
        ),
        (
            {"chat_id": 5, "text": "x", "parse_mode": "Klingon"},
            "Bad Request: unsupported parse_mode",
        ),
    ],
)
async def test_validation_errors(
    tg: TelegramStandIn, client: httpx.AsyncClient, payload: dict[str, Any], description: str
) -> None:
    r = await client.post(tg.method_url(), json=payload)
    assert r.status_code == 400
    assert error_of(r)["description"] == description
    assert tg.deliveries == []
    (rec,) = tg.requests
    assert (rec.status, rec.description) == (400, description)


async def test_longest_message_and_bad_json(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    # Counted as Telegram counts: UTF-16 code units, so an emoji outside the BMP counts 2.
    longest = "😀" * (MAX_MESSAGE_LENGTH // 2)
    assert (await send(client, tg, 5, longest)).status_code == 200
    too_long = await send(client, tg, 5, longest + "x")
    assert error_of(too_long)["description"] == "Bad Request: message is too long"
    r = await client.post(
        tg.method_url(), content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert error_of(r)["description"] == "Bad Request: can't parse JSON object"
    assert tg.by_chat() == {5: [longest]}
    assert [(q.chat_id, q.status) for q in tg.requests] == [(5, 200), (5, 400), (None, 400)]


# ---- rate limits --------------------------------------------------------------------------


async def test_private_chat_limit_on_the_real_clock(client: httpx.AsyncClient) -> None:
    # A window long enough that four sends fit in it on a loaded machine (300 ms did not, once).
    window_ms = 2_000
    limits = Limits(
        global_=Window(1000, window_ms), private=Window(3, window_ms), group=Window(3, window_ms)
    )
    async with open_stand_in(TOKEN, limits) as tg:
        statuses = [(await send(client, tg, 1, f"m{i}")).status_code for i in range(4)]
        assert statuses == [200, 200, 200, 429]
        r = await send(client, tg, 1, "again")
        body = error_of(r)
        retry = body["parameters"]["retry_after"]
        assert retry >= 1
        assert body["description"] == f"Too Many Requests: retry after {retry}"
        assert tg.rate_limited == 2
        assert tg.by_chat() == {1: ["m0", "m1", "m2"]}

        # Another chat has its own window.
        assert (await send(client, tg, 2, "other")).status_code == 200

        await trio.sleep(window_ms / 1000)  # the window passes
        assert (await send(client, tg, 1, "later")).status_code == 200
        assert tg.by_chat()[1] == ["m0", "m1", "m2", "later"]
        assert [q.status for q in tg.requests if q.chat_id == 1] == [200, 200, 200, 429, 429, 200]
        assert tg.max_in_window(window_ms, chat_id=1) <= 3


async def test_concurrent_burst_never_exceeds_limits(client: httpx.AsyncClient) -> None:
    limits = Limits(global_=Window(5, 400), private=Window(2, 400), group=Window(2, 400))
    async with open_stand_in(TOKEN, limits) as tg:
        results: list[int] = []

        async def one(chat: int, i: int) -> None:
            results.append((await send(client, tg, chat, f"{chat}:{i}")).status_code)

        async with trio.open_nursery() as nursery:
            for chat in (1, 2, 3, -4):
                for i in range(5):
                    nursery.start_soon(one, chat, i)
        assert len(results) == 20
        assert results.count(200) == len(tg.deliveries) >= 2
        assert results.count(429) == tg.rate_limited == 20 - len(tg.deliveries)
        assert tg.max_in_window(400) <= 5
        for chat in (1, 2, 3, -4):
            assert tg.max_in_window(400, chat_id=chat) <= 2


async def test_retry_after_is_whole_seconds_until_a_slot_frees(client: httpx.AsyncClient) -> None:
    clock = ManualClock()
    limits = Limits(global_=Window(100, 1000), private=Window(2, 5000), group=Window(20, 60000))
    async with open_stand_in(TOKEN, limits, clock=clock) as tg:
        assert (await send(client, tg, 9, "a")).status_code == 200
        clock.advance(1.0)
        assert (await send(client, tg, 9, "b")).status_code == 200
        clock.advance(0.5)
        r = await send(client, tg, 9, "c")
        assert r.status_code == 429
        # "a" leaves the 5 s window 3.5 s from now: round up to 4.
        assert error_of(r)["parameters"] == {"retry_after": 4}
        assert tg.requests[-1].retry_after == 4
        clock.advance(3.4)
        assert error_of(await send(client, tg, 9, "c"))["parameters"] == {"retry_after": 1}
        clock.advance(0.1)  # exactly 5 s after "a": it no longer counts
        assert (await send(client, tg, 9, "c")).status_code == 200
        assert tg.by_chat() == {9: ["a", "b", "c"]}
        assert tg.rate_limited == 2


async def test_group_window_applies_to_negative_ids(client: httpx.AsyncClient) -> None:
    clock = ManualClock()
    limits = Limits(global_=Window(100, 1000), private=Window(100, 1000), group=Window(2, 60000))
    async with open_stand_in(TOKEN, limits, clock=clock) as tg:
        statuses = [(await send(client, tg, -100, f"g{i}")).status_code for i in range(3)]
        assert statuses == [200, 200, 429]
        assert error_of(await send(client, tg, -100, "g"))["parameters"] == {"retry_after": 60}
        private = [(await send(client, tg, 100, f"p{i}")).status_code for i in range(3)]
        assert private == [200, 200, 200]


async def test_global_window_spans_chats(client: httpx.AsyncClient) -> None:
    clock = ManualClock()
    limits = Limits(global_=Window(5, 2000), private=Window(100, 1000), group=Window(100, 1000))
    async with open_stand_in(TOKEN, limits, clock=clock) as tg:
        for chat in range(1, 6):
            assert (await send(client, tg, chat)).status_code == 200
        clock.advance(0.2)
        r = await send(client, tg, 6)
        assert r.status_code == 429
        assert error_of(r)["parameters"] == {"retry_after": 2}  # ceil(1.8)
        assert tg.rate_limited == 1
        clock.advance(1.8)
        assert (await send(client, tg, 6)).status_code == 200
        assert sorted(tg.by_chat()) == [1, 2, 3, 4, 5, 6]


async def test_global_window_on_the_real_clock(client: httpx.AsyncClient) -> None:
    limits = Limits(global_=Window(3, 300), private=Window(100, 300), group=Window(100, 300))
    async with open_stand_in(TOKEN, limits) as tg:
        statuses = [(await send(client, tg, chat)).status_code for chat in (1, 2, -3, 4)]
        assert statuses == [200, 200, 200, 429]
        await trio.sleep(0.3)
        assert (await send(client, tg, 4)).status_code == 200
        assert tg.max_in_window(300) <= 3


async def test_no_limits(client: httpx.AsyncClient) -> None:
    async with open_stand_in(TOKEN, limits=None) as tg:
        for i in range(40):
            assert (await send(client, tg, 1, f"m{i}")).status_code == 200
        assert tg.rate_limited == 0
        assert len(tg.by_chat()[1]) == 40


def test_limits_defaults_and_scaled() -> None:
    assert Limits() == Limits(Window(30, 1000), Window(3, 3000), Window(20, 60000))
    assert Limits().scaled(10) == Limits(Window(30, 100), Window(3, 300), Window(20, 6000))
    assert Limits().scaled(100_000).global_ == Window(30, 1)
    assert Limits().for_chat(5) == Window(3, 3000)
    assert Limits().for_chat(-5) == Window(20, 60000)
    with pytest.raises(ValueError):
        Limits().scaled(0)
    with pytest.raises(ValueError):
        Window(0, 100)
    with pytest.raises(ValueError):
        Window(1, 0)


# ---- scripting ----------------------------------------------------------------------------

PARAMETRIZED_SCRIPTS = [
    (Scripted.server_error(), 500, "Internal Server Error", None),
    (Scripted.server_error(502), 502, "Bad Gateway", None),
    (Scripted.server_error(503), 503, "Service Unavailable", None),
    (
        Scripted.flood_wait(7),
        429,
        "Too Many Requests: retry after 7",
        {"retry_after": 7},
    ),
    (Scripted.bad_request(), 400, "Bad Request: chat not found", None),
    (Scripted.unauthorized(), 401, "Unauthorized", None),
    (
        Scripted.conflict(),
        409,
        "Conflict: terminated by other getUpdates request; "
        "make sure that only one bot instance is running",
        None,
    ),
]


@pytest.mark.parametrize(("scripted", "status", "description", "parameters"), PARAMETRIZED_SCRIPTS)
async def test_scripted_answer_then_normal(
    tg: TelegramStandIn,
    client: httpx.AsyncClient,
    scripted: Scripted,
    status: int,
    description: str,
    parameters: dict[str, int] | None,
) -> None:
    tg.script(77, scripted)
    r = await send(client, tg, 77, "first")
    assert r.status_code == status
    assert r.json() == error_body(status, description, parameters)
    assert tg.deliveries == []
    assert tg.pending_scripts(77) == 0

    assert (await send(client, tg, 77, "second")).status_code == 200
    assert tg.by_chat() == {77: ["second"]}
    assert tg.rate_limited == 0  # scripted 429s are not the stand-in's own
    assert [(q.status, q.description) for q in tg.requests] == [(status, description), (200, None)]


# A block and a migration are for good, as on Telegram: the stand-in used to answer them once and
# deliver the next message (these three cases were in PARAMETRIZED_SCRIPTS, whose second message
# is delivered).
PERMANENT_SCRIPTS = [
    Scripted.forbidden(),
    Scripted.forbidden("Forbidden: user is deactivated"),
    Scripted.migrate(-1009876543210),
]


@pytest.mark.parametrize("scripted", PERMANENT_SCRIPTS)
async def test_permanent_scripted_answers_stay(
    tg: TelegramStandIn, client: httpx.AsyncClient, scripted: Scripted
) -> None:
    tg.script(-77, scripted)
    status, description = scripted.status, scripted.description or ""
    expected = error_body(status, description, dict(scripted.parameters or {}) or None)
    for text in ("first", "second", "third"):
        r = await send(client, tg, -77, text)
        assert (r.status_code, r.json()) == (status, expected)
    assert tg.deliveries == []
    assert tg.pending_scripts(-77) == 0
    assert [(q.status, q.description) for q in tg.requests] == [(status, description)] * 3
    if status == 403:
        tg.unblock(-77)  # the user unblocks the bot
        assert (await send(client, tg, -77, "fourth")).status_code == 200
    else:
        assert (await send(client, tg, -1009876543210, "moved")).status_code == 200


async def test_migrate_and_block_by_the_operator(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    tg.migrate(-5, -1001234567890)
    tg.block(6)
    for _ in range(2):
        r = await send(client, tg, -5)
        assert error_of(r)["parameters"] == {"migrate_to_chat_id": -1001234567890}
        assert error_of(await send(client, tg, 6))["description"] == (
            "Forbidden: bot was blocked by the user"
        )
    assert tg.deliveries == []
    with pytest.raises(ValueError):
        tg.migrate(-5, -6)  # a group migrates to a supergroup


async def test_an_upgrade_is_announced_by_the_two_service_messages_telegram_sends(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    new = -1002471352452
    tg.name_chat(-4518810793, "Fans <3")
    tg.migrate(-4518810793, new, by=62626897)
    tg.migrate(-4518810793, new)  # upgraded once: said once
    polled = await client.post(tg.method_url("getUpdates"), json={"timeout": 0})
    to, since = [u["message"] for u in polled.json()["result"]]
    user = {"id": 62626897, "is_bot": False, "first_name": "Group owner"}
    assert {k: to[k] for k in ("from", "chat", "migrate_to_chat_id")} == {
        "from": user, "chat": {"id": -4518810793, "title": "Fans <3", "type": "group",
                          "all_members_are_administrators": True},
        "migrate_to_chat_id": new}  # fmt: skip
    assert {k: since[k] for k in ("from", "chat", "migrate_from_chat_id")} == {
        "from": user, "chat": {"id": new, "title": "Fans <3", "type": "supergroup"},
        "migrate_from_chat_id": -4518810793}  # fmt: skip
    assert "text" not in to and "text" not in since and to["message_id"] >= 1
    assert error_of(await send(client, tg, -4518810793))["parameters"] == {
        "migrate_to_chat_id": new}  # fmt: skip
    assert (await send(client, tg, new)).json()["result"]["chat"]["title"] == "Fans <3"

    tg.migrate(-6, -1001234567890, announce=False)  # the bot learns it from a send alone
    tg.script(-7, Scripted.migrate(-1009876543210))  # upgraded as the send arrives
    assert (await send(client, tg, -7)).status_code == 400
    kinds = [(u["message"]["chat"]["id"], set(u["message"]) & {"migrate_to_chat_id",
             "migrate_from_chat_id"}) for u in tg.updates.pending[2:]]  # fmt: skip
    assert kinds == [(-7, {"migrate_to_chat_id"}), (-1009876543210, {"migrate_from_chat_id"})]
    with pytest.raises(ValueError, match="basic group"):
        tg.migrate(-1001234567890, -1001234567891)  # a supergroup is not upgraded again


async def test_a_forum_topic_is_taken_in_a_supergroup_only(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    forum = -1001234567890
    answer = (await send(client, tg, forum, "in the topic", message_thread_id=7)).json()
    assert (answer["result"]["message_thread_id"], answer["result"]["is_topic_message"]) == (
        7,
        True,
    )
    form = await client.post(tg.method_url(), data={"chat_id": forum, "text": "form",
                                                    "message_thread_id": "9"})  # fmt: skip
    assert form.json()["result"]["message_thread_id"] == 9
    plain = (await send(client, tg, forum, "General", message_thread_id="")).json()["result"]
    assert "message_thread_id" not in plain and "is_topic_message" not in plain
    assert [(d.text, d.thread) for d in tg.deliveries] == [
        ("in the topic", 7), ("form", 9), ("General", None)]  # fmt: skip
    for chat, thread in ((-5, 7), (42, 7), (forum, 0), (forum, -3), (forum, "seven")):
        r = await send(client, tg, chat, "x", message_thread_id=thread)
        assert (r.status_code, error_of(r)["description"]) == (
            400, "Bad Request: message thread not found"), (chat, thread)  # fmt: skip
    assert len(tg.deliveries) == 3


async def test_scripts_are_per_chat_and_in_order(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    tg.script(1, Scripted.server_error(502), Scripted.flood_wait(3))
    tg.script(1, Scripted.forbidden())
    assert tg.pending_scripts(1) == 3
    assert (await send(client, tg, 2, "untouched")).status_code == 200
    statuses = [(await send(client, tg, 1, f"m{i}")).status_code for i in range(4)]
    # The scripted block stays, as a user's block does (the stand-in used to answer it once).
    assert statuses == [502, 429, 403, 403]
    tg.unblock(1)
    assert (await send(client, tg, 1, "m4")).status_code == 200
    assert tg.by_chat() == {2: ["untouched"], 1: ["m4"]}


async def test_script_before_validation_but_after_chat_id(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    tg.script(3, Scripted.server_error())
    # No chat_id: not "to that chat", so the script stays queued.
    assert (await client.post(tg.method_url(), json={"text": "x"})).status_code == 400
    assert tg.pending_scripts(3) == 1
    # Scripted answers come before normal handling, even of an empty text.
    assert (await send(client, tg, 3, "")).status_code == 500
    assert (await send(client, tg, 3, "")).status_code == 400


async def test_block_and_unblock(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    tg.block(5)
    tg.block(6, "Forbidden: user is deactivated")
    for _ in range(3):
        r = await send(client, tg, 5)
        assert r.status_code == 403
        assert error_of(r)["description"] == "Forbidden: bot was blocked by the user"
    assert error_of(await send(client, tg, 6))["description"] == "Forbidden: user is deactivated"
    assert (await send(client, tg, 7)).status_code == 200
    tg.unblock(5)
    tg.unblock(999)  # never blocked: no error
    assert (await send(client, tg, 5, "back")).status_code == 200
    assert tg.by_chat() == {7: ["hi"], 5: ["back"]}


async def test_hang_makes_the_client_time_out_and_still_delivers(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    tg.script(8, Scripted.hang(1.0))
    with pytest.raises(httpx.ReadTimeout):
        await client.post(
            tg.method_url(), json={"chat_id": 8, "text": "slow"}, timeout=httpx.Timeout(0.2)
        )
    assert tg.deliveries == []
    # Like Telegram, the request was still carried out after the client gave up.
    with trio.fail_after(5):
        (d,) = await tg.wait_deliveries(1, chat_id=8)
    assert d.text == "slow"
    assert (await send(client, tg, 8, "fast")).status_code == 200
    assert tg.by_chat() == {8: ["slow", "fast"]}


async def test_hang_then_answers_normally(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    tg.script(9, Scripted.hang(0.2))
    start = trio.current_time()
    r = await send(client, tg, 9, "eventually")
    assert r.status_code == 200
    assert trio.current_time() - start >= 0.2
    assert r.json()["result"]["text"] == "eventually"


def test_scripted_constructor_checks() -> None:
    with pytest.raises(ValueError):
        Scripted.server_error(404)
    with pytest.raises(ValueError):
        Scripted.hang(-1)
    with pytest.raises(ValueError):
        Scripted(200)
    assert Scripted.server_error(504).description == "Gateway Timeout"


# ---- records ------------------------------------------------------------------------------


async def test_max_in_window_and_by_chat(client: httpx.AsyncClient) -> None:
    clock = ManualClock()
    async with open_stand_in(TOKEN, limits=None, clock=clock) as tg:
        for step, chat, text in [
            (0.0, 1, "a"),
            (0.1, 2, "b"),
            (0.1, 1, "c"),
            (0.8, 1, "d"),  # t = 1.0
            (0.05, 2, "e"),
        ]:
            clock.advance(step)
            assert (await send(client, tg, chat, text)).status_code == 200
        assert tg.by_chat() == {1: ["a", "c", "d"], 2: ["b", "e"]}
        assert [d.at - 1000.0 for d in tg.deliveries] == pytest.approx([0, 0.1, 0.2, 1.0, 1.05])
        assert tg.max_in_window(500) == 3
        assert tg.max_in_window(1000) == 4  # [0.1, 1.1) holds b, c, d, e
        assert tg.max_in_window(1051) == 5
        assert tg.max_in_window(1) == 1
        assert tg.max_in_window(500, chat_id=1) == 2
        assert tg.max_in_window(2000, chat_id=2) == 2
        assert tg.max_in_window(2000, chat_id=3) == 0


async def test_wait_deliveries(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    got: list[Delivery] = []

    async def waiter() -> None:
        got.extend(await tg.wait_deliveries(2, chat_id=4))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await send(client, tg, 3, "not this chat")
        await send(client, tg, 4, "one")
        await send(client, tg, 4, "two")
    assert [d.text for d in got] == ["one", "two"]


async def test_keeps_the_most_recent_records_and_counts_them_all(
    client: httpx.AsyncClient,
) -> None:
    clock = ManualClock()
    limits = Limits(global_=Window(100, 1000), private=Window(3, 3000), group=Window(20, 60000))
    async with open_stand_in(TOKEN, limits, keep=5, clock=clock) as tg:
        for i in range(12):
            clock.advance(1.0)  # chat 1 or 2 every 2 s: within the 3 per 3 s
            assert (await send(client, tg, 1 + i % 2, f"m{i}")).status_code == 200
        assert (await send(client, tg, 3, "")).status_code == 400
        for i in range(4):
            r = await send(client, tg, 4, f"burst {i}")
            assert r.status_code == (429 if i == 3 else 200)
        # The records: the most recent 5 of each, oldest first.
        assert [d.text for d in tg.deliveries] == ["m10", "m11", "burst 0", "burst 1", "burst 2"]
        assert [(q.chat_id, q.status) for q in tg.requests] == [
            (3, 400), (4, 200), (4, 200), (4, 200), (4, 429)]  # fmt: skip
        assert tg.by_chat() == {1: ["m10"], 2: ["m11"], 4: ["burst 0", "burst 1", "burst 2"]}
        # The totals: everything since the start.
        assert tg.statistics() == StandInStats(
            requests=17, delivered=15, rate_limited=1, chats=3, statuses={200: 15, 400: 1, 429: 1}
        )
        assert (tg.delivered(), tg.delivered(1), tg.delivered(2), tg.delivered(4)) == (15, 6, 6, 3)
        assert tg.delivered(3) == 0
        r = await send(client, tg, 1, "m12")
        assert r.json()["result"]["message_id"] == 7  # numbering goes on past the kept records
        # Waiting counts the totals; it returns what is kept.
        with trio.fail_after(1):
            assert [d.text for d in await tg.wait_deliveries(16)] == [
                "m11", "burst 0", "burst 1", "burst 2", "m12"]  # fmt: skip
            assert [d.text for d in await tg.wait_deliveries(7, chat_id=1)] == ["m12"]
        # The flood model forgets the chats whose windows have passed.
        assert tg.flood is not None
        assert tg.flood.tracked().chats == 3  # 1, 2 and 4 (chat 3 was never delivered to)
        clock.advance(3.0)
        assert (await send(client, tg, 5, "later")).status_code == 200
        assert tg.flood.tracked().chats == 1


def test_keep_must_be_positive() -> None:
    for keep in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="keep"):
            TelegramStandIn(TOKEN, keep=keep)  # type: ignore[arg-type]
    with pytest.raises(SystemExit):
        standin_main(["--keep", "0"])


async def test_serve_in_a_nursery(client: httpx.AsyncClient) -> None:
    stand_in = TelegramStandIn("42:ABC", limits=None)
    with pytest.raises(RuntimeError):
        _ = stand_in.api_url
    async with trio.open_nursery() as nursery:
        url = await nursery.start(stand_in.serve)
        assert url == stand_in.api_url
        r = await client.get(f"{url}/bot42:ABC/getMe")
        assert r.json()["result"]["id"] == 42
        nursery.cancel_scope.cancel()
    with pytest.raises(RuntimeError):
        _ = stand_in.api_url
    with pytest.raises(httpx.ConnectError):
        await client.get(f"{url}/bot42:ABC/getMe")


async def test_records_are_frozen(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    await send(client, tg, 1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        tg.deliveries[0].text = "changed"  # type: ignore[misc]


@pytest.mark.slow
async def test_standalone_runs_until_interrupted(client: httpx.AsyncClient) -> None:
    argv = [sys.executable, "-m", "codemojex.standin", "--port", "0", "--token", "T"]
    argv.append("--no-limits")
    proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(1)
            assert chunk, "the stand-in exited before printing its address"
            line += chunk
        url = line.decode().split()[3]
        assert url.startswith("http://127.0.0.1:")
        for i in range(5):  # no limits
            r = await client.post(f"{url}/botT/sendMessage", json={"chat_id": 1, "text": f"{i}"})
            assert r.status_code == 200
        proc.send_signal(signal.SIGINT)
        assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()


# ---- as strict as Telegram ----------------------------------------------------------------


async def test_parse_mode_is_applied_or_refused(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    r = await send(client, tg, 5, "<b>Ann &amp; Bob</b> won", parse_mode="HTML")
    result = r.json()["result"]
    assert (result["text"], result["entities"]) == (
        "Ann & Bob won", [{"offset": 0, "length": 9, "type": "bold"}])  # fmt: skip
    r = await send(client, tg, 5, "plain <b>not markup</b>")
    assert r.json()["result"]["text"] == "plain <b>not markup</b>"
    assert "entities" not in r.json()["result"]
    for text, mode, error in (
        ("Tom <the great>", "HTML", 'Unsupported start tag "the" at byte offset 4'),
        ("<b>open", "HTML", 'Can\'t find end tag corresponding to start tag "b"'),
        ("1.5 points", "MarkdownV2",
         "Character '.' is reserved and must be escaped with the preceding '\\'"),
    ):  # fmt: skip
        r = await send(client, tg, 5, text, parse_mode=mode)
        assert r.status_code == 400
        assert error_of(r)["description"] == f"Bad Request: can't parse entities: {error}"
    assert len(tg.deliveries) == 2


async def test_text_is_trimmed_and_its_limits_are_telegrams(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    r = await send(client, tg, 5, "\n  hello  \n")
    assert r.json()["result"]["text"] == "hello"
    assert (tg.deliveries[-1].text, tg.deliveries[-1].shown) == ("\n  hello  \n", "hello")
    r = await send(client, tg, 5, " <b> </b> ", parse_mode="HTML")
    assert error_of(r)["description"] == "Bad Request: text must be non-empty"
    # 4096 after parsing is the message's limit: markup does not count.
    longest = "<b>" + "x" * MAX_MESSAGE_LENGTH + "</b>"
    assert (await send(client, tg, 5, longest, parse_mode="HTML")).status_code == 200
    # Over 32 KiB as sent, the server refuses before parsing.
    r = await send(client, tg, 5, "é" * (MAX_TEXT_BYTES // 2 + 1))
    assert error_of(r)["description"] == "Bad Request: text is too long"


async def test_what_trimming_leaves_is_checked_after_the_chat_and_before_a_block(
    tg: TelegramStandIn, client: httpx.AsyncClient
) -> None:
    """TDLib trims the text once the chat is known and before it sends: whitespace to an
    upgraded group meets the migration, whitespace to a chat that blocked the bot is refused
    for its text (the send never reaches the user)."""
    tg.migrate(-77, -1001000000077)
    tg.block(78)
    r = await send(client, tg, -77, " \n")
    assert r.json()["parameters"] == {"migrate_to_chat_id": -1001000000077}
    assert error_of(await send(client, tg, 78, " \n"))["description"] == (
        "Bad Request: text must be non-empty")  # fmt: skip
    assert error_of(await send(client, tg, 78, "hi"))["error_code"] == 403
    assert error_of(await send(client, tg, 78, ""))["description"] == (
        "Bad Request: message text is empty")  # fmt: skip
    assert tg.deliveries == []


async def test_chats_are_what_their_ids_say(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    tg.name_chat(-42, "Emoji Club")
    tg.name_chat(-1001234567890, "News", channel=True)
    chats = {}
    for chat_id in (7, -42, -999999999999, -1001234567891, -1001234567890):
        chats[chat_id] = (await send(client, tg, chat_id)).json()["result"]["chat"]
    assert chats == {
        7: {"id": 7, "first_name": "User 7", "type": "private"},
        -42: {"id": -42, "title": "Emoji Club", "type": "group",
              "all_members_are_administrators": True},
        -999999999999: {"id": -999999999999, "title": "Chat -999999999999", "type": "group",
                        "all_members_are_administrators": True},
        -1001234567891: {"id": -1001234567891, "title": "Chat -1001234567891",
                         "type": "supergroup"},
        -1001234567890: {"id": -1001234567890, "title": "News", "type": "channel"},
    }  # fmt: skip
    for chat_id in (0, -1000000000000, 1 << 40):
        r = await send(client, tg, chat_id)
        assert error_of(r)["description"] == "Bad Request: chat not found"
    with pytest.raises(ValueError):
        tg.name_chat(0, "nobody")


async def test_multipart_form_data_body(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    r = await client.post(
        tg.method_url(),
        data={"chat_id": "-5", "text": "<i>hi</i>", "parse_mode": "HTML"},
        files={"unused": ("a.txt", b"file body")},  # forces multipart/form-data
    )
    assert r.status_code == 200, r.text
    assert r.json()["result"]["text"] == "hi"
    assert tg.by_chat() == {-5: ["<i>hi</i>"]}
    multipart = {"content-type": "multipart/form-data; boundary=x"}
    bad = await client.post(tg.method_url(), content=b"--x\r\nnot a part", headers=multipart)
    assert error_of(bad)["description"] == "Bad Request: can't parse multipart/form-data"


async def test_429_has_a_retry_after_header(client: httpx.AsyncClient) -> None:
    async with open_stand_in(TOKEN, FloodRules(private=Window(1, 60_000))) as tg:
        assert (await send(client, tg, 1)).status_code == 200
        r = await send(client, tg, 1)
        assert r.status_code == 429
        assert r.headers["retry-after"] == str(error_of(r)["parameters"]["retry_after"]) == "60"
        tg.script(2, Scripted.flood_wait(3))
        assert (await send(client, tg, 2)).headers["retry-after"] == "3"


async def test_telegrams_flood_rules_by_default_and_the_wait_grows(
    client: httpx.AsyncClient,
) -> None:
    clock = ManualClock()
    async with open_stand_in(TOKEN, clock=clock) as tg:
        assert tg.limits == TELEGRAM_FLOOD
        statuses = [(await send(client, tg, -5, f"g{i}")).status_code for i in range(21)]
        assert statuses == [200] * 20 + [429]  # 20 a minute in a group
        assert tg.requests[-1].retry_after == 60
        clock.advance(30)  # a call inside the wait is told what is left of it
        assert error_of(await send(client, tg, -5))["parameters"] == {"retry_after": 30}
        clock.advance(30)
        statuses = [(await send(client, tg, -5, f"h{i}")).status_code for i in range(21)]
        assert statuses == [200] * 20 + [429]
        # Broken again right after the wait: the wait doubles.
        assert tg.requests[-1].retry_after == 120


async def test_proxy_pages_for_502_and_504(tg: TelegramStandIn, client: httpx.AsyncClient) -> None:
    tg.script(1, Scripted.gateway_page(504), Scripted.server_error(502))
    r = await send(client, tg, 1)
    assert (r.status_code, r.headers["content-type"]) == (504, "text/html")
    assert "<title>504 Gateway Timeout</title>" in r.text
    assert (await send(client, tg, 1)).json()["description"] == "Bad Gateway"  # JSON: no switch
    tg.proxy_pages = True
    tg.script(1, Scripted.server_error(502), Scripted.server_error(500))
    assert "<title>502 Bad Gateway</title>" in (await send(client, tg, 1)).text
    assert (await send(client, tg, 1)).json()["description"] == "Internal Server Error"
    assert [q.status for q in tg.requests] == [504, 502, 502, 500]
    with pytest.raises(ValueError):
        Scripted.gateway_page(500)
