"""An audit row: what the archive keeps of one settled notice, and how the audit stream's
records fold into rows (pure)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from codemojex.notify.notice import DeliveryNote, decode_note
from echomq_trio import ids
from echomq_trio.audit import AuditOutcome, AuditRecord

__all__ = ["COLUMNS", "NOT_SENT_AGAIN", "OUTCOMES", "AuditRow", "fold"]

NOT_SENT_AGAIN = "not sent again: the audit archive records it delivered"
OUTCOMES = {AuditOutcome.ACKED: "delivered", AuditOutcome.DROPPED: "dropped",
            AuditOutcome.DEAD: "dead", AuditOutcome.CANCELLED: "cancelled"}  # fmt: skip


def _delivered_once(row: AuditRow) -> int:
    return 1 if row.outcome == "delivered" else 0


@attrs.frozen
class AuditRow:
    """One settled notice: ``delivered`` (with Telegram's message id), ``dropped`` (a permanent
    error: ``reason``), ``dead`` (out of attempts: the last error in ``reason``) or
    ``cancelled`` (``jobs.cancel``: why in ``reason``), as its latest settlement left it.

    ``deliveries`` counts the times it was delivered, every settlement folded: more than 1 is a
    notice sent again (after a repair or restore of the server's data, say). A row folded from
    one record has 1 if it was delivered, else 0, and so has a row written before the count
    existed (an older replica's); 0 with ``delivered`` is an ack the worker made without
    sending, because the archive recorded the notice delivered already (``unsent``)."""

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
    deliveries: int = attrs.field(default=attrs.Factory(_delivered_once, takes_self=True))

    @property
    def unsent(self) -> bool:
        """Acked without sending: the archive recorded the notice delivered already."""
        return self.outcome == "delivered" and self.deliveries == 0

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


def fold(records: Iterable[AuditRecord]) -> list[AuditRow]:
    """The bus's audit records (``echomq_trio.audit``) to rows. A delivered notice's note is its
    ``DeliveryNote`` (the chat it reached, Telegram's message id; ``already_delivered`` when
    the worker acked it unsent: 0 deliveries). A payload that is not a notice still gets a row,
    keyed by its job id."""
    rows = []
    for rec in records:
        payload = _json(rec.payload.decode(errors="replace"))
        note = _note(rec.note)
        notice_id = str(payload.get("id") or rec.job_id)
        chat = payload.get("chat") if note is None else note.chat
        text = payload.get("text")
        unsent = note is not None and note.already_delivered
        rows.append(
            AuditRow(
                notice_id=notice_id,
                job_id=rec.job_id,
                chat=chat if isinstance(chat, int) and not isinstance(chat, bool) else None,
                outcome=OUTCOMES[rec.outcome],
                message_id=None if note is None else note.message_id,
                attempts=rec.attempts,
                reason=NOT_SENT_AGAIN if unsent else rec.error or None,
                enqueued_ms=ids.timestamp_ms(notice_id) if ids.is_valid(notice_id) else None,
                settled_ms=rec.settled_ms,
                text=text if isinstance(text, str) else None,
                **({"deliveries": 0} if unsent else {}),
            )
        )
    return rows


COLUMNS = tuple(field.name for field in attrs.fields(AuditRow))
