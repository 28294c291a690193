"""The bot client over real HTTP to the stand-in: verdicts, and the token never in the logs."""

import logging

import httpx
import pytest
import trio

from codemojex import ids
from codemojex.standin.bot_api import Scripted, open_stand_in
from codemojex.standin.outage import open_outage
from codemojex.telegram.bot import garbled, open_bot
from codemojex.telegram.classify import Delivered, Drop, Fatal, Garbled, RetryLater, classify
from tests.support import wait_for

TOKEN = "987654:SECRET-TOKEN-VALUE"


async def test_send_and_classify_and_never_log_the_token(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with open_stand_in(TOKEN, None) as tg, open_bot(TOKEN, tg.api_url, timeout_s=1) as bot:
        assert (await bot.get_me())["is_bot"] is True
        assert isinstance(await bot.send_message(5, "hi", parse_mode="HTML"), Delivered)
        tg.script(5, Scripted.forbidden(), Scripted.hang(3))
        assert await bot.send_message(5, "x") == Drop("Forbidden: bot was blocked by the user")
        timed_out = await bot.send_message(5, "slow")
        assert isinstance(timed_out, RetryLater) and "Timeout" in timed_out.reason
        assert TOKEN not in timed_out.reason
    async with open_stand_in("111:OTHER", None) as tg, open_bot(TOKEN, tg.api_url) as bot:
        assert isinstance(await bot.send_message(5, "x"), Fatal)  # 401: wrong token
        with pytest.raises(RuntimeError) as info:
            await bot.get_me()
        assert TOKEN not in str(info.value)
    assert caplog.records, "httpx logs each request"
    assert not any(TOKEN in r.getMessage() for r in caplog.records)


async def test_bad_tokens_are_refused() -> None:
    for token in ("", "a/b", "a b"):
        with pytest.raises(ValueError):
            async with open_bot(token):
                pass


def test_game_ids() -> None:
    for kind in (ids.USER, ids.ROOM, ids.ROUND, ids.NOTICE, ids.JOB):
        value = ids.new(kind)
        assert ids.is_valid(value, kind) and value.startswith(kind)
    with pytest.raises(ValueError):
        ids.new("CMD")


async def test_proxy_pages_are_retried_with_what_they_were() -> None:
    # The real 502/504 come from the proxy in front of the Bot API as HTML pages, not JSON.
    async with (
        open_stand_in(TOKEN, None, proxy_pages=True) as tg,
        open_bot(TOKEN, tg.api_url, timeout_s=5) as bot,
    ):
        tg.script(5, Scripted.server_error(502), Scripted.server_error(504))
        tg.script(5, Scripted.server_error(500), Scripted.gateway_page(502))
        reasons = []
        for _ in range(4):
            verdict = await bot.send_message(5, "x")
            assert isinstance(verdict, RetryLater) and not verdict.flood
            reasons.append(verdict.reason)
        assert reasons == [
            'HTTP 502 Bad Gateway: not JSON (text/html, "502 Bad Gateway")',
            'HTTP 504 Gateway Timeout: not JSON (text/html, "504 Gateway Timeout")',
            "Internal Server Error",  # a 500 is the Bot API's own, in JSON
            'HTTP 502 Bad Gateway: not JSON (text/html, "502 Bad Gateway")',
        ]
        assert isinstance(await bot.send_message(5, "x"), Delivered)


def test_an_answer_that_is_not_the_bot_api_s_is_read_for_what_it_was() -> None:
    page = httpx.Response(429, headers={"retry-after": "7", "content-type": "text/plain"},
                          content=b"slow down")  # fmt: skip
    assert garbled(page) == Garbled(429, "not JSON (text/plain, 9 bytes)", 7)
    assert classify(429, garbled(page)) == RetryLater(
        "HTTP 429 Too Many Requests: not JSON (text/plain, 9 bytes)", 7000, flood=True
    )
    portal = httpx.Response(200, content=b"<html><title>Wi-Fi login</title></html>")
    assert garbled(portal) == Garbled(200, 'not JSON (no content type, "Wi-Fi login")')
    assert classify(200, garbled(portal)) == RetryLater(
        'HTTP 200 OK: not JSON (no content type, "Wi-Fi login")', server=True, garbled=True
    )
    cut = httpx.Response(200, headers={"content-type": "application/json"}, content=b'{"ok":tr')
    assert garbled(cut).what == "not JSON (application/json, 8 bytes)"
    assert garbled(httpx.Response(200, content=b"")).what == "not JSON (no content type, empty)"
    assert (
        garbled(httpx.Response(200, json=[1]), [1]).what == "JSON but not the Bot API's (an array)"
    )
    assert garbled(httpx.Response(503, json={}), {}).description == (
        'HTTP 503 Service Unavailable: JSON but not the Bot API\'s (an object without "ok")'
    )


async def test_garbage_and_silence_from_the_switch_over_real_http() -> None:
    async with (
        open_stand_in(TOKEN, None) as tg,
        open_outage(tg) as outage,
        open_bot(TOKEN, outage.api_url, timeout_s=1) as bot,
    ):
        assert await bot.reachable() and bot.last_answer is not None
        answered = bot.last_answer
        # A 200 with a page: garbage, and getMe gets the same; nothing reaches the Bot API.
        outage.mode = "not_json"
        assert await bot.send_message(5, "x") == RetryLater(
            'HTTP 200 OK: not JSON (text/html, "Network notice")', server=True, garbled=True
        )
        assert not await bot.reachable()
        assert (outage.refused, outage.refused_sends, tg.statistics().requests) == (2, 1, 0)
        # A body cut short: the send was delivered, but its answer cannot say so.
        outage.mode = "truncated"
        cut = await bot.send_message(5, "cut")
        assert isinstance(cut, RetryLater) and cut.cause == "not_bot_api"
        assert cut.reason.startswith("HTTP 200 OK: not JSON (application/json, ")
        assert not await bot.reachable()
        assert tg.by_chat() == {5: ["cut"]} and (outage.cut, outage.cut_sends) == (2, 1)
        assert bot.last_answer == answered  # no answer of the Bot API's since
        # No answer at all: the request shows in flight until the client gives up.
        outage.mode = "hang"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bot.send_message, 6, "hangs")
            await wait_for(lambda: bot.unanswered() is not None)
            request = bot.unanswered()
            assert request is not None and request.describe() == "sendMessage to chat 6"
        assert bot.unanswered() is None  # timed out
        assert (await bot.send_message(6, "again")).cause == "no_answer"  # type: ignore[union-attr]
        # Switched off, the requests still held get the proxy's 504 page.
        verdicts = []
        async with (
            open_bot(TOKEN, outage.api_url, timeout_s=30) as patient,
            trio.open_nursery() as nursery,
        ):

            async def send() -> None:
                verdicts.append(await patient.send_message(6, "held"))

            nursery.start_soon(send)
            await wait_for(lambda: patient.unanswered() is not None and outage.hung == 3)
            outage.mode = None
        assert verdicts == [RetryLater('HTTP 504 Gateway Timeout: not JSON (text/html, "504 '
                                       'Gateway Timeout")', server=True)]  # fmt: skip
        assert await bot.reachable() and isinstance(await bot.send_message(6, "ok"), Delivered)
        assert tg.by_chat() == {5: ["cut"], 6: ["ok"]}
