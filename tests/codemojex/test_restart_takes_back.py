"""``python -m codemojex.run`` killed with SIGKILL while it holds notices (each chat's reply in
flight: the stand-in holds the send) and updates, then started again on its data directory: the
new owner takes back what the dead one held, so every chat answers within 2 s of the restart,
not when the leases (15 s for notices, 30 s for updates) run out. Counted where the sends
arrive: the Bot API stand-in, in this test process, on its own clock."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import trio

from codemojex.standin.bot_api import Scripted, open_stand_in
from tests.support import Lines, start_service, stop_process, wait_for

pytestmark = pytest.mark.slow

TOKEN = "123456:RESTART"
CHATS = list(range(9_100_001, 9_100_007))  # fewer than the worker's 8 notices in hand
ANSWER_WITHIN_S = 2.0


@pytest.mark.timeout_s(180)
async def test_after_a_kill_the_restart_takes_back_its_leases_and_every_chat_answers_at_once(
    tmp_path: Path,
) -> None:
    args = ("--telegram-token", TOKEN, "--demo", "off", "--summary-every", "0")
    async with open_stand_in(TOKEN, keep=1000) as tg:
        for chat in CHATS:
            # Each chat's send is held unanswered (and the send again after the client's timeout).
            tg.script(chat, Scripted.hang(600), Scripted.hang(600))
        proc = await start_service(tmp_path, *args, "--telegram-api-url", tg.api_url)
        try:
            out = Lines(proc)
            await out.until(r"codemojex is running")
            for chat in CHATS:
                tg.updates.user_says(chat, chat, "/help", name=f"P{chat}")
            # Every chat's reply is in flight (its send held by the stand-in) ...
            await wait_for(lambda: all(tg.pending_scripts(c) < 2 for c in CHATS), timeout=60)
            # ... and each says something more: its update is taken in, its reply waits.
            for chat in CHATS:
                tg.updates.user_says(chat, chat, "/help", name=f"P{chat}")
            await wait_for(lambda: tg.updates.confirmed >= 2 * len(CHATS), timeout=60)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            assert tg.delivered() == 0
            for chat in CHATS:  # Telegram answers again
                tg.unscript(chat)
            proc = await start_service(tmp_path, *args, "--telegram-api-url", tg.api_url)
            out = Lines(proc)
            await out.until(r"codemojex is running")
            restarted = time.monotonic()  # the stand-in's clock
            with trio.fail_after(60):
                await tg.wait_deliveries(2 * len(CHATS))
            first = {}
            for d in tg.deliveries:
                first.setdefault(d.chat_id, d.at)
            late = {c: round(first[c] - restarted, 2) for c in CHATS
                    if first[c] - restarted > ANSWER_WITHIN_S}  # fmt: skip
            assert not late, (
                f"chats answered more than {ANSWER_WITHIN_S} s after the restart: {late}"
            )
            assert "took back" in out.text()
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                assert await proc.wait() == 0, out.text()
        finally:
            await stop_process(proc)
