"""Rooms (``RMM``: the chat where a game runs) and players (``USR``: reachable in a private
chat), kept in the server. A room's keys carry its id as hash tag (``cm:{<room>}:...``,
``room_key``), so a room's state, rounds and board share one cluster slot; the set of rooms and
the players live in ``cm:rooms`` and ``cm:players``. Names and titles are checked against
``rules.MAX_NAME`` and ``rules.MAX_TITLE`` (``GameError`` otherwise).

Rooms and players have no lifetime: there is one room per chat that plays and one player per
person, so they grow with the people who play, never with time (a room is its record, one
member of ``cm:rooms`` and at most one open round; a player is one field of ``cm:players``, about
a hundred bytes). What grows with time, rounds and boards, expires (see ``rounds`` and
``board``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs

from codemojex import ids
from codemojex.game.rules import MAX_NAME, MAX_TITLE, GameError, check_label
from codemojex.notify.notice import check_notice
from echomq_trio import Bus
from echomq_trio.protocol import as_text

__all__ = [
    "Player",
    "Room",
    "create_player",
    "create_room",
    "get_player",
    "get_room",
    "list_room_ids",
    "list_rooms",
    "player_names",
    "room_key",
    "round_key",
]

ROOMS_KEY = "cm:rooms"
PLAYERS_KEY = "cm:players"


@attrs.frozen
class Room:
    id: str
    chat: int
    title: str


@attrs.frozen
class Player:
    id: str
    name: str
    chat: int


def room_key(room: str, suffix: str) -> str:
    """The key ``cm:{<room>}:<suffix>``: the room's hash tag keeps its keys in one slot."""
    return f"cm:{{{room}}}:{suffix}"


def round_key(room: str, round_id: str) -> str:
    """``cm:{<room>}:round:<id>``: a round's state, written only by the round scripts (and
    read by ``board_record``, which checks the round is open). ``ValueError`` for ids that are
    not a room's and a round's."""
    if not ids.is_valid(room, ids.ROOM):
        raise ValueError(f"room must be an RMM id, got {room!r}")
    if not ids.is_valid(round_id, ids.ROUND):
        raise ValueError(f"round must be an RND id, got {round_id!r}")
    return room_key(room, f"round:{round_id}")


async def create_room(bus: Bus, chat: int, title: str) -> Room:
    """A room for a Telegram chat (usually a group: a negative id). The title is 1-``MAX_TITLE``
    characters without control characters or newlines (``GameError`` otherwise)."""
    title = check_label("room title", title, MAX_TITLE)
    check_notice(chat, title, None)
    room = Room(ids.new(ids.ROOM), chat, title)
    await bus.wire.command("HSET", room_key(room.id, "room"), "chat", str(chat), "title", title)
    await bus.wire.command("SADD", ROOMS_KEY, room.id)
    return room


async def get_room(bus: Bus, room_id: str) -> Room:
    if not ids.is_valid(room_id, ids.ROOM):
        raise GameError(f"not a room id: {room_id!r}")
    chat, title = await bus.wire.command("HMGET", room_key(room_id, "room"), "chat", "title")
    if chat is None:
        raise GameError(f"no room {room_id}")
    return Room(room_id, int(chat), as_text(title))


async def list_room_ids(bus: Bus) -> list[str]:
    members = await bus.wire.command("SMEMBERS", ROOMS_KEY)
    return sorted(as_text(m) for m in members or [])


async def list_rooms(bus: Bus) -> list[Room]:
    return [await get_room(bus, room_id) for room_id in await list_room_ids(bus)]


async def create_player(bus: Bus, name: str, chat: int) -> Player:
    """A player, reachable in the private chat ``chat``. The name is 1-``MAX_NAME`` characters
    without control characters or newlines (``GameError`` otherwise)."""
    name = check_label("player name", name, MAX_NAME)
    check_notice(chat, name, None)
    player = Player(ids.new(ids.USER), name, chat)
    await bus.wire.command("HSET", PLAYERS_KEY, player.id,
                           json.dumps({"name": player.name, "chat": chat}))  # fmt: skip
    return player


async def get_player(bus: Bus, player_id: str) -> Player:
    if not ids.is_valid(player_id, ids.USER):
        raise GameError(f"not a player id: {player_id!r}")
    raw = await bus.wire.command("HGET", PLAYERS_KEY, player_id)
    if raw is None:
        raise GameError(f"no player {player_id}")
    data = json.loads(raw)
    return Player(player_id, data["name"], int(data["chat"]))


async def player_names(bus: Bus, player_ids: Sequence[str]) -> dict[str, str]:
    if not player_ids:
        return {}
    raw = await bus.wire.command("HMGET", PLAYERS_KEY, *player_ids)
    return {
        p: (json.loads(r)["name"] if r is not None else p)
        for p, r in zip(player_ids, raw, strict=True)
    }
