"""A group upgraded to a supergroup mid-game, played end to end: updates in through the stand-in
(``getUpdates``), the game, the board, the notices out through the worker to the stand-in over
HTTP, on a real server. The game, its board and ``/top`` go on under the new id, whichever
signal of the upgrade comes first: Telegram's service messages (``migrate_to_chat_id`` in the
old group, ``migrate_from_chat_id`` in the new supergroup), or a send to the old id answered
400 with ``migrate_to_chat_id``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio

from codemojex import ids
from codemojex.chat import UPDATES_QUEUE, ChatGame, room_of_chat
from codemojex.game import board, current_round, get_room
from codemojex.game.rounds import Round
from codemojex.standin import TelegramStandIn, open_stand_in
from echomq_trio import Bus, lanes, open_bus
from tests.codemojex.chat.conftest import TOKEN, group_id, playing, user_id
from tests.support import Lines, start_service, stop_process, wait_for

pytestmark = pytest.mark.slow

TITLE = "Eve's <b>Team</b> & *co*_"


def supergroup_id() -> int:
    """A supergroup id (-100...) no other test uses."""
    return -1_000_000_000_000 - random.randrange(1, 10**12 - 2**31)


def requests_to(tg: TelegramStandIn, chat: int) -> int:
    return sum(1 for r in tg.requests if r.chat_id == chat)


def shown(tg: TelegramStandIn, chat: int) -> list[str]:
    return [d.shown for d in tg.deliveries if d.chat_id == chat]


async def end_now(bus: Bus, queue: str, rnd: Round) -> None:
    """Bring the round's scheduled end (a job on the updates queue) forward to now: the
    metronome promotes it and the game ends the round, as when its time comes."""
    end_job = ids.JOB + rnd.id[len(ids.ROUND) :]
    assert await bus.transport.command("ZADD", bus.keys(queue).schedule, "XX", "CH", "0", end_job)


def worse(rnd: Round, by: int) -> str:
    """A guess below the secret's 100%: the secret rotated by ``by``."""
    return "".join(rnd.secret[by:] + rnd.secret[:by])


@pytest.mark.timeout_s(120)
async def test_a_group_upgraded_mid_game_plays_on_under_the_new_id(bus: Bus, queue: str) -> None:
    """Telegram's service messages come: a guess made in the group before the upgrade, one
    handled after it (its lane held back until then) and one made in the supergroup land on
    the same board; ``/top`` in the supergroup shows it, the results go there, and nothing is
    sent to the old id once the upgrade is known (not even the one send that would learn it)."""
    old, new = group_id(), supergroup_id()
    alice, bob, carol = user_id(), user_id(), user_id()
    async with (
        open_stand_in(TOKEN, None) as tg,
        playing(bus, queue, tg, round_ms=600_000, start_in_ms=0) as (game, _),
    ):
        tg.name_chat(old, TITLE)
        u = tg.updates
        u.user_says(old, alice, "/newgame", name="Alice", chat_title=TITLE)
        u.user_says(old, alice, "/round", name="Alice", chat_title=TITLE)
        await started(tg, old)
        room = await room_of_chat(bus, old)
        assert room is not None
        rnd = await current_round(bus, room)
        u.user_says(old, alice, "".join(rnd.secret), name="Alice", chat_title=TITLE)
        await delivered(tg, 1, alice, game)

        # Bob guesses just before the upgrade, and the game reaches it only after: the old
        # group's lane is held until the new supergroup has been played in.
        await lanes.pause(bus, queue, str(old))
        u.user_says(old, bob, worse(rnd, 1), name="Bob", chat_title=TITLE)
        await wait_for(lambda: _waiting(bus, queue, old, 1))
        sent_to_old = requests_to(tg, old)
        tg.migrate(old, new)  # and Telegram says so in both chats
        await wait_for(lambda: _moved(bus, room, new))

        u.user_says(new, carol, worse(rnd, 2), name="Carol", chat_title=TITLE)
        await delivered(tg, 1, carol, game)
        await lanes.resume(bus, queue, str(old))
        await delivered(tg, 1, bob, game)  # his guess counted in the same round
        await wait_for(lambda: game.statistics().upgrades == 2)  # both messages, one move

        u.user_says(new, carol, "/top", name="Carol", chat_title=TITLE)
        (top,) = await _next(tg, new, 1, game)
        u.user_says(new, bob, "/me", name="Bob", chat_title=TITLE)
        (me,) = await _next(tg, new, 2, game)
        await end_now(bus, queue, rnd)
        (results,) = await _next(tg, new, 3, game)

    standings = await board.top(bus, board.round_board(room, rnd.id))
    assert len(standings) == 3 and standings[0].percentage == 100
    heading, *board_lines = top.splitlines()
    assert heading == f"🏆 {TITLE}, round {rnd.id} (in play)"  # as written: HTML, escaped
    assert board_lines[0] == "1. Alice 100%"
    assert sorted(line.split()[1] for line in board_lines) == ["Alice", "Bob", "Carol"]
    assert me.startswith("Bob: best ") and me.endswith(f"rank {_rank(top, 'Bob')}.")
    assert results.startswith("Round over, the secret was ")
    assert results.splitlines()[1:] == [f"🏆 {TITLE}, round {rnd.id}", *board_lines]
    assert (await get_room(bus, room)).chat == new
    assert requests_to(tg, old) == sent_to_old  # nothing to the old id after the upgrade
    assert tg.statistics().statuses.get(400, 0) == 0
    assert [len(tg.by_chat()[p]) for p in (alice, bob, carol)] == [1, 1, 1]


@pytest.mark.timeout_s(120)
async def test_a_send_answered_with_the_move_carries_the_game_over(bus: Bus, queue: str) -> None:
    """No service message reaches the game: the round's results, sent to the old id, are
    answered 400 with ``migrate_to_chat_id``, and the worker's record of the move carries the
    room along in the same script. ``/top`` in the supergroup finds the game, a new round is
    played there, and the old id is tried that once. The service messages coming late change
    nothing but the room's record, which names the new chat from then on."""
    old, new = group_id(), supergroup_id()
    alice, bob = user_id(), user_id()
    async with (
        open_stand_in(TOKEN, None) as tg,
        playing(bus, queue, tg, round_ms=600_000, start_in_ms=0) as (game, _),
    ):
        u = tg.updates
        u.user_says(old, alice, "/newgame", name="Alice", chat_title=TITLE)
        u.user_says(old, alice, "/round", name="Alice", chat_title=TITLE)
        await started(tg, old)
        room = await room_of_chat(bus, old)
        assert room is not None
        first = await current_round(bus, room)
        u.user_says(old, alice, "".join(first.secret), name="Alice", chat_title=TITLE)
        await delivered(tg, 1, alice)
        sent_to_old = requests_to(tg, old)
        tg.migrate(old, new, announce=False)

        await end_now(bus, queue, first)
        (results,) = await _next(tg, new, 1)  # tried at the old id, answered with the move
        assert await room_of_chat(bus, new) == room
        u.user_says(new, bob, "/top", name="Bob", chat_title=TITLE)
        (top,) = await _next(tg, new, 2)
        u.user_says(new, bob, "/round", name="Bob", chat_title=TITLE)
        await delivered(tg, 5, new)  # and the announcement, the reply, the start
        second = await current_round(bus, room)
        u.user_says(new, bob, "".join(second.secret), name="Bob", chat_title=TITLE)
        await delivered(tg, 1, bob)
        assert requests_to(tg, old) == sent_to_old + 1
        assert tg.statistics().statuses.get(400, 0) == 1

        assert (await get_room(bus, room)).chat == old  # not known to the game yet
        for chat, field, other in ((old, "migrate_to_chat_id", new),
                                   (new, "migrate_from_chat_id", old)):  # fmt: skip
            u.push("message", {"from": {"id": alice, "is_bot": False, "first_name": "Alice"},
                               "chat": tg.chat(chat), field: other})  # fmt: skip
        await wait_for(lambda: game.statistics().upgrades == 2)
        assert (await get_room(bus, room)).chat == new
        u.user_says(new, bob, "/top", name="Bob", chat_title=TITLE)
        (again,) = await _next(tg, new, 6)

    assert results.splitlines()[1:] == [f"🏆 {TITLE}, round {first.id}", "1. Alice 100%"]
    assert top == f"🏆 {TITLE}, round {first.id} (ended)\n1. Alice 100%"
    assert again == f"🏆 {TITLE}, round {second.id} (in play)\n1. Bob 100%"
    assert requests_to(tg, old) == sent_to_old + 1  # the one send that learnt of the move
    assert (await board.top(bus, board.round_board(room, second.id)))[0].percentage == 100


@pytest.mark.timeout_s(180)
async def test_the_service_plays_on_in_the_supergroup(own_server_url: str, tmp_path: Path) -> None:
    """The same through ``python -m codemojex.run`` as a process of its own, polling the
    stand-in: the upgrade is announced mid-round; a guess in the supergroup lands on the
    round's board beside the one made before, ``/top`` there shows both, the round's results
    go there, and the old id is never sent to again."""
    old, new = group_id(), supergroup_id()
    alice, bob = user_id(), user_id()
    args = ("--url", own_server_url, "--telegram-token", TOKEN, "--demo", "off",
            "--archive", "off", "--summary-every", "0", "--round-length", "600")  # fmt: skip
    async with open_stand_in(TOKEN, None) as tg, open_bus(own_server_url) as bus:
        proc = await start_service(tmp_path, *args, "--telegram-api-url", tg.api_url)
        out = Lines(proc)
        try:
            with trio.fail_after(60):
                await out.until("codemojex is running")
            u = tg.updates
            u.user_says(old, alice, "/newgame", name="Alice", chat_title=TITLE)
            u.user_says(old, alice, "/round", name="Alice", chat_title=TITLE)
            with trio.fail_after(60):
                await started(tg, old)
            room = await room_of_chat(bus, old)
            assert room is not None
            rnd = await current_round(bus, room)
            u.user_says(old, alice, "".join(rnd.secret), name="Alice", chat_title=TITLE)
            with trio.fail_after(60):
                await delivered(tg, 1, alice)
            sent_to_old = requests_to(tg, old)
            tg.migrate(old, new)
            u.user_says(new, bob, worse(rnd, 3), name="Bob", chat_title=TITLE)
            u.user_says(new, bob, "/top", name="Bob", chat_title=TITLE)
            with trio.fail_after(60):
                await delivered(tg, 1, bob)
                top = await _first(tg, new, "🏆")
            await end_now(bus, UPDATES_QUEUE, rnd)
            with trio.fail_after(60):
                results = await _first(tg, new, "Round over")
            assert (await get_room(bus, room)).chat == new
            assert [t.split()[0] for t in shown(tg, new)] == ["🏆", "Round"], (
                shown(tg, new),
                shown(tg, old),
                tg.requests,
            )
        except BaseException:
            await stop_process(proc)
            with trio.move_on_after(5):
                await out.rest()
            print("the service said:", out.text(), "requests:", tg.requests, sep="\n")
            raise
        finally:
            await stop_process(proc)
    heading, *board_lines = top.splitlines()
    assert heading == f"🏆 {TITLE}, round {rnd.id} (in play)"
    assert board_lines[0] == "1. Alice 100%" and board_lines[1].startswith("2. Bob ")
    assert results.splitlines()[1:] == [f"🏆 {TITLE}, round {rnd.id}", *board_lines]
    assert requests_to(tg, old) == sent_to_old
    assert tg.statistics().statuses.get(400, 0) == 0


async def _waiting(bus: Bus, queue: str, chat: int, count: int) -> bool:
    return len(await lanes.jobs(bus, queue, str(chat))) == count


async def _moved(bus: Bus, room: str, new: int) -> bool:
    return await room_of_chat(bus, new) == room and (await get_room(bus, room)).chat == new


async def started(tg: TelegramStandIn, chat: int) -> None:
    """Wait for the four texts a new game's first round sends ``chat`` (the room, the round,
    its reply, its start reminder: the reminder may come first when the round starts at once),
    so that nothing more is on its way there."""
    await delivered(tg, 4, chat)
    kinds = sorted(t.split()[0] for t in shown(tg, chat))
    assert kinds == sorted(["🎮", "🎲", "The", "⏰"]), (shown(tg, chat), tg.requests)


async def _first(tg: TelegramStandIn, chat: int, prefix: str) -> str:
    """The first text delivered to ``chat`` that starts with ``prefix``, once there is one."""
    while not (found := [t for t in shown(tg, chat) if t.startswith(prefix)]):
        await delivered(tg, tg.delivered(chat) + 1, chat)
    return found[0]


async def _next(
    tg: TelegramStandIn, chat: int, count: int, game: ChatGame | None = None
) -> list[str]:
    """The last of the first ``count`` texts delivered to ``chat``, once they are."""
    await delivered(tg, count, chat, game)
    return shown(tg, chat)[count - 1 : count]


async def delivered(
    tg: TelegramStandIn, count: int, chat: int, game: ChatGame | None = None, within_s: float = 45
) -> None:
    """Wait for ``count`` deliveries to ``chat``; after ``within_s``, fail saying what came
    (a step of these tests that hangs names itself and what the game and the stand-in saw)."""
    with trio.move_on_after(within_s):
        await tg.wait_deliveries(count, chat)
        return
    seen = game.statistics() if game is not None else None
    raise AssertionError(
        f"{count} deliveries to {chat} awaited {within_s} s; delivered there: "
        f"{shown(tg, chat)}; the last requests: {list(tg.requests)[-12:]}; game: {seen}"
    )


def _rank(top: str, name: str) -> int:
    for line in top.splitlines()[1:]:
        rank, who, _ = line.split()
        if who == name:
            return int(rank.rstrip("."))
    raise AssertionError(f"{name} is not on the board: {top!r}")
