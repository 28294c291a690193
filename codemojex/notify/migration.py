"""Chats that Telegram moved: a basic group upgraded to a supergroup gets a new id for good, and
the old id answers every send with 400 "group chat was upgraded to a supergroup chat" and
``parameters.migrate_to_chat_id``.

One record of it, in the notify queue's slot: the app key ``migrated`` (old chat id -> new chat
id), which the notification worker reads before every send, so a notice to the old id goes to
the new one. Beside it, in the same slot, the app key ``chat-rooms`` (chat id -> the id of the
room that plays there: ``codemojex.chat.directory`` reads and writes it), so that recording a
move and carrying the chat's room to the new id are one script (``chat_migrate``), whichever
signal comes first: the service message in the old group (``migrate_to_chat_id``), the one in
the new supergroup (``migrate_from_chat_id``), or the 400 of a send to the old id. The script
is idempotent, so every signal calls it and the later ones change nothing.

Both hashes grow with the group chats that play (one field each), never with time.
"""

from __future__ import annotations

import attrs

from codemojex.keys import queue_app_keys
from codemojex.notify.notifier import NOTIFY_QUEUE
from codemojex.store import script, text
from codemojex.telegram import check_chat_id
from echomq_trio import Bus

__all__ = [
    "Migration",
    "chat_links_key",
    "current_chat",
    "migrate_chat",
    "migrations_key",
    "moved_to",
]


@attrs.frozen
class Migration:
    """What ``migrate_chat`` found: whether this call recorded the move (``first``), the new id
    recorded for the old one (the one asked, unless another was recorded before), and the room
    linked to that id now (``None``: the chat plays no game)."""

    first: bool
    new: int
    room: str | None


def migrations_key(bus: Bus, queue: str = NOTIFY_QUEUE) -> str:
    """The hash old chat id -> new chat id (the queue's app key ``migrated``)."""
    return queue_app_keys(queue).migrations


def chat_links_key(bus: Bus, queue: str = NOTIFY_QUEUE) -> str:
    """The hash chat id -> room id (the queue's app key ``chat-rooms``), kept in the same slot
    as the migrations so that one script moves a link with the record."""
    return queue_app_keys(queue).chat_links


async def migrate_chat(bus: Bus, old: int, new: int, *, queue: str = NOTIFY_QUEUE) -> Migration:
    """Record that chat ``old`` is now ``new`` and carry its room's link along, in one script
    (see the module's docstring); safe to call for every signal of the same upgrade.
    ``ValueError`` for ids that are not chat ids or are equal."""
    check_chat_id(old, "old")
    check_chat_id(new, "new")
    if old == new:
        raise ValueError(f"a chat migrates to another id, got {old} twice")
    k = queue_app_keys(queue)
    got = await _MIGRATE.run(bus, [k.migrations, k.chat_links], [str(old), str(new)])
    return Migration(got["outcome"] == "recorded", int(got["new"]), got["room"] or None)


async def current_chat(bus: Bus, chat: int, *, queue: str = NOTIFY_QUEUE) -> int:
    """The id ``chat`` has now: its new id once it was recorded as moved, else itself (one
    ``HGET``; what the notification worker reads before every send)."""
    moved = await moved_to(bus, chat, queue=queue)
    return chat if moved is None else moved


async def moved_to(bus: Bus, chat: int, *, queue: str = NOTIFY_QUEUE) -> int | None:
    """The new id recorded for ``chat``, or ``None`` when it never moved (one ``HGET``)."""
    moved = await bus.command("HGET", migrations_key(bus, queue), str(chat))
    return None if moved is None else int(text(moved))


_MIGRATE = script("chat_migrate")
