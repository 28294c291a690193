"""What Telegram takes as a message's text (pure): its limits, the parse modes it knows, how it
counts a text's length, and ``check_text``, which refuses what Telegram would refuse.

A text sent with a ``parse_mode`` is parsed as Telegram parses it (``markup``): it must parse,
and its length is that of the text shown (markup does not count), in UTF-16 code units as
Telegram counts them. Before any parsing, the text as sent is limited in UTF-8 bytes."""

from __future__ import annotations

from codemojex.telegram import markup

__all__ = ["MAX_TEXT", "MAX_TEXT_BYTES", "PARSE_MODES", "check_text", "telegram_length"]

MAX_TEXT = 4096  # Telegram's limit on a message's text, in UTF-16 code units
MAX_TEXT_BYTES = 1 << 15
"""Telegram's limit on ``text`` as sent, before parsing, in UTF-8 bytes (32 KiB): longer is
"Bad Request: text is too long" from the Bot API server (the figure is issue 11's; the stored copy
of tdlib/telegram-bot-api's Client.cpp, an older fork, has no such check yet)."""
PARSE_MODES = frozenset({"html", "markdownv2", "markdown", "none"})
"""The ``parse_mode`` values the Bot API server takes, lowercase (it lowercases the value; "none",
like an empty one, means plain text; anything else is "Unsupported parse_mode"), as
``Client::get_formatted_text`` in tdlib/telegram-bot-api reads them."""


def telegram_length(text: str) -> int:
    """A text's length as Telegram counts it: UTF-16 code units (an emoji outside the Basic
    Multilingual Plane counts 2)."""
    return len(text.encode("utf-16-le")) // 2


def check_text(text: object, parse_mode: object = None, *, what: str = "text") -> str:
    """``text`` if Telegram takes it as a message's text in ``parse_mode`` (``None``: plain);
    a one-line ``ValueError`` naming ``what`` for anything Telegram would refuse: not a
    non-empty string, a parse mode it does not know, over ``MAX_TEXT_BYTES`` as sent, markup
    that does not parse, nothing left to show, or over ``MAX_TEXT`` as shown."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{what} must be a non-empty string")
    if parse_mode is not None and (
        not isinstance(parse_mode, str) or parse_mode.lower() not in PARSE_MODES
    ):
        raise ValueError(
            f"parse_mode must be one of HTML, MarkdownV2, Markdown, got {parse_mode!r}"
        )
    if len(text.encode()) > MAX_TEXT_BYTES:
        raise ValueError(f"{what} is over {MAX_TEXT_BYTES} bytes; Telegram refuses it unread")
    try:
        shown = markup.apply(text, parse_mode).text
    except markup.MarkupError as exc:
        raise ValueError(f"{what} does not parse as {parse_mode}: {exc}") from None
    if not shown:
        raise ValueError(f"{what} must be a non-empty string")
    if telegram_length(shown) > MAX_TEXT:
        raise ValueError(
            f"{what} is {telegram_length(shown)} UTF-16 units long; Telegram allows {MAX_TEXT}"
        )
    return text
