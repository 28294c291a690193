"""``notify``: enqueue one notice on its chat's lane. The lane has a concurrency limit of 1, so
notices to one chat are delivered in the order they were sent, across deferrals and retries,
while other chats go on. A notice's bus job is minted with the notice's own snowflake
(``job_id_of``: ``NOT…`` -> ``JOB…``), so the id ``notify`` returns finds the job without an
index: ``echomq show cm.notify NOT…`` and ``echomq replay cm.notify NOT…`` take it as it is."""

from __future__ import annotations

import json
from typing import Any

from codemojex import ids
from codemojex.notify.notice import Notice, check_notice, encode
from echomq_trio import Bus, Outcome, Seq, lanes

__all__ = ["NOTIFY_QUEUE", "job_id_of", "notify"]

NOTIFY_QUEUE = "cm.notify"


def job_id_of(notice_id: str) -> str:
    """The id of the bus job that carries notice ``notice_id``: ``JOB`` and the same snowflake."""
    if not ids.is_valid(notice_id, ids.NOTICE):
        raise ValueError(f"not a notice id: {notice_id!r}")
    return ids.JOB + notice_id[len(ids.NOTICE) :]


async def notify(
    bus: Bus,
    chat: int,
    text: str,
    opts: dict[str, Any] | None = None,
    *,
    queue: str = NOTIFY_QUEUE,
    key: str | Seq | None = None,
) -> str | None:
    """Enqueue a notice to ``chat`` and return its ``NOT`` id (its job: ``job_id_of``).
    ``opts`` are extra Bot API fields (``parse_mode``, ``disable_notification``, ...). Empty
    text, text over 4096 characters, a chat id that is not an int, or opts that are not JSON
    raise ``ValueError``.

    ``key`` makes the notice once: an idempotency key (a str, remembered for a day), or a
    number of a numbered stream (a ``Seq``: a reply keyed by the update it answers, remembered
    in its chat's window; ``lanes.enqueue``). When it was used before, the notice is not
    enqueued again and the answer is ``None``."""
    check_notice(chat, text, opts)
    try:
        json.dumps(opts or {})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"opts must be JSON-serializable: {exc}") from exc
    notice = Notice(chat=chat, text=text, opts=dict(opts or {}), id=ids.new(ids.NOTICE))
    seq, key = (key, None) if isinstance(key, Seq) else (None, key)
    job_id = job_id_of(notice.id)
    out = await lanes.enqueue(
        bus, queue, str(chat), encode(notice), job_id=job_id, limit=1, key=key, seq=seq
    )
    return notice.id if out.outcome is Outcome.ENQUEUED else None
