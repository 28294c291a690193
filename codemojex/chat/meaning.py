"""What a Telegram update means to the game (pure): a command, a guess, or nothing, decided by
rule so that nothing is ignored by accident.

The rules, in order:

* only a new ``message`` counts: an ``edited_message`` (a guess cannot be changed after it
  was scored), a channel post or any other kind is ignored;
* the service messages of a group's upgrade to a supergroup mean ``Upgraded(old, new)``,
  whoever sent them: ``migrate_to_chat_id`` in the old group, ``migrate_from_chat_id`` in the
  new supergroup (Telegram sends both; the game acts on the first it handles);
* a message with no sender, or from a bot (another bot, or this one), is ignored;
* a message without text (a sticker, a photo, a voice note, a service message such as a member
  joining) is ignored;
* in a private chat every text gets the help (the game is played in groups; a private chat is
  where a player's scores arrive once they have pressed Start);
* in a group, ``/name`` or ``/name@bot`` as the first word is a command when ``name`` is one
  of ``COMMANDS`` and ``bot`` is this bot (a command for another bot is ignored; so is an
  unknown command: a group may have other bots);
* in a group, a text of six emoji and nothing else (white space between them allowed) is a
  guess; whether it is a valid one (the game's emojis, each once), and whether a round is in
  play, the game decides. Emoji-only texts of another length (a 👍, a 😂😂😂) are conversation,
  so nobody is told off for reacting;
* any other text is conversation, ignored.

A message in a forum topic (``is_topic_message``, with its ``message_thread_id``) names that
thread in its ``Chat``, so the answer goes there; any other message (the General topic, a
group without topics) names none.

Names from Telegram (a user's display name, a group's title) are cleaned for the game's input
rules (``codemojex.game.rules.clean_label``) here, so no outside text reaches a message
unchecked.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

import attrs

from codemojex.game.rules import MAX_NAME, MAX_TITLE, clean_label
from codemojex.game.scoring import SIZE

__all__ = [
    "COMMANDS",
    "Chat",
    "Command",
    "Guess",
    "Ignored",
    "Meaning",
    "Sender",
    "Upgraded",
    "chat_of",
    "meaning",
    "update_id_of",
]

COMMANDS = frozenset({"start", "newgame", "round", "top", "me", "help"})
_EMOJI_PARTS = frozenset({"\u200d", "\ufe0f", "\u20e3"})  # joiner, variation selector, keycap


@attrs.frozen
class Sender:
    """The Telegram user who sent a message; ``name`` cleaned for the game."""

    id: int
    name: str


@attrs.frozen
class Chat:
    """The chat a message was sent in; ``title`` cleaned for the game; ``thread`` the forum
    topic it was sent in (``message_thread_id``), ``None`` outside one."""

    id: int
    title: str
    private: bool
    thread: int | None = None


@attrs.frozen
class Command:
    """``/name`` (``COMMANDS``); in a private chat every text is ``help``."""

    chat: Chat
    sender: Sender
    name: str


@attrs.frozen
class Guess:
    """A text of emoji only in a group."""

    chat: Chat
    sender: Sender
    text: str


@attrs.frozen
class Upgraded:
    """The group ``old`` was upgraded to the supergroup ``new`` (a service message)."""

    old: int
    new: int


@attrs.frozen
class Ignored:
    """Nothing for the game; ``reason`` says which rule decided it."""

    reason: str


Meaning = Command | Guess | Upgraded | Ignored


def update_id_of(update: Mapping[str, Any]) -> int:
    """The update's ``update_id``; ``ValueError`` when it has none (not an update)."""
    value = update.get("update_id")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"an update needs an update_id >= 0, got {value!r}")
    return value


def chat_of(update: Mapping[str, Any]) -> int | None:
    """The id of the chat an update belongs to (its lane), of any kind of update that has one;
    ``None`` for one that has none."""
    for field in ("message", "edited_message", "channel_post", "edited_channel_post"):
        body = update.get(field)
        if isinstance(body, Mapping):
            chat = body.get("chat")
            if isinstance(chat, Mapping) and _is_int(chat.get("id")):
                return int(chat["id"])
    return None


def meaning(update: Mapping[str, Any], bot_username: str) -> Meaning:
    """What ``update`` asks of the game (the rules are in the module's docstring)."""
    message = update.get("message")
    if not isinstance(message, Mapping):
        kinds = sorted(k for k in update if k != "update_id")
        return Ignored(f"not a new message ({', '.join(kinds) or 'empty'})")
    sender = message.get("from")
    chat = message.get("chat")
    if not isinstance(chat, Mapping) or not _is_int(chat.get("id")):
        return Ignored("no chat")
    upgraded = _upgrade(message, int(chat["id"]))
    if upgraded is not None:
        return upgraded
    if not isinstance(sender, Mapping) or not _is_int(sender.get("id")):
        return Ignored("no sender")
    if sender.get("is_bot"):
        return Ignored("from a bot")
    text = message.get("text")
    if not isinstance(text, str) or not text.strip():
        return Ignored("not a text message")
    who = Sender(int(sender["id"]), display_name(sender))
    where = _chat(chat, message)
    if where.private:
        return Command(where, who, "help")
    first = text.split(maxsplit=1)[0]
    if first.startswith("/"):
        name, _, bot = first[1:].partition("@")
        if bot and bot.lower() != bot_username.lower():
            return Ignored("a command for another bot")
        if name.lower() not in COMMANDS:
            return Ignored("not a command of this game")
        return Command(where, who, name.lower())
    if is_emoji_only(text) and emoji_count(text) == SIZE:
        return Guess(where, who, text)
    return Ignored("conversation")


def is_emoji_only(text: str) -> bool:
    """True for a text of emoji (symbols, with their joiners, selectors and skin tones) and
    white space only."""
    parts = [c for c in text if not c.isspace()]
    return bool(parts) and all(
        unicodedata.category(c) == "So" or c in _EMOJI_PARTS or 0x1F3FB <= ord(c) <= 0x1F3FF
        for c in parts
    )


def emoji_count(text: str) -> int:
    """How many emoji ``text`` holds, counting the symbols (a sequence joined by ZWJ counts each
    of its parts; selectors and skin tones count nothing)."""
    return sum(1 for c in text if unicodedata.category(c) == "So")


def display_name(user: Mapping[str, Any]) -> str:
    """A user's name as the game shows it: first and last name, else the username, else
    ``player <id>``, cleaned for the game's rules."""
    full = " ".join(str(user.get(k) or "") for k in ("first_name", "last_name")).strip()
    return clean_label(full, MAX_NAME, str(user.get("username") or f"player {user['id']}"))


def _upgrade(message: Mapping[str, Any], chat: int) -> Upgraded | None:
    """The upgrade a service message announces, or ``None``."""
    to, since = message.get("migrate_to_chat_id"), message.get("migrate_from_chat_id")
    if isinstance(to, int) and _is_int(to) and to != chat:
        return Upgraded(chat, to)
    if isinstance(since, int) and _is_int(since) and since != chat:
        return Upgraded(since, chat)
    return None


def _chat(chat: Mapping[str, Any], message: Mapping[str, Any]) -> Chat:
    private = chat.get("type") == "private"
    title = chat.get("title") or chat.get("first_name") or ""
    cleaned = clean_label(str(title), MAX_TITLE, f"chat {chat['id']}")
    thread = message.get("message_thread_id")
    topic: int | None = None
    if message.get("is_topic_message") is True and isinstance(thread, int) and _is_int(thread):
        topic = thread if thread > 0 else None
    return Chat(int(chat["id"]), cleaned, private, topic)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
