"""Kill -9 of the service between admitting updates and confirming their offset: Telegram (the
stand-in) still holds every update, the restarted service reads them all again, the bus answers
``DUPLICATE``, and each update is handled exactly once. The ledger is what the players saw:
the stand-in, in this process, survives the kill and keeps every notice."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from codemojex.chat import UPDATES_QUEUE
from codemojex.game.scoring import ALPHABET
from codemojex.standin import open_stand_in
from echomq_trio import Bus, jobs, open_bus
from tests.codemojex.chat.conftest import TOKEN, group_id, user_id
from tests.conftest import wait_for
from tests.support import Lines, start_service, stop_process

pytestmark = pytest.mark.slow

GUESSES = 3  # per player


async def drained(bus: Bus) -> bool:
    counts = await jobs.counts(bus, UPDATES_QUEUE)
    return counts.pending == 0 and counts.active == 0


@pytest.mark.timeout_s(180)
async def test_kill_9_between_admitting_and_confirming(
    standalone_only: str, tmp_path: Path
) -> None:
    group, players = group_id(), [user_id() for _ in range(4)]
    args = ("--url", standalone_only, "--telegram-api-url", "", "--telegram-token", TOKEN,
            "--demo", "off", "--archive", "off", "--summary-every", "0",
            "--round-length", "600")  # fmt: skip
    async with open_stand_in(TOKEN, None) as tg, open_bus(standalone_only) as bus:
        service = [a if a else tg.api_url for a in args]
        feed = tg.updates
        feed.hold_confirmations = True  # the confirming call is lost with the process
        proc = await start_service(tmp_path, *service)
        try:
            with trio.fail_after(60):
                await Lines(proc).until("codemojex is running")
            host = players[0]
            sent = [feed.user_says(group, host, "/newgame", name="Host", chat_title="G"),
                    feed.user_says(group, host, "/round", name="Host", chat_title="G")]  # fmt: skip
            for n in range(GUESSES):
                for i, player in enumerate(players):
                    guess = "".join(ALPHABET[(i + n + k) % len(ALPHABET)] for k in range(6))
                    sent.append(feed.user_says(group, player, guess, name=f"P{i}"))
            last = max(u for u in sent if u is not None)
            with trio.fail_after(60):
                await feed.wait_offset(last + 1)  # the service has them all on the bus
            assert len(feed.pending) == len(sent)  # and Telegram has confirmed none
            proc.kill()
        finally:
            await stop_process(proc)

        feed.hold_confirmations = False
        again = await start_service(tmp_path, *service)
        try:
            with trio.fail_after(60):
                await Lines(again).until("codemojex is running")
                await feed.wait_confirmed(len(sent))  # read again, then confirmed
            # Everything handled, including a job the killed process held (its lease expires).
            await wait_for(lambda: drained(bus), timeout=90)
            for player in players:  # one answer per guess (a score, or "starts in N s")
                await wait_for(lambda p=player: tg.delivered(p) >= GUESSES, timeout=60)
            await wait_for(lambda: tg.delivered(group) >= 4, timeout=60)
        finally:
            await stop_process(again)
    for player in players:
        assert tg.delivered(player) == GUESSES
    to_group = [t[0] for t in tg.by_chat()[group]]  # the room, the round, its reply, its start
    assert sorted(to_group) == sorted("🎮🎲T⏰"), tg.by_chat()[group]


@pytest.mark.timeout_s(60)
async def test_a_conflict_stops_the_service_with_one_line(
    standalone_only: str, tmp_path: Path
) -> None:
    async with open_stand_in(TOKEN, None) as tg:
        await tg.updates.call("setwebhook", {"url": "https://example.org/hook"})
        proc = await start_service(
            tmp_path, "--url", standalone_only, "--telegram-token", TOKEN, "--telegram-api-url",
            tg.api_url, "--demo", "off", "--archive", "off", "--summary-every", "0",
        )  # fmt: skip
        try:
            out = Lines(proc)
            with trio.fail_after(45):
                lines = await out.rest()
                await proc.wait()
        finally:
            await stop_process(proc)
    assert proc.returncode == 1, lines
    assert lines[-1] == (
        "codemojex: Telegram refused getUpdates (409 Conflict): a webhook is set for this bot. "
        "Run with --updates webhook, or delete the webhook (Bot API deleteWebhook) to poll"
    ), lines
