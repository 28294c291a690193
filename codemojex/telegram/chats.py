"""What a chat id says about its chat, as the Bot API numbers them (pure), and ``check_chat_id``.

The Bot API's ids (https://core.telegram.org/bots/api#chat: "This number may have more than 32
significant bits ... but it has at most 52 significant bits"; the ranges are TDLib's
``DialogId``, which the Bot API server uses):

* a user (private chat): 1 .. 2^40 - 1;
* a basic group: -1 .. -999,999,999,999 (``type: "group"``);
* a supergroup or a channel: -100 followed by the channel's id, that is -1,000,000,000,001 ..
  -1,997,852,516,352 (``type: "supergroup"`` or ``"channel"``: the id cannot tell them apart).

Any other id is a chat no bot can reach: the Bot API answers "Bad Request: chat not found".
Groups, supergroups and channels have negative ids, private chats positive ones
(``is_group_chat``).
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "MAX_BASIC_GROUP_ID",
    "MAX_USER_ID",
    "MIN_CHANNEL_ID",
    "ZERO_CHANNEL_ID",
    "ChatKind",
    "chat_kind",
    "check_chat_id",
    "check_user_id",
    "is_group_chat",
]

ChatKind = Literal["private", "group", "supergroup", "channel"]

MAX_USER_ID = (1 << 40) - 1
MAX_BASIC_GROUP_ID = 999_999_999_999
ZERO_CHANNEL_ID = -1_000_000_000_000
MIN_CHANNEL_ID = ZERO_CHANNEL_ID - (1_000_000_000_000 - (1 << 31))

_RANGES = (
    f"1..{MAX_USER_ID} (a user), -{MAX_BASIC_GROUP_ID}..-1 (a group) or "
    f"{MIN_CHANNEL_ID}..{ZERO_CHANNEL_ID - 1} (a supergroup or channel)"
)


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


def is_group_chat(chat_id: int) -> bool:
    """Groups and channels have negative ids; private chats positive ones."""
    return chat_id < 0


def check_chat_id(value: object, what: str = "chat id") -> int:
    """``value`` if it is an int some Telegram chat has as its id (see the module's docstring);
    a one-line ``ValueError`` naming ``what`` and the ranges if not (a ``bool`` is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or chat_kind(value) is None:
        raise ValueError(f"{what} must be a Telegram chat id, an int in {_RANGES}; got {value!r}")
    return value


def check_user_id(value: object, what: str = "user id") -> int:
    """``value`` if it is an int some Telegram user has as its id, which is also the id of the
    private chat with the user; a one-line ``ValueError`` naming ``what`` if not."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_USER_ID:
        raise ValueError(
            f"{what} must be a Telegram user id, an int in 1..{MAX_USER_ID}; got {value!r}"
        )
    return value
