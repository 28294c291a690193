"""Rooms listed a page at a time on a real server: every room exactly once and in order across
pages (rooms created while paging included), a page's cost independent of how many rooms exist,
and rooms written by the old code (the set ``cm:rooms``) moved into the index."""

from typing import cast

import pytest

from codemojex import game, ids
from codemojex.game.rooms import MAX_ROOM_PAGE, room_key
from echomq_trio import Bus
from echomq_trio.testing import FaultyTransport
from echomq_trio.wire import Wire

INDEX = "cm:room-index"
LEGACY = "cm:rooms"


async def _empty(bus: Bus) -> None:
    await bus.transport.command("DEL", INDEX, LEGACY)


async def _create(bus: Bus, n: int, label: str) -> list[game.Room]:
    return [await game.create_room(bus, -2_000_000 - i, f"{label} {i}") for i in range(n)]


async def _legacy_room(bus: Bus, chat: int, title: str) -> game.Room:
    """A room as the code before the index wrote it: its record and a member of ``cm:rooms``."""
    room = game.Room(ids.new(ids.ROOM), chat, title)
    await bus.transport.command(
        "HSET", room_key(room.id, "room"), "chat", str(chat), "title", title
    )
    await bus.transport.command("SADD", LEGACY, room.id)
    return room


async def _walk(bus: Bus, count: int) -> list[game.Room]:
    seen: list[game.Room] = []
    page = await game.room_page(bus, count=count)
    seen.extend(page.rooms)
    while page.next is not None:
        page = await game.room_page(bus, page.next, count)
        seen.extend(page.rooms)
    return seen


@pytest.mark.cluster  # slot routing: see tests/conftest.py
async def test_pages_list_every_room_once_in_order_with_rooms_created_between_pages(
    bus: Bus,
) -> None:
    await _empty(bus)
    created = await _create(bus, 23, "Before")
    seen: list[game.Room] = []
    pages = 0
    page = await game.room_page(bus, count=5)
    while True:
        pages += 1
        assert len(page.rooms) <= 5
        seen.extend(page.rooms)
        if page.next is None:
            break
        assert page.next == page.rooms[-1].id
        created += await _create(bus, 2, f"During {pages}")  # between two page requests
        page = await game.room_page(bus, page.next, 5)
    ids_seen = [r.id for r in seen]
    assert len(ids_seen) == len(set(ids_seen))  # none twice
    assert seen == sorted(created, key=lambda r: r.id)  # every room, in id (mint) order
    assert pages > 5  # the rooms created while paging made the walk longer
    assert [r.title for r in seen[:2]] == ["Before 0", "Before 1"]


async def test_the_last_page_says_there_is_no_next_one(bus: Bus) -> None:
    await _empty(bus)
    assert await game.room_page(bus) == game.RoomPage((), None)
    rooms = await _create(bus, 4, "Room")
    assert await game.room_page(bus, count=4) == game.RoomPage(tuple(rooms), None)
    first = await game.room_page(bus, count=3)
    assert first == game.RoomPage(tuple(rooms[:3]), rooms[2].id)
    assert await game.room_page(bus, first.next, 3) == game.RoomPage((rooms[3],), None)
    assert await game.room_page(bus, rooms[3].id) == game.RoomPage((), None)


async def test_a_page_makes_the_same_reads_however_many_rooms_exist(bus: Bus) -> None:
    await _empty(bus)
    await _create(bus, 8, "Room")

    async def reads_of_first_page() -> tuple[game.RoomPage, list[str]]:
        counting = FaultyTransport(bus.transport)
        page = await game.room_page(Bus(cast(Wire, counting)), count=5)
        return page, [call.name for call in counting.calls]

    few, calls_few = await reads_of_first_page()
    await bus.transport.command(
        "ZADD", INDEX, *[a for _ in range(5_000) for a in ("0", ids.new(ids.ROOM))]
    )  # many more rooms (ids minted later, so after the first page)
    many, calls_many = await reads_of_first_page()
    assert few == many and len(few.rooms) == 5
    assert calls_few == calls_many == ["ZRANGE"] + ["HMGET"] * 5


async def test_an_id_without_a_record_is_skipped(bus: Bus) -> None:
    await _empty(bus)
    first, second = await _create(bus, 2, "Room")
    ghost = ids.new(ids.ROOM)
    await bus.transport.command("ZADD", INDEX, "0", ghost)
    assert await game.room_page(bus, count=3) == game.RoomPage((first, second), None)
    assert await game.room_page(bus, count=2) == game.RoomPage((first, second), second.id)
    assert await game.room_page(bus, second.id, 1) == game.RoomPage((), None)


async def test_bad_cursors_and_counts_are_refused(bus: Bus) -> None:
    for after in ("", "nope", ids.new(ids.ROUND), "RMM" + "!" * 11):
        with pytest.raises(game.GameError, match=r"^after must be a room id"):
            await game.room_page(bus, after)
    for count in (0, -1, MAX_ROOM_PAGE + 1, True, 2.0):
        with pytest.raises(game.GameError, match=f"^count must be an integer 1-{MAX_ROOM_PAGE}"):
            await game.room_page(bus, None, count)  # type: ignore[arg-type]
    assert len((await game.room_page(bus, None, MAX_ROOM_PAGE)).rooms) <= MAX_ROOM_PAGE


async def test_rooms_of_the_old_set_move_into_the_index_once(bus: Bus) -> None:
    await _empty(bus)
    new = await _create(bus, 2, "New")
    old = [await _legacy_room(bus, -3_000_000 - i, f"Old {i}") for i in range(3)]
    # A move that stopped midway: one old room is already in the index, still in the old set.
    await bus.transport.command("ZADD", INDEX, "0", old[0].id)
    assert await game.migrate_room_index(bus) == 3
    assert await bus.transport.command("EXISTS", LEGACY) == 0
    assert await _walk(bus, 2) == sorted(new + old, key=lambda r: r.id)
    assert await game.migrate_room_index(bus) == 0  # nothing left to move
    assert await game.list_room_ids(bus) == sorted(r.id for r in new + old)


async def test_a_large_old_set_moves_in_batches_and_every_id_is_walked(bus: Bus) -> None:
    await _empty(bus)
    many = sorted(ids.new(ids.ROOM) for _ in range(2_500))  # more than one batch of 1,000
    await bus.transport.command("SADD", LEGACY, *many)
    assert await game.migrate_room_index(bus) == len(many)
    assert await bus.transport.command("EXISTS", LEGACY) == 0
    assert await bus.transport.command("ZCARD", INDEX) == len(many)
    assert await game.list_room_ids(bus) == many
