"""How the game marks up the texts it sends (pure). A text that names a room or a player goes to
Telegram as HTML (``HTML``), so its heading and names can stand out, and every user-supplied
name or title in it goes through ``escape`` first: a player called ``<Tom & Jerry>`` is shown as
written instead of breaking the message (Telegram answers an unescaped ``<`` with 400 "can't
parse entities", and the notice would be dropped). ``check_notice`` parses every notice with a
parse mode as Telegram does, so a text built here that does not parse is refused when it is
enqueued, never dropped on the way.
"""

from __future__ import annotations

import html

__all__ = ["bold", "escape", "html_opts"]


def html_opts() -> dict[str, str]:
    """The Bot API fields of a notice whose text is HTML (a fresh dict each time)."""
    return {"parse_mode": "HTML"}


def escape(text: str) -> str:
    """``text`` (a name, a title) safe inside HTML: ``&``, ``<`` and ``>`` as entities, which
    are the characters Telegram's HTML parser reads as markup."""
    return html.escape(text, quote=False)


def bold(text: str) -> str:
    """``text`` (escaped already) in bold."""
    return f"<b>{text}</b>"
