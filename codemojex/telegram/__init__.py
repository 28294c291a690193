"""Telegram: what the service knows of the Bot API, apart from what it does with it.

How the parts fit: ``bot`` is the Bot API client (``TelegramBot``, made by ``open_bot``: one
pooled ``httpx`` client on trio, the token never logged), whose every answer ``classify`` (pure)
reads as a ``Verdict``: delivered, retry later, migrate, drop, or fatal, or ``Garbled`` when it
was not the Bot API's. ``text`` (pure) holds the rules of a message's text (its limits in bytes
and in UTF-16 units, the parse modes, ``check_text``), ``markup`` (pure) applies a parse mode as
Telegram does (the plain text and its entities, or Telegram's "can't parse entities"),
``limits`` (pure) the sending limits as sliding ``Window``\\s, and ``chats`` (pure) what a chat
id says (``chat_kind``, ``is_group_chat``) and ``check_chat_id``: an id some Telegram chat has.

``codemojex.notify``, ``chat``, ``game`` and ``standin`` use it; it uses none of them.
"""

from codemojex.telegram import markup
from codemojex.telegram.bot import DEFAULT_API_URL, Answer, InFlight, TelegramBot, garbled, open_bot
from codemojex.telegram.chats import (
    ChatKind,
    chat_kind,
    check_chat_id,
    check_user_id,
    is_group_chat,
)
from codemojex.telegram.classify import (
    CAUSES,
    Delivered,
    Drop,
    Fatal,
    Garbled,
    Migrate,
    RetryLater,
    Verdict,
    classify,
    classify_error,
    is_bot_api,
)
from codemojex.telegram.limits import Limits, Window
from codemojex.telegram.text import (
    MAX_TEXT,
    MAX_TEXT_BYTES,
    PARSE_MODES,
    check_text,
    telegram_length,
)

__all__ = [
    "CAUSES",
    "DEFAULT_API_URL",
    "MAX_TEXT",
    "MAX_TEXT_BYTES",
    "PARSE_MODES",
    "Answer",
    "ChatKind",
    "Delivered",
    "Drop",
    "Fatal",
    "Garbled",
    "InFlight",
    "Limits",
    "Migrate",
    "RetryLater",
    "TelegramBot",
    "Verdict",
    "Window",
    "chat_kind",
    "check_chat_id",
    "check_text",
    "check_user_id",
    "classify",
    "classify_error",
    "garbled",
    "is_bot_api",
    "is_group_chat",
    "markup",
    "open_bot",
    "telegram_length",
]
