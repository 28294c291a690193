"""Kill -9 of the service between admitting updates and confirming their offset: Telegram (the
stand-in) still holds every update, the restarted service reads them all again, the bus answers
``DUPLICATE``, and each update is handled exactly once. The ledgers survive the kill: the
queue's count of handled (acked) updates, on a server of the test's own (an update another
test's service left unhandled on the shared server's queue would be counted), and what the
players saw, kept by the stand-in in this process."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from codemojex.chat import UPDATES_QUEUE
from codemojex.game.scoring import ALPHABET
from codemojex.notify import NOTIFY_QUEUE
from codemojex.standin import open_stand_in
from echomq_trio import Bus, jobs, lanes, open_bus
from tests.codemojex.chat.conftest import TOKEN, group_id, user_id
from tests.support import Lines, start_service, stop_process, wait_for

pytestmark = pytest.mark.slow

GUESSES = 3  # per player and chat


async def settled(bus: Bus, queue: str, chats: list[int]) -> bool:
    """Nothing of these chats waits or is in flight on ``queue``."""
    status = await lanes.status(bus, queue, [str(c) for c in chats])
    return all(s.depth == 0 and s.in_flight == 0 for s in status)


async def drained(bus: Bus) -> bool:
    counts = await jobs.counts(bus, UPDATES_QUEUE)
    return counts.pending == 0 and counts.active == 0


@pytest.mark.timeout_s(240)
async def test_kill_9_between_admitting_and_confirming(own_server_url: str, tmp_path: Path) -> None:
    """Two groups play; ``early``'s updates are handled before the kill, ``late``'s lane is
    paused so that its updates are on the bus, unhandled, when the service dies. Telegram has
    confirmed none of them. After the restart every update is read again: each is handled
    once, and each player and group gets each of its notices once."""
    early, late, players = group_id(), group_id(), [user_id() for _ in range(3)]
    args = ("--url", own_server_url, "--telegram-api-url", "", "--telegram-token", TOKEN,
            "--demo", "off", "--archive", "off", "--summary-every", "0",
            "--round-length", "600")  # fmt: skip
    async with open_stand_in(TOKEN, None) as tg, open_bus(own_server_url) as bus:
        service = [a if a else tg.api_url for a in args]
        feed = tg.updates
        feed.hold_confirmations = True  # the confirming call is lost with the process
        await lanes.pause(bus, UPDATES_QUEUE, str(late))
        before = (await jobs.counts(bus, UPDATES_QUEUE)).completed_total  # the handling ledger
        proc = await start_service(tmp_path, *service)
        try:
            with trio.fail_after(60):
                await Lines(proc).until("codemojex is running")
            sent = []
            for group in (early, late):
                sent += [feed.user_says(group, players[0], c, name="Host", chat_title="G")
                         for c in ("/newgame", "/round")]  # fmt: skip
                for n in range(GUESSES):
                    for i, player in enumerate(players):
                        guess = "".join(ALPHABET[(i + n + k) % len(ALPHABET)] for k in range(6))
                        sent.append(feed.user_says(group, player, guess, name=f"P{i}"))
            last = max(u for u in sent if u is not None)
            with trio.fail_after(60):
                await feed.wait_offset(last + 1)  # the service has them all on the bus
            # early's handled and its notices out (a notice in flight at a kill may go twice:
            # delivery is at least once, the notification pipeline's own tests cover that).
            await wait_for(lambda: tg.delivered(early) == 4, timeout=60)  # with the reminder
            await wait_for(lambda: settled(bus, UPDATES_QUEUE, [early]), timeout=30)
            await wait_for(lambda: settled(bus, NOTIFY_QUEUE, [early, *players]), timeout=30)
            assert len(feed.pending) == len(sent)  # Telegram has confirmed none
            assert len(await lanes.jobs(bus, UPDATES_QUEUE, str(late))) == len(sent) // 2
            proc.kill()
        finally:
            await stop_process(proc)

        feed.hold_confirmations = False
        again = await start_service(tmp_path, *service)
        try:
            with trio.fail_after(60):
                await Lines(again).until("codemojex is running")
                await feed.wait_confirmed(len(sent))  # read again, then confirmed
            assert len(await lanes.jobs(bus, UPDATES_QUEUE, str(late))) == len(sent) // 2
            await lanes.resume(bus, UPDATES_QUEUE, str(late))
            await wait_for(lambda: drained(bus), timeout=60)
            for player in players:  # one answer per guess (a score, or "starts in N s")
                await wait_for(lambda p=player: tg.delivered(p) >= 2 * GUESSES, timeout=60)
            await wait_for(lambda: tg.delivered(late) >= 4, timeout=60)
            await wait_for(lambda: settled(bus, NOTIFY_QUEUE, [early, late, *players]))
            handled = (await jobs.counts(bus, UPDATES_QUEUE)).completed_total - before
        finally:
            await stop_process(again)
    assert handled == len(sent)  # each update handled once: none lost, none again
    for player in players:
        assert tg.delivered(player) == 2 * GUESSES
    for group in (early, late):  # the room, the round, its reply, its start
        assert sorted(t[0] for t in tg.by_chat()[group]) == sorted("🎮🎲T⏰"), tg.by_chat()[group]


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
