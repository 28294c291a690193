"""The bot client over real HTTP to the stand-in: verdicts, and the token never in the logs."""

import logging

import httpx
import pytest

from codemojex import ids
from codemojex.notify.classify import Delivered, Drop, Fatal, RetryLater, classify
from codemojex.notify.telegram import not_json, open_bot
from codemojex.standin.bot_api import Scripted, open_stand_in

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


def test_an_answer_that_is_not_json_keeps_its_retry_after_header() -> None:
    page = httpx.Response(429, headers={"retry-after": "7", "content-type": "text/plain"},
                          content=b"slow down")  # fmt: skip
    assert classify(429, not_json(page)) == RetryLater(
        "HTTP 429 Too Many Requests: not JSON (text/plain)", 7000, flood=True
    )
    assert not_json(httpx.Response(200, content=b"<html><title>Wi-Fi login</title></html>")) == {
        "ok": False,
        "error_code": 200,
        "description": 'HTTP 200 OK: not JSON (no content type, "Wi-Fi login")',
    }
    assert isinstance(classify(200, not_json(httpx.Response(200, content=b"?"))), RetryLater)
