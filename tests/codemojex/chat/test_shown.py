"""What players see, read where Telegram shows it: every text the game sends in a chat, played
end to end through the stand-in (which applies parse modes as Telegram does), for names and a
title holding ``<``, ``&``, ``*`` and ``_``. A text sent as HTML has its names escaped and
shows them as written; a text sent plain has no markup, so it shows them as written too: no
``&lt;``, no ``&amp;``, no tags. And in a forum supergroup, each answer goes to the topic of
the message it answers."""

from __future__ import annotations

import pytest

from codemojex.chat import room_of_chat
from codemojex.game import current_round, digest_text, get_room
from codemojex.game.days import day_of
from codemojex.game.texts import escape
from codemojex.notify import notify
from codemojex.standin import Delivery, TelegramStandIn, open_stand_in
from echomq_trio import Bus
from tests.codemojex.chat.conftest import BOT, TOKEN, group_id, playing, user_id
from tests.codemojex.chat.test_upgrade import end_now, supergroup_id

pytestmark = pytest.mark.slow

TITLE = "R&D <i>lab</i> *_*"
EVE = "<Eve> & *co*"
TOM = "_Tom_ <b>x</b> &amp;"
MARKED = (TITLE, EVE, TOM)


async def texts(tg: TelegramStandIn, chat: int, count: int) -> list[Delivery]:
    return await tg.wait_deliveries(count, chat)


def as_written(delivery: Delivery) -> None:
    """A delivery shows every name it holds as written, never its escapes, and its markup
    (if any) is the game's own bold."""
    for name in MARKED:
        assert escape(name) not in delivery.shown, (name, delivery)
    assert delivery.parse_mode in (None, "HTML"), delivery
    if delivery.parse_mode is None:
        assert delivery.text == delivery.shown and not delivery.entities, delivery
    else:
        assert {e.type for e in delivery.entities} <= {"bold"}, delivery


@pytest.mark.timeout_s(120)
async def test_names_with_markup_characters_are_shown_as_written_everywhere(
    bus: Bus, queue: str
) -> None:
    group, eve, tom = group_id(), user_id(), user_id()
    async with (
        open_stand_in(TOKEN, None) as tg,
        playing(bus, queue, tg, round_ms=600_000, start_in_ms=0),
    ):
        u = tg.updates

        def say(user: int, text: str, name: str) -> None:
            u.user_says(group, user, text, name=name, chat_title=TITLE)

        async def answer(user: int, text: str, name: str) -> str:
            before = tg.delivered(group)
            say(user, text, name)
            return (await texts(tg, group, before + 1))[-1].shown

        assert (await answer(eve, "/top", EVE)).startswith("No game in this chat yet")
        made = await answer(eve, f"/newgame@{BOT}", EVE)
        assert made.startswith(f"🎮 {TITLE} plays codemojex now!\n🎯 codemojex")
        assert (await answer(tom, "/start", TOM)).startswith(f"{TITLE} already plays.\n")
        assert (await answer(tom, "/help", TOM)).startswith("🎯 codemojex: guess the 6")
        assert await answer(eve, "/top", EVE) == f"No round in {TITLE} yet: /round starts one."
        assert await answer(tom, "/me", TOM) == f"{TOM}: no round yet: /round starts one."

        say(eve, "/round", EVE)
        started = [d.shown for d in await texts(tg, group, 9)][-3:]
        room = await room_of_chat(bus, group)
        assert room is not None
        rnd = await current_round(bus, room)
        assert f"🎲 New round {rnd.id} in {TITLE}: it starts in 0 s." in "".join(started)
        busy = await answer(tom, "/round", TOM)
        assert busy.startswith("A round is already in play: it ends in ")

        say(eve, "".join(rnd.secret), EVE)
        say(tom, "".join(rnd.secret[1:] + rnd.secret[:1]), TOM)
        (scored,) = await texts(tg, eve, 1)
        assert scored.shown.startswith("100% (600/600)")
        await texts(tg, tom, 1)
        say(tom, "🦀" * 6, TOM)  # not the game's emojis: told in private, with the title
        refused = (await texts(tg, tom, 2))[-1].shown
        assert refused.startswith(f"{TITLE}: '🦀' is not one of the game's emojis")

        top = await answer(tom, "/top", TOM)
        toms = top.splitlines()[2].rsplit(" ", 1)[1]
        assert top.splitlines() == [f"🏆 {TITLE}, round {rnd.id} (in play)", f"1. {EVE} 100%",
                                    f"2. {TOM} {toms}"]  # fmt: skip
        me = await answer(tom, f"/me@{BOT}", TOM)
        assert me.startswith(f"{TOM}: best ") and me.endswith("rank 2.")

        await end_now(bus, queue, rnd)
        results = (await texts(tg, group, tg.delivered(group) + 1))[-1].shown
        digest = await digest_text(bus, await get_room(bus, room), day_of(rnd.starts_at_ms))
        await notify(bus, group, digest.body, digest.opts())  # what the daily digest sends
        daily = (await texts(tg, group, tg.delivered(group) + 1))[-1].shown
        assert results.splitlines()[1:] == top.replace(" (in play)", "").splitlines()
        assert daily.splitlines()[1:] == top.splitlines()[1:]
        assert daily.startswith(f"🏆 Daily standings, {TITLE} (")

        everything = [d for d in tg.deliveries if d.chat_id in (group, eve, tom)]
        assert len(everything) == tg.delivered(group) + 1 + 2
        for delivery in everything:
            as_written(delivery)
        html = [d.shown.splitlines()[0] for d in everything if d.parse_mode == "HTML"]
        announced = next(t for t in started if t.startswith("🎲"))
        assert html == [announced, top.splitlines()[0], results.splitlines()[0],
                        daily.splitlines()[0]]  # fmt: skip


@pytest.mark.timeout_s(90)
async def test_answers_in_a_forum_go_to_the_topic_they_answer(bus: Bus, queue: str) -> None:
    forum, eve = supergroup_id(), user_id()
    games, chatter = 7, 12  # two topics' message_thread_id
    async with (
        open_stand_in(TOKEN, None) as tg,
        playing(bus, queue, tg, round_ms=600_000, start_in_ms=0),
    ):

        def say(text: str, thread: int | None) -> None:
            tg.updates.user_says(forum, eve, text, name=EVE, chat_title=TITLE, thread=thread)

        say("/newgame", None)  # the General topic: no thread
        say("/round", games)
        await texts(tg, forum, 4)  # the room; the announcement, the reply, the start
        room = await room_of_chat(bus, forum)
        assert room is not None
        rnd = await current_round(bus, room)
        say("/top", chatter)
        say("/round", chatter)
        await texts(tg, forum, 6)
        await end_now(bus, queue, rnd)
        await texts(tg, forum, 7)

    where = [(d.shown.split()[0], d.thread) for d in tg.deliveries if d.chat_id == forum]
    assert where[0] == ("🎮", None)
    assert sorted(where[1:4], key=str) == sorted([("🎲", games), ("The", games), ("⏰", games)],
                                                 key=str)  # fmt: skip
    assert where[4:] == [("R&D", chatter), ("A", chatter), ("Round", games)]  # no scores yet
    assert rnd.thread == games
