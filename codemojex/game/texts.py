"""How the game builds the texts it sends (pure): the game's own, where ``codemojex.telegram``
holds Telegram's rules for any text (``markup``, ``text``).

Every text the game sends is a ``Text``: its body and the parse mode it was built for, made by
``plain`` or ``html`` and never split on the way, so a text cannot be sent in a mode it was not
built for. The rule both ways:

* a ``plain`` text goes without a parse mode and is shown as written: user-supplied names and
  titles go in as they are (``<Tom & Jerry>``), never escaped, since Telegram would show the
  escapes (``&lt;Tom &amp; Jerry&gt;``);
* an ``html`` text goes with ``parse_mode`` HTML, so its heading and names can stand out, and
  every user-supplied name or title in it goes through ``escape`` first: a player called
  ``<Tom & Jerry>`` is shown as written instead of breaking the message (Telegram answers an
  unescaped ``<`` with 400 "can't parse entities", and the notice would be dropped).
  ``check_notice`` (``codemojex.telegram.check_text``) parses every notice with a parse mode as
  Telegram does, so a text built here that does not parse is refused when it is enqueued, never
  dropped on the way.

A text answering a message in a forum topic goes to that topic: ``Text.opts(thread)`` adds
its ``message_thread_id``.

Markdown is never used: ``*`` and ``_`` in names are plain characters in both modes.
"""

from __future__ import annotations

import html as _html
from typing import Literal

import attrs

__all__ = ["Text", "bold", "escape", "html", "html_opts", "plain"]


@attrs.frozen
class Text:
    """A text to send and the parse mode it was built for (``None``: plain)."""

    body: str
    parse_mode: Literal["HTML"] | None = None

    def opts(self, thread: int | None = None) -> dict[str, str | int]:
        """The Bot API fields that go with it (a fresh dict each time), and the forum topic it
        goes to (``message_thread_id``) when ``thread`` is given."""
        fields: dict[str, str | int] = {}
        if self.parse_mode is not None:
            fields["parse_mode"] = self.parse_mode
        if thread is not None:
            fields["message_thread_id"] = thread
        return fields


def plain(body: str) -> Text:
    """A text sent as written: names in it are not escaped."""
    return Text(body)


def html(body: str) -> Text:
    """A text built as HTML (names in it went through ``escape``)."""
    return Text(body, "HTML")


def html_opts() -> dict[str, str]:
    """The Bot API fields of a notice whose text is HTML (a fresh dict each time)."""
    return {"parse_mode": "HTML"}


def escape(text: str) -> str:
    """``text`` (a name, a title) safe inside HTML: ``&``, ``<`` and ``>`` as entities, which
    are the characters Telegram's HTML parser reads as markup."""
    return _html.escape(text, quote=False)


def bold(text: str) -> str:
    """``text`` (escaped already) in bold."""
    return f"<b>{text}</b>"
