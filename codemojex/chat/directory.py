"""Which room plays in a Telegram chat, and which player a Telegram user is: two hashes in the
server, ``cm:chat-rooms`` (chat id -> room id) and ``cm:tg-players`` (user id -> player id).

Each entry is written once (``HSETNX``), after the room or player it names: a failure in
between leaves a room or player nobody points at, never a pointer to nothing. A chat's updates
are handled one at a time (its lane), so two rooms are never opened for one chat; a user who
writes in two chats at once may have two players made, of which the first pointer written wins
(the other is an unused record of about a hundred bytes). Both grow with the chats and people
who play, never with time.
"""

from __future__ import annotations

from codemojex.chat.meaning import Chat, Sender
from codemojex.game.rooms import Player, create_player, create_room, get_player
from echomq_trio import Bus
from echomq_trio.protocol import as_text

__all__ = [
    "CHAT_ROOMS_KEY",
    "PLAYERS_BY_USER_KEY",
    "adopt_room",
    "open_room",
    "player_for",
    "room_of_chat",
]

CHAT_ROOMS_KEY = "cm:chat-rooms"
PLAYERS_BY_USER_KEY = "cm:tg-players"


async def room_of_chat(bus: Bus, chat: int) -> str | None:
    """The id of the room playing in ``chat``, or ``None``."""
    raw = await bus.wire.command("HGET", CHAT_ROOMS_KEY, str(chat))
    return None if raw is None else as_text(raw)


async def open_room(bus: Bus, chat: Chat) -> tuple[str, bool]:
    """The room of ``chat``, made (titled after the chat) if it has none: ``(room id, made)``."""
    found = await room_of_chat(bus, chat.id)
    if found is not None:
        return found, False
    room = await create_room(bus, chat.id, chat.title)
    if await bus.wire.command("HSETNX", CHAT_ROOMS_KEY, str(chat.id), room.id):
        return room.id, True
    winner = await room_of_chat(bus, chat.id)
    assert winner is not None
    return winner, False


async def adopt_room(bus: Bus, chat: int, room_id: str) -> bool:
    """Make ``room_id`` (a room made before chats had rooms) the room of ``chat`` if the chat
    has none; ``True`` if it did."""
    return bool(await bus.wire.command("HSETNX", CHAT_ROOMS_KEY, str(chat), room_id))


async def player_for(bus: Bus, sender: Sender) -> Player:
    """The player of a Telegram user, made on first contact (reachable in the private chat
    whose id is the user's id, as Telegram numbers them)."""
    raw = await bus.wire.command("HGET", PLAYERS_BY_USER_KEY, str(sender.id))
    if raw is not None:
        return await get_player(bus, as_text(raw))
    player = await create_player(bus, sender.name, sender.id)
    if await bus.wire.command("HSETNX", PLAYERS_BY_USER_KEY, str(sender.id), player.id):
        return player
    winner = await bus.wire.command("HGET", PLAYERS_BY_USER_KEY, str(sender.id))
    return await get_player(bus, as_text(winner))
