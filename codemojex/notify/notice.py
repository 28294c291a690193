"""What travels with a notice, as JSON (de)serialized with cattrs (pure): the payload
``{chat, text, opts, id}`` the notifier enqueues (a notice scheduled ahead, such as a
round's reminder, also carries ``due_ms``: when it is due), and the ``DeliveryNote``
``{chat, message_id}`` the worker acks a delivered notice with, which the audit's fold reads."""

from __future__ import annotations

from typing import Any

import attrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter

from codemojex.notify import markup

__all__ = [
    "MAX_TEXT",
    "MAX_TEXT_BYTES",
    "PARSE_MODES",
    "DeliveryNote",
    "Notice",
    "check_notice",
    "decode",
    "decode_note",
    "encode",
    "encode_note",
    "telegram_length",
]

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


_converter = make_converter(forbid_extra_keys=False)


@attrs.frozen
class Notice:
    chat: int
    text: str
    opts: dict[str, Any] = attrs.Factory(dict)
    id: str = ""
    # No `attempt`: the job's row counts attempts (`JobInfo.attempts`, the `claimed` event's
    # `attempt`); a copy in the payload was never updated. Old payloads with it still decode.
    # When a notice scheduled ahead is due (Unix ms, server clock); None: due when enqueued. The
    # worker's delivery delay counts from it (else from the id's mint time). Left out of the
    # payload when None.
    due_ms: int | None = None


_converter.register_unstructure_hook(
    Notice, make_dict_unstructure_fn(Notice, _converter, due_ms=override(omit_if_default=True))
)


def check_notice(chat: object, text: object, opts: object) -> None:
    """Raise ``ValueError`` for what Telegram would refuse or the pipeline cannot carry. With a
    ``parse_mode`` in ``opts`` the text must parse as Telegram parses it, and its length is that
    of the text shown (markup does not count), as Telegram measures it."""
    if isinstance(chat, bool) or not isinstance(chat, int):
        raise ValueError(f"chat id must be an int, got {chat!r}")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("notice text must be a non-empty string")
    if opts is not None and not isinstance(opts, dict):
        raise ValueError(f"opts must be a dict of Bot API fields, got {type(opts).__name__}")
    parse_mode = (opts or {}).get("parse_mode")
    if parse_mode is not None and (
        not isinstance(parse_mode, str) or parse_mode.lower() not in PARSE_MODES
    ):
        raise ValueError(
            f"parse_mode must be one of HTML, MarkdownV2, Markdown, got {parse_mode!r}"
        )
    if len(text.encode()) > MAX_TEXT_BYTES:
        raise ValueError(f"notice text is over {MAX_TEXT_BYTES} bytes; Telegram refuses it unread")
    try:
        shown = markup.apply(text, parse_mode).text
    except markup.MarkupError as exc:
        raise ValueError(f"notice text does not parse as {parse_mode}: {exc}") from None
    if not shown:
        raise ValueError("notice text must be a non-empty string")
    if telegram_length(shown) > MAX_TEXT:
        raise ValueError(
            f"notice text is {telegram_length(shown)} UTF-16 units long; Telegram allows {MAX_TEXT}"
        )


def encode(notice: Notice) -> str:
    return _converter.dumps(notice)


def decode(payload: bytes | str) -> Notice:
    """Parse a payload; ``ValueError`` when it is not a notice."""
    try:
        notice = _converter.loads(payload, Notice)
    except Exception as exc:  # cattrs raises several kinds; all mean "not a notice"
        raise ValueError(f"not a notice payload: {exc}") from exc
    check_notice(notice.chat, notice.text, notice.opts)
    return notice


@attrs.frozen
class DeliveryNote:
    """What the audit keeps of a delivery, beside the notice itself (which is in the payload):
    the chat it reached (after a migration, the new one) and Telegram's id for the message.
    ``already_delivered``: not sent this time, because the audit archive records the notice
    delivered (after a repair or restore of the server's data); left out when false."""

    chat: int
    message_id: int | None
    already_delivered: bool = False


_converter.register_unstructure_hook(
    DeliveryNote,
    make_dict_unstructure_fn(
        DeliveryNote, _converter, already_delivered=override(omit_if_default=True)
    ),
)


def encode_note(note: DeliveryNote) -> str:
    return _converter.dumps(note)


def decode_note(text: bytes | str) -> DeliveryNote:
    """Parse an ack's note; ``ValueError`` when it is not a delivery note (empty, as a drop's
    or a dead notice's record has, or anything else)."""
    try:
        return _converter.loads(text, DeliveryNote)
    except Exception as exc:  # cattrs raises several kinds; all mean "not a note"
        raise ValueError(f"not a delivery note: {exc}") from exc
