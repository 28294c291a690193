"""What a chat id says about its chat, as the Bot API numbers them (pure), and the ``Chat`` object
the stand-in answers with.

The Bot API's ids (https://core.telegram.org/bots/api#chat: "This number may have more than 32
significant bits ... but it has at most 52 significant bits"; the ranges are TDLib's
``DialogId``, which the Bot API server uses):

* a user (private chat): 1 .. 2^40 - 1;
* a basic group: -1 .. -999,999,999,999 (``type: "group"``);
* a supergroup or a channel: -100 followed by the channel's id, that is -1,000,000,000,001 ..
  -1,997,852,516,352 (``type: "supergroup"``; the id cannot tell a channel from a supergroup,
  so the stand-in answers ``supergroup`` unless told ``channel``).

Any other id is a chat the bot cannot reach: "Bad Request: chat not found". Groups, supergroups
and channels have a ``title``; private chats a ``first_name``. A basic group also has
``all_members_are_administrators``, which the Bot API server (``JsonChat``) always sends for one,
true when the group's permissions let every member do everything, as a new group's do.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ChatKind", "chat_json", "chat_kind"]

ChatKind = Literal["private", "group", "supergroup", "channel"]

MAX_USER_ID = (1 << 40) - 1
MAX_BASIC_GROUP_ID = 999_999_999_999
ZERO_CHANNEL_ID = -1_000_000_000_000
MIN_CHANNEL_ID = ZERO_CHANNEL_ID - (1_000_000_000_000 - (1 << 31))


def chat_kind(chat_id: int) -> ChatKind | None:
    """The kind of chat ``chat_id`` names (``supergroup`` for every -100… id), or ``None`` when
    no chat has it."""
    if 0 < chat_id <= MAX_USER_ID:
        return "private"
    if -MAX_BASIC_GROUP_ID <= chat_id < 0:
        return "group"
    if MIN_CHANNEL_ID <= chat_id < ZERO_CHANNEL_ID:
        return "supergroup"
    return None


def chat_json(chat_id: int, kind: ChatKind, name: str | None = None) -> dict[str, object]:
    """The Bot API's ``Chat`` for ``chat_id``: a ``title`` for groups and channels, a
    ``first_name`` for a private chat (``name``, or one made from the id), and for a basic
    group ``all_members_are_administrators``."""
    if kind == "private":
        return {"id": chat_id, "first_name": name or f"User {chat_id}", "type": kind}
    chat: dict[str, object] = {"id": chat_id, "title": name or f"Chat {chat_id}", "type": kind}
    if kind == "group":
        chat["all_members_are_administrators"] = True
    return chat
