"""The bot client over real HTTP to the stand-in: verdicts, and the token never in the logs."""

import logging

import pytest

from codemojex import ids
from codemojex.notify.classify import Delivered, Drop, Fatal, RetryLater
from codemojex.notify.telegram import open_bot
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
