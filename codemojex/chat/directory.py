"""Which room plays in a Telegram chat, and which player a Telegram user is: two hashes in the
server, the chat links (chat id -> room id: the notify queue's app key ``chat-rooms``, beside
the record of migrated chats, see ``codemojex.notify.migration``) and ``cm:tg-players`` (user
id -> player id).

Each entry is written once (``HSETNX``), after the room or player it names: a failure in
between leaves a room or player nobody points at, never a pointer to nothing. A chat's updates
are handled one at a time (its lane), so two rooms are never opened for one chat; a user who
writes in two chats at once may have two players made, of which the first pointer written wins
(the other is an unused record of about a hundred bytes). Both grow with the chats and people
who play, never with time.

A group upgraded to a supergroup keeps its room (``follow_migration``): its link moves to the
new id together with the record of the move (one script, ``chat_migrate``), and the room's
record names the new chat, so its rounds, board and notices go on there. An update of the old
group handled after the move (its lane is not the new one's) still finds the room: a chat with
no link of its own is looked up under the id it moved to. Players are Telegram users, reached
in their private chats: an upgrade changes nothing for them.

Links written before they lived in the notify queue's slot (the hash ``cm:chat-rooms``) are
moved there by ``upgrade_chat_links``, which ``codemojex.run`` calls once at start.
"""

from __future__ import annotations

from codemojex.chat.meaning import Chat, Sender
from codemojex.game.rooms import Player, create_player, create_room, get_player, move_room
from codemojex.keys import LEGACY_CHAT_ROOMS, PLAYERS_BY_USER
from codemojex.notify.migration import Migration, chat_links_key, migrate_chat, moved_to
from codemojex.notify.notifier import NOTIFY_QUEUE
from codemojex.store import items, pairs, text, text_or_none
from codemojex.telegram import check_chat_id, check_user_id
from echomq_trio import Bus

__all__ = [
    "LEGACY_CHAT_ROOMS_KEY",
    "PLAYERS_BY_USER_KEY",
    "adopt_room",
    "follow_migration",
    "open_room",
    "player_for",
    "room_of_chat",
    "upgrade_chat_links",
]

LEGACY_CHAT_ROOMS_KEY = LEGACY_CHAT_ROOMS  # the chat links as written before (see the docstring)
PLAYERS_BY_USER_KEY = PLAYERS_BY_USER
_SCAN_PAGE = 1_000


async def room_of_chat(bus: Bus, chat: int, *, queue: str = NOTIFY_QUEUE) -> str | None:
    """The id of the room playing in ``chat`` (or in the chat it moved to), or ``None``. One
    read for a chat with a room; a chat without one also looks for a move. ``ValueError`` for
    an id no chat has."""
    check_chat_id(chat)
    links = chat_links_key(bus, queue)
    raw = await bus.command("HGET", links, chat)
    if raw is None:
        moved = await moved_to(bus, chat, queue=queue)
        if moved is not None:
            raw = await bus.command("HGET", links, moved)
    return text_or_none(raw)


async def open_room(bus: Bus, chat: Chat, *, queue: str = NOTIFY_QUEUE) -> tuple[str, bool]:
    """The room of ``chat``, made (titled after the chat) if it has none: ``(room id, made)``."""
    found = await room_of_chat(bus, chat.id, queue=queue)
    if found is not None:
        return found, False
    room = await create_room(bus, chat.id, chat.title)
    if await bus.command("HSETNX", chat_links_key(bus, queue), chat.id, room.id):
        return room.id, True
    winner = await room_of_chat(bus, chat.id, queue=queue)
    assert winner is not None
    return winner, False


async def adopt_room(bus: Bus, chat: int, room_id: str, *, queue: str = NOTIFY_QUEUE) -> bool:
    """Make ``room_id`` (a room made before chats had rooms) the room of ``chat`` if the chat
    has none; ``True`` if it did. ``ValueError`` for an id no chat has."""
    check_chat_id(chat)
    links = chat_links_key(bus, queue)
    return bool(await bus.command("HSETNX", links, chat, room_id))


async def follow_migration(bus: Bus, old: int, new: int, *, queue: str = NOTIFY_QUEUE) -> Migration:
    """The group ``old`` is now the supergroup ``new``: its room's link moves with the record
    of the move (``migrate_chat``, one script), then the room's record names the new chat
    (``rooms.move_room``), so its round notices and digests go there. Idempotent: every signal
    of the upgrade calls it, and one that finds the move made completes what a crash may have
    left undone. ``ValueError`` for ids that are not chat ids or are equal."""
    moved = await migrate_chat(bus, old, new, queue=queue)
    if moved.room is not None:
        await move_room(bus, moved.room, old, moved.new)
    return moved


async def upgrade_chat_links(bus: Bus, *, queue: str = NOTIFY_QUEUE) -> int:
    """Move the links of ``cm:chat-rooms`` (written before they lived beside the migrations)
    into the notify queue's slot; returns how many it moved (0 when there is nothing to move:
    one ``HSCAN``). A link already there is kept. Each batch is written before it is removed
    from the old hash, so a failure midway loses nothing and a second run finishes the move;
    safe to run from several processes at once."""
    links = chat_links_key(bus, queue)
    moved = 0
    cursor = "0"
    while True:
        cursor_raw, flat = items(
            await bus.command("HSCAN", LEGACY_CHAT_ROOMS_KEY, cursor, "COUNT", _SCAN_PAGE)
        )
        found = [(text(chat), text(room)) for chat, room in pairs(flat)]  # HSCAN: field, value
        for chat, room in found:
            await bus.command("HSETNX", links, chat, room)
        if found:
            await bus.command("HDEL", LEGACY_CHAT_ROOMS_KEY, *[chat for chat, _ in found])
            moved += len(found)
        cursor = text(cursor_raw)
        if cursor == "0":
            return moved


async def player_for(bus: Bus, sender: Sender) -> Player:
    """The player of a Telegram user, made on first contact (reachable in the private chat
    whose id is the user's id, as Telegram numbers them). ``ValueError`` for an id no user
    has."""
    check_user_id(sender.id, "a sender's id")
    raw = await bus.command("HGET", PLAYERS_BY_USER_KEY, sender.id)
    if raw is not None:
        return await get_player(bus, text(raw))
    player = await create_player(bus, sender.name, sender.id)
    if await bus.command("HSETNX", PLAYERS_BY_USER_KEY, sender.id, player.id):
        return player
    winner = await bus.command("HGET", PLAYERS_BY_USER_KEY, sender.id)
    return await get_player(bus, text(winner))
