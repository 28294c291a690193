"""An audit row: what the archive keeps of one settled notice, and how the audit stream's
records fold into rows (pure)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from codemojex.notify.notice import DeliveryNote, decode_note
from echomq_trio import ids

__all__ = ["COLUMNS", "OUTCOMES", "AuditRow", "fold"]

OUTCOMES = {"acked": "delivered", "dropped": "dropped", "dead": "dead"}


@attrs.frozen
class AuditRow:
    """One settled notice: ``delivered`` (with Telegram's message id), ``dropped`` (a permanent
    error: ``reason``) or ``dead`` (out of attempts: the last error in ``reason``)."""

    notice_id: str
    job_id: str
    chat: int | None
    outcome: str
    message_id: int | None
    attempts: int
    reason: str | None
    enqueued_ms: int | None
    settled_ms: int
    text: str | None

    def as_tuple(self) -> tuple[Any, ...]:
        """The values in ``COLUMNS`` order."""
        return attrs.astuple(self)

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _json(text: str) -> Mapping[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}


def _note(text: str) -> DeliveryNote | None:
    try:
        return decode_note(text)
    except ValueError:  # a drop's or a dead notice's record has no note
        return None


def fold(records: Iterable[Mapping[str, str]]) -> list[AuditRow]:
    """Audit stream records (fields ``id``, ``outcome``, ``attempts``, ``settled_ms``,
    ``payload``, ``note``, ``error``) to rows. A delivered notice's note is its
    ``DeliveryNote`` (the chat it reached, Telegram's message id). A payload that is not a
    notice still gets a row, keyed by its job id."""
    rows = []
    for rec in records:
        payload = _json(rec.get("payload", ""))
        note = _note(rec.get("note", ""))
        job_id = rec.get("id", "")
        notice_id = str(payload.get("id") or job_id)
        chat = payload.get("chat") if note is None else note.chat
        message_id = None if note is None else note.message_id
        rows.append(
            AuditRow(
                notice_id=notice_id,
                job_id=job_id,
                chat=chat if isinstance(chat, int) else None,
                outcome=OUTCOMES.get(rec.get("outcome", ""), rec.get("outcome", "")),
                message_id=message_id if isinstance(message_id, int) else None,
                attempts=int(rec.get("attempts") or 0),
                reason=rec.get("error") or None,
                enqueued_ms=ids.timestamp_ms(notice_id) if ids.is_valid(notice_id) else None,
                settled_ms=int(rec.get("settled_ms") or 0),
                text=payload.get("text") if isinstance(payload.get("text"), str) else None,
            )
        )
    return rows


COLUMNS = tuple(field.name for field in attrs.fields(AuditRow))
