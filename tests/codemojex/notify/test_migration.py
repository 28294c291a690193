"""A chat's move to a supergroup on a real server (and the cluster): one script records it and
carries the chat's room along, once, whichever of its signals comes first and however many
come; the game follows it (the room's record, lookups of the old id); the notification worker
calls the same script when a send is answered with the move; links written before they lived
in the notify queue's slot are moved there."""

from __future__ import annotations

import random

import pytest
import trio

from codemojex import game
from codemojex.chat.directory import (
    LEGACY_CHAT_ROOMS_KEY,
    adopt_room,
    follow_migration,
    room_of_chat,
    upgrade_chat_links,
)
from codemojex.notify.migration import (
    Migration,
    chat_links_key,
    current_chat,
    migrate_chat,
    migrations_key,
)
from codemojex.notify.notifier import notify
from codemojex.standin import Scripted, open_stand_in
from echomq_trio import Bus
from tests.codemojex.notify.test_pipeline import TOKEN, in_process_worker


def chats() -> tuple[int, int]:
    """A basic group's id and the id of the supergroup it becomes, both unused elsewhere."""
    old = -random.randrange(10**9, 10**12)
    return old, -1_000_000_000_000 - random.randrange(1, 10**9)


@pytest.mark.cluster  # slot routing: see tests/conftest.py
async def test_the_move_is_recorded_once_and_carries_the_room(bus: Bus, queue: str) -> None:
    old, new = chats()
    assert await adopt_room(bus, old, "RMM0000000room", queue=queue)
    assert await migrate_chat(bus, old, new, queue=queue) == Migration(True, new, "RMM0000000room")
    again = Migration(False, new, "RMM0000000room")
    assert await migrate_chat(bus, old, new, queue=queue) == again
    assert await migrate_chat(bus, old, new - 1, queue=queue) == again  # upgraded once
    links = await bus.transport.command("HGETALL", chat_links_key(bus, queue))
    assert {str(new), str(old)} & {k.decode() for k in _fields(links)} == {str(new)}
    assert await current_chat(bus, old, queue=queue) == new
    assert await current_chat(bus, new, queue=queue) == new
    for chat in (old, new):  # an update of the old group handled late still finds the room
        assert await room_of_chat(bus, chat, queue=queue) == "RMM0000000room"


async def test_a_chat_that_plays_no_game_has_its_move_recorded(bus: Bus, queue: str) -> None:
    old, new = chats()
    assert await migrate_chat(bus, old, new, queue=queue) == Migration(True, new, None)
    assert (
        await bus.transport.command("HGET", migrations_key(bus, queue), str(old))
        == str(new).encode()
    )
    assert await room_of_chat(bus, new, queue=queue) is None


async def test_a_supergroup_played_in_before_the_move_keeps_its_own_room(
    bus: Bus, queue: str
) -> None:
    old, new = chats()
    await adopt_room(bus, old, "RMM00000000old", queue=queue)
    await adopt_room(bus, new, "RMM00000000new", queue=queue)
    assert await migrate_chat(bus, old, new, queue=queue) == Migration(True, new, "RMM00000000new")
    assert await room_of_chat(bus, old, queue=queue) == "RMM00000000old"  # its link stays


async def test_every_signal_at_once_moves_it_once(bus: Bus, queue: str) -> None:
    old, new = chats()
    await adopt_room(bus, old, "RMM0000000room", queue=queue)
    found: list[Migration] = []

    async def signal() -> None:
        found.append(await migrate_chat(bus, old, new, queue=queue))

    async with trio.open_nursery() as nursery:
        for _ in range(12):
            nursery.start_soon(signal)
    assert sorted(m.first for m in found) == [False] * 11 + [True]
    assert {(m.new, m.room) for m in found} == {(new, "RMM0000000room")}


@pytest.mark.parametrize(
    ("old", "new"),
    [(0, -1001), (-5, -5), (True, -1001), (-5, "-1001"), (-5.0, -1001), (-5, -1_000_000_000_000),
     (-5, -(2**52)), (1 << 40, -1001)],
)  # fmt: skip
async def test_ids_that_are_no_move_are_refused(bus: Bus, old: object, new: object) -> None:
    with pytest.raises(ValueError, match="chat"):
        await migrate_chat(bus, old, new)  # type: ignore[arg-type]


@pytest.mark.parametrize("chat", [0, 1 << 40, -1_000_000_000_000, True])
async def test_the_directory_refuses_an_id_no_chat_has(bus: Bus, queue: str, chat: int) -> None:
    with pytest.raises(ValueError, match="must be a Telegram chat id"):
        await room_of_chat(bus, chat, queue=queue)
    with pytest.raises(ValueError, match="must be a Telegram chat id"):
        await adopt_room(bus, chat, "RMM0000000room", queue=queue)
    assert await bus.transport.command("HLEN", chat_links_key(bus, queue)) == 0


async def test_the_game_follows_the_move_and_completes_one_cut_short(bus: Bus, queue: str) -> None:
    old, new = chats()
    room = await game.create_room(bus, old, "Fans")
    await adopt_room(bus, old, room.id, queue=queue)
    await migrate_chat(bus, old, new, queue=queue)  # a process died before the room's record
    assert (await game.get_room(bus, room.id)).chat == old
    assert await follow_migration(bus, old, new, queue=queue) == Migration(False, new, room.id)
    assert (await game.get_room(bus, room.id)).chat == new
    assert await follow_migration(bus, old, new, queue=queue) == Migration(False, new, room.id)
    assert not await game.move_room(bus, room.id, old, new)  # names the new chat already
    assert (await game.get_room(bus, room.id)).chat == new


@pytest.mark.cluster  # slot routing: see tests/conftest.py
async def test_links_kept_before_move_beside_the_record(bus: Bus, queue: str) -> None:
    (a, _), (b, _) = chats(), chats()
    await bus.transport.command("HSET", LEGACY_CHAT_ROOMS_KEY, str(a), "RMM00000000aaa",
                           str(b), "RMM00000000bbb")  # fmt: skip
    await adopt_room(bus, b, "RMM0000000kept", queue=queue)
    assert await upgrade_chat_links(bus, queue=queue) >= 2  # and any other test's
    assert await bus.transport.command("EXISTS", LEGACY_CHAT_ROOMS_KEY) == 0
    assert await room_of_chat(bus, a, queue=queue) == "RMM00000000aaa"
    assert await room_of_chat(bus, b, queue=queue) == "RMM0000000kept"  # a link there wins
    assert await upgrade_chat_links(bus, queue=queue) == 0


@pytest.mark.slow
@pytest.mark.timeout_s(60)
async def test_a_send_answered_with_the_move_carries_the_room_along(bus: Bus, queue: str) -> None:
    old, new = chats()
    await adopt_room(bus, old, "RMM0000000room", queue=queue)
    async with open_stand_in(TOKEN, None) as tg:
        tg.script(old, Scripted.migrate(new))
        await notify(bus, old, "one", queue=queue)
        await notify(bus, old, "two", queue=queue)
        async with in_process_worker(bus, queue, tg) as worker:
            await tg.wait_deliveries(2, new)
    assert worker.statistics().migrated == 1
    assert [r.chat_id for r in tg.requests] == [old, new, new]  # the old id tried once
    assert await room_of_chat(bus, new, queue=queue) == "RMM0000000room"
    assert await current_chat(bus, old, queue=queue) == new


def _fields(flat: object) -> list[bytes]:
    if isinstance(flat, dict):
        return list(flat)
    assert isinstance(flat, list)
    return flat[::2]
