"""Rooms (``RMM``: the chat where a game runs) and players (``USR``: reachable in a private
chat), kept in the server. A room's keys carry its id as hash tag (``cm:{<room>}:...``,
``room_key``), so a room's state, rounds and board share one cluster slot; the index of rooms
and the players live in ``cm:room-index`` and ``cm:players`` (every key: ``codemojex.keys``).
Names and titles are checked against ``rules.MAX_NAME`` and ``rules.MAX_TITLE`` (``GameError``
otherwise).

Listing: the index is a sorted set of room ids, every score 0, so it is ordered by id, which is
mint order (ids are time-ordered). ``room_page`` reads the ids after a cursor (the last id of the
page before) with one ``ZRANGE ... BYLEX LIMIT`` and the rooms' records with one concurrent wave
of ``HMGET`` (pipelined on the client's connection): two round trips and O(log rooms + page) on
the server, however many rooms exist. Every room appears exactly once, and a room created while
someone pages has a later id, so it appears on a later page (ids come from the host's clock: one
minted on a host whose clock is behind may sort before a cursor already passed). The index holds
only ids: a room's chat and title are in its record alone. The two cannot be written by one
script (the index has no room's hash tag, so on a cluster it lives in another slot), so
``create_room`` writes the record first and the index second: a failure between them leaves a
room that works but is not listed, never a listed room without a record (a page skips such an
id anyway).

Data written before the index (the set ``cm:rooms``) is moved into it by ``migrate_room_index``,
which ``codemojex.run`` calls once at start: idempotent, safe to run from several processes at
once, and a room a process of the old code adds to the old set later moves at the next start.

Rooms and players have no lifetime: there is one room per chat that plays and one player per
person, so they grow with the people who play, never with time (a room is its record, one
member of the index and at most one open round; a player is one field of ``cm:players``, about
a hundred bytes). What grows with time, rounds and boards, expires (see ``rounds`` and
``board``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs
import trio

from codemojex import ids
from codemojex.game.rules import MAX_NAME, MAX_TITLE, GameError, check_label
from codemojex.keys import LEGACY_ROOMS, PLAYERS, ROOM_INDEX, room_key, room_keys
from codemojex.store import items, text, text_or_none
from codemojex.telegram import check_chat_id, check_user_id
from echomq_trio import Bus, BusError

__all__ = [
    "DEFAULT_ROOM_PAGE",
    "MAX_ROOM_PAGE",
    "Player",
    "Room",
    "RoomPage",
    "create_player",
    "create_room",
    "get_player",
    "get_room",
    "list_room_ids",
    "migrate_room_index",
    "move_room",
    "player_names",
    "room_key",
    "room_page",
    "round_key",
]

ROOM_INDEX_KEY = ROOM_INDEX  # sorted set: every room's id, score 0 (ordered by id)
LEGACY_ROOMS_KEY = LEGACY_ROOMS  # set: every room's id, as written before the index
PLAYERS_KEY = PLAYERS
DEFAULT_ROOM_PAGE = 50  # rooms on a page when the caller names no count
MAX_ROOM_PAGE = 200
_WALK_PAGE = 1_000  # ids per call when a caller needs every room (the daily digest)


@attrs.frozen
class Room:
    id: str
    chat: int
    title: str


@attrs.frozen
class RoomPage:
    """Rooms in id (mint) order, and the cursor for the page after them (``None``: no more)."""

    rooms: tuple[Room, ...]
    next: str | None


@attrs.frozen
class Player:
    id: str
    name: str
    chat: int


def round_key(room: str, round_id: str) -> str:
    """``cm:{<room>}:round:<id>``: a round's state, written only by the round scripts (and
    read by ``board_record``, which checks the round is open). ``ValueError`` for ids that are
    not a room's and a round's."""
    return room_keys(room).round(round_id)


def _record(fields: object) -> tuple[int, str] | None:
    """A room record's ``HMGET chat title`` as (chat, title), or ``None`` for no record."""
    chat, title = items(fields)
    return None if chat is None else (int(text(chat)), text(title))


async def create_room(bus: Bus, chat: int, title: str) -> Room:
    """A room for a Telegram chat (usually a group: a negative id; ``ValueError`` for an id no
    chat has). The title is 1-``MAX_TITLE`` characters without control characters or newlines
    (``GameError`` otherwise)."""
    title = check_label("room title", title, MAX_TITLE)
    check_chat_id(chat, "a room's chat")
    room = Room(ids.new(ids.ROOM), chat, title)
    # The record first: a failure in between leaves a working room that is not listed (see the
    # module's docstring).
    await bus.command("HSET", room_keys(room.id).room, "chat", chat, "title", title)
    await bus.command("ZADD", ROOM_INDEX_KEY, 0, room.id)
    return room


async def get_room(bus: Bus, room_id: str) -> Room:
    if not ids.is_valid(room_id, ids.ROOM):
        raise GameError(f"not a room id: {room_id!r}")
    record = _record(await bus.command("HMGET", room_keys(room_id).room, "chat", "title"))
    if record is None:
        raise GameError(f"no room {room_id}")
    return Room(room_id, *record)


async def move_room(bus: Bus, room_id: str, old: int, new: int) -> bool:
    """The room's chat was upgraded from ``old`` to ``new`` (Telegram gave it a new id): its
    record names ``new`` from now on, so its notices go there. ``True`` if this call changed
    it; a record that names another chat, or no record, is left alone. Every caller writes the
    same id for the same move, so reading and then writing needs no script."""
    if not ids.is_valid(room_id, ids.ROOM):
        raise GameError(f"not a room id: {room_id!r}")
    key = room_keys(room_id).room
    chat = text_or_none(await bus.command("HGET", key, "chat"))
    if chat != str(old):
        return False
    await bus.command("HSET", key, "chat", new)
    return True


def _check_cursor(after: str | None) -> None:
    if after is not None and not ids.is_valid(after, ids.ROOM):
        raise GameError(f"after must be a room id (RMM...), got {after!r}")


async def _ids_after(bus: Bus, after: str | None, count: int) -> list[str]:
    start = "-" if after is None else f"({after}"
    raw = await bus.command("ZRANGE", ROOM_INDEX_KEY, start, "+", "BYLEX", "LIMIT", 0, count)
    return [text(m) for m in items(raw)]


async def room_page(bus: Bus, after: str | None = None, count: int = DEFAULT_ROOM_PAGE) -> RoomPage:
    """Up to ``count`` (1-``MAX_ROOM_PAGE``) rooms whose ids come after ``after`` (``None``: from
    the first), in id order, and the cursor for the next page: two round trips, whatever the
    number of rooms. ``GameError`` for a cursor that is not a room id or a count out of range.

    An id in the index whose record is missing is skipped, so a page may hold fewer than
    ``count`` rooms while ``next`` is not ``None``. ``BusError`` when the server cannot be read
    (the first of the reads that failed)."""
    _check_cursor(after)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_ROOM_PAGE:
        raise GameError(f"count must be an integer 1-{MAX_ROOM_PAGE}, got {count!r}")
    room_ids = await _ids_after(bus, after, count + 1)  # one more: is there a next page?
    shown = room_ids[:count]
    found: list[Room | None] = [None] * len(shown)
    errors: list[BusError] = []

    async def read(i: int, room_id: str) -> None:
        if not ids.is_valid(room_id, ids.ROOM):
            return  # not a room's id: no record of its own, skipped as a missing one
        try:
            record = _record(await bus.command("HMGET", room_keys(room_id).room, "chat", "title"))
        except BusError as exc:
            errors.append(exc)
            return
        if record is not None:
            found[i] = Room(room_id, *record)

    async with trio.open_nursery() as nursery:  # the reads go out together: one round trip
        for i, room_id in enumerate(shown):
            nursery.start_soon(read, i, room_id)
    if errors:
        raise errors[0]
    rooms = tuple(room for room in found if room is not None)
    return RoomPage(rooms, shown[-1] if len(room_ids) > count else None)


async def list_room_ids(bus: Bus) -> list[str]:
    """Every room's id, in id order, read ``_WALK_PAGE`` at a time (no one call holds the
    server for long). O(rooms): only for work that visits every room anyway (the daily
    digest), never for a periodic or per-request path; those use ``room_page``."""
    found: list[str] = []
    while page := await _ids_after(bus, found[-1] if found else None, _WALK_PAGE):
        found.extend(page)
        if len(page) < _WALK_PAGE:
            break
    return found


async def migrate_room_index(bus: Bus) -> int:
    """Move the rooms of the set ``cm:rooms`` (written before the index) into the index; returns
    how many ids it moved (0 when there is nothing to move: one ``SSCAN``).

    Each batch is added to the index before it is removed from the old set, so a failure
    midway loses nothing and a second run finishes the move; the old set is gone (empty) when
    it is done. Safe to run from several processes at once."""
    moved = 0
    cursor = "0"
    while True:
        cursor_raw, members = items(
            await bus.command("SSCAN", LEGACY_ROOMS_KEY, cursor, "COUNT", _WALK_PAGE)
        )
        batch = [text(m) for m in items(members)]
        if batch:
            await bus.command("ZADD", ROOM_INDEX_KEY, *[a for m in batch for a in ("0", m)])
            await bus.command("SREM", LEGACY_ROOMS_KEY, *batch)
            moved += len(batch)
        cursor = text(cursor_raw)
        if cursor == "0":
            return moved


async def create_player(bus: Bus, name: str, chat: int) -> Player:
    """A player, reachable in the private chat ``chat`` (the user's id; ``ValueError`` for an
    id no user has). The name is 1-``MAX_NAME`` characters without control characters or
    newlines (``GameError`` otherwise)."""
    name = check_label("player name", name, MAX_NAME)
    check_user_id(chat, "a player's chat")
    player = Player(ids.new(ids.USER), name, chat)
    await bus.command("HSET", PLAYERS_KEY, player.id,
                      json.dumps({"name": player.name, "chat": chat}))  # fmt: skip
    return player


async def get_player(bus: Bus, player_id: str) -> Player:
    if not ids.is_valid(player_id, ids.USER):
        raise GameError(f"not a player id: {player_id!r}")
    raw = text_or_none(await bus.command("HGET", PLAYERS_KEY, player_id))
    if raw is None:
        raise GameError(f"no player {player_id}")
    data = json.loads(raw)
    return Player(player_id, data["name"], int(data["chat"]))


async def player_names(bus: Bus, player_ids: Sequence[str]) -> dict[str, str]:
    if not player_ids:
        return {}
    raw = items(await bus.command("HMGET", PLAYERS_KEY, *player_ids))
    return {
        p: (json.loads(text(r))["name"] if r is not None else p)
        for p, r in zip(player_ids, raw, strict=True)
    }
