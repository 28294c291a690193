"""A round played end to end through the stand-in, as people in a group would: updates in
(``getUpdates``), the game, the board and the live feed, the notices out, each chat's in order."""

from __future__ import annotations

import json

import pytest
import trio
from trio_websocket import open_websocket_url

from codemojex import ids
from codemojex.chat import ChatGame, room_of_chat
from codemojex.game import Feed, board, current_round
from codemojex.game.scoring import ALPHABET
from codemojex.notify import NOTIFY_QUEUE
from codemojex.notify.notice import decode
from codemojex.standin import open_stand_in
from echomq_trio import Bus, Job, jobs, lanes
from tests.codemojex.chat.conftest import BOT, TOKEN, group_id, playing, user_id
from tests.support import wait_for

pytestmark = pytest.mark.slow


async def texts(tg, chat: int, count: int) -> list[str]:  # type: ignore[no-untyped-def]
    return [d.shown for d in await tg.wait_deliveries(count, chat)]  # as a person reads it


@pytest.mark.cluster  # slot routing: see tests/conftest.py
@pytest.mark.timeout_s(90)
async def test_a_round_played_in_a_group(bus: Bus, queue: str) -> None:
    group, alice, bob = group_id(), user_id(), user_id()
    async with (
        open_stand_in(TOKEN, None) as tg,
        playing(bus, queue, tg, round_ms=600_000, start_in_ms=0) as (game, poller),
        trio.open_nursery() as nursery,
    ):
        u = tg.updates

        def say(user: int, text: str, name: str) -> None:
            u.user_says(group, user, text, name=name, chat_title="Test Group")

        say(alice, f"/newgame@{BOT}", "Alice")
        (made,) = await texts(tg, group, 1)
        assert made.startswith("🎮 Test Group plays codemojex now!")
        room = await room_of_chat(bus, group)
        assert room is not None

        say(bob, "/round", "Bob")
        shown = await texts(tg, group, 4)  # and the announcement, the reply, the start reminder
        rnd = await current_round(bus, room)
        assert any(t.startswith(f"🎲 New round {rnd.id} in Test Group") for t in shown)
        assert "The round lasts 600 s: send 6 emojis here to guess." in shown
        assert any(t.startswith(f"⏰ Round {rnd.id} has started") for t in shown)

        feed = Feed(bus)
        port = await nursery.start(feed.serve, "127.0.0.1", 0)
        async with open_websocket_url(f"ws://127.0.0.1:{port}/rooms/{room}") as ws:
            first = json.loads(await ws.get_message())
            assert (first["round"], first["open"], first["top"]) == (rnd.id, True, [])

            worse = [*rnd.secret[1:], next(e for e in ALPHABET if e not in rnd.secret)]
            say(alice, " ".join(rnd.secret), "Alice")  # spaces between emojis are fine
            say(bob, "".join(worse), "Bob")
            (mine,) = await texts(tg, alice, 1)
            assert mine.startswith("100% (600/600)") and mine.endswith("rank 1")
            (bobs,) = await texts(tg, bob, 1)
            assert "rank 2" in bobs
            with trio.fail_after(20):
                while True:  # the feed shows every change; wait for the one with both
                    top = json.loads(await ws.get_message())["top"]
                    if len(top) == 2:
                        break
            assert (top[0]["name"], top[0]["percentage"]) == ("Alice", 100)

        standings = await board.top(bus, board.round_board(room, rnd.id))
        assert standings[0].percentage == 100 and len(standings) == 2

        # An edit is not even sent (the poller asks for messages only); ignored by rule: a
        # sticker, another bot, conversation, another bot's command.
        before = tg.delivered(group)
        edit = {"from": {"id": alice, "is_bot": False, "first_name": "A"},
                "chat": {"id": group, "type": "group", "title": "T"}, "text": "x"}  # fmt: skip
        assert u.push("edited_message", edit) is None
        u.push("message", {"from": {"id": bob, "is_bot": False, "first_name": "Bob"},
                           "chat": {"id": group, "type": "group", "title": "T"},
                           "sticker": {"file_id": "x", "emoji": "😀"}})  # fmt: skip
        u.user_says(group, 999, "/top", name="OtherBot", chat_title="T", is_bot=True)
        say(bob, "nice one alice", "Bob")
        say(bob, "/top@another_bot", "Bob")
        say(bob, "/top", "Bob")
        say(bob, f"/me@{BOT}", "Bob")
        after = await texts(tg, group, before + 2)
        top_text, me_text = after[-2:]
        assert top_text.splitlines()[1:] == ["1. Alice 100%", f"2. Bob {standings[1].percentage}%"]
        assert me_text == f"Bob: best {standings[1].percentage}% in round {rnd.id}, rank 2."

        u.user_says(alice, alice, "/start", name="Alice")  # a private chat gets the help
        _, help_text = await texts(tg, alice, 2)
        assert "is played in groups" in help_text

        # Each chat got its notices in the order they were sent, nothing else, once each.
        in_group = [d.shown for d in tg.deliveries if d.chat_id == group]
        assert [t for t in in_group if not t.startswith("⏰")] == [
            *[t for t in shown if not t.startswith("⏰")], top_text, me_text,
        ]  # fmt: skip
        assert len(tg.by_chat()[alice]) == 2 and len(tg.by_chat()[bob]) == 1
        stats = game.statistics()
        assert (stats.guesses, stats.ignored) == (2, 4)
        await wait_for(lambda: poller.statistics().admitted == stats.updates)
        nursery.cancel_scope.cancel()


@pytest.mark.timeout_s(60)
async def test_a_round_ends_by_itself_with_its_results(bus: Bus, queue: str) -> None:
    group, alice = group_id(), user_id()
    async with (
        open_stand_in(TOKEN, None) as tg,
        playing(bus, queue, tg, round_ms=1_000, start_in_ms=0) as (game, _),
    ):
        tg.updates.user_says(group, alice, "/start", name="Alice", chat_title="Quick")
        tg.updates.user_says(group, alice, "/round", name="Alice", chat_title="Quick")
        await wait_for(lambda: game.statistics().rounds_ended == 1)
        shown = await texts(tg, group, 5)  # the room, the round, its reply, start, results
        (results,) = [t for t in shown if t.startswith("Round over, the secret was ")]
        assert results.endswith("no scores yet.")
        room = await room_of_chat(bus, group)
        assert room is not None
        assert (await jobs.counts(bus, queue)).scheduled == 0  # the end ran once


async def test_an_update_handled_again_after_a_crash_answers_once(bus: Bus, queue: str) -> None:
    """A handler that died mid-way runs the update again when its lease expires: every answer
    is keyed by the update, the round's end by the round, so nothing is said or done twice."""
    group, alice = group_id(), user_id()
    game = ChatGame(bus, 1, BOT, queue=queue, start_in_ms=0)
    chat = {"id": group, "type": "group", "title": "Twice"}
    sender = {"id": alice, "is_bot": False, "first_name": "Alice"}

    async def twice(update_id: int, text: str) -> None:
        update = {"update_id": update_id, "message": {"chat": chat, "from": sender, "text": text}}
        job = Job(queue, ids.new(ids.JOB), json.dumps(update).encode(), 1, 1, 0, str(group))
        for _ in range(2):
            assert await game.handle(job) is None

    await twice(1, "/newgame")
    await twice(2, "/round")
    room = await room_of_chat(bus, group)
    assert room is not None
    rnd = await current_round(bus, room)
    await twice(3, "".join(rnd.secret))
    to_group = [decode(j.payload).text for j in await lanes.jobs(bus, NOTIFY_QUEUE, str(group))]
    assert [t[0] for t in to_group] == ["🎮", "🎲", "T"]
    (to_alice,) = await lanes.jobs(bus, NOTIFY_QUEUE, str(alice))
    assert decode(to_alice.payload).text.startswith("100%")
    assert (await jobs.counts(bus, queue)).scheduled == 1  # one end for the round


async def test_an_upgrade_to_an_id_no_chat_has_is_buried(bus: Bus, queue: str) -> None:
    game = ChatGame(bus, 1, BOT, queue=queue)
    chat = {"id": group_id(), "type": "group", "title": "G"}
    update = {"update_id": 1, "message": {"chat": chat, "migrate_to_chat_id": 0}}
    job = Job(queue, ids.new(ids.JOB), json.dumps(update).encode(), 1, 1, 0, str(chat["id"]))
    buried = await game.handle(job)
    assert buried is not None and "not an upgrade" in buried.reason
