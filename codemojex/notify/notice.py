"""What travels with a notice, as JSON (de)serialized with cattrs (pure): the payload
``{chat, text, opts, id}`` the notifier enqueues (a notice scheduled ahead, such as a
round's reminder, also carries ``due_ms``: when it is due), and the ``DeliveryNote``
``{chat, message_id}`` the worker acks a delivered notice with, which the audit's fold reads."""

from __future__ import annotations

from typing import Any

import attrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter

from codemojex.telegram.text import check_text

__all__ = [
    "DeliveryNote",
    "Notice",
    "check_notice",
    "decode",
    "decode_note",
    "encode",
    "encode_note",
]

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
    """Raise ``ValueError`` for what Telegram would refuse or the pipeline cannot carry: a chat
    that is not an int, ``opts`` that are not a dict, or a text ``check_text`` refuses in the
    ``parse_mode`` of ``opts`` (``codemojex.telegram.text``)."""
    if isinstance(chat, bool) or not isinstance(chat, int):
        raise ValueError(f"chat id must be an int, got {chat!r}")
    if opts is not None and not isinstance(opts, dict):
        raise ValueError(f"opts must be a dict of Bot API fields, got {type(opts).__name__}")
    check_text(text, (opts or {}).get("parse_mode"), what="notice text")


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
