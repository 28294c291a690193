"""The ``Chat`` object the stand-in answers with (pure), for a chat of the kind its id names
(``codemojex.telegram.chats.chat_kind``: the id cannot tell a channel from a supergroup, so the
stand-in answers ``supergroup`` unless told ``channel``; an id no chat has is "Bad Request: chat
not found"). Groups, supergroups and channels have a ``title``; private chats a ``first_name``. A
basic group also has ``all_members_are_administrators``, which the Bot API server (``JsonChat``)
always sends for one, true when the group's permissions let every member do everything, as a new
group's do.
"""

from __future__ import annotations

from codemojex.telegram.chats import ChatKind

__all__ = ["chat_json"]


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
