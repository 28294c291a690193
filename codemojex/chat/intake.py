"""``admit``: the one way a Telegram update enters the bus, whether it was polled or pushed to
the webhook.

Each update becomes a job on the ``cm.updates`` queue, in its chat's lane (limit 1: a chat's
updates are handled one at a time, in the order they were admitted, while other chats go on).
Telegram numbers a bot's updates with increasing ids, so an update is admitted as number
``update_id`` of its chat's numbered stream (``update_seq``: ``echomq_trio.Seq``), and the bus
admits each number of a chat once: an update admitted twice (the poller died after admitting and
before confirming the offset, or Telegram delivered a webhook call again after a lost answer) is
a ``DUPLICATE`` the second time and is handled once. Updates of a chat that arrive out of order
(a webhook call answered 503 and delivered again after a later one) are each admitted, as long
as fewer than the window's worth (32) of the chat's later updates came first.

An answer to an update is made once the same way (``reply_seq``: the update's chat and id, a
stream on the notify queue). What the bus keeps for these is one small set per chat (the chat's
latest admitted ids, at most the window), not one key per update: it grows with the chats, not
with the traffic, and a chat's set expires after two days without an update (Telegram keeps an
unconfirmed update for at most 24 hours).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from codemojex.chat.meaning import chat_of, update_id_of
from echomq_trio import Bus, Outcome, Seq, lanes

__all__ = ["ALLOWED_UPDATES", "UPDATES_QUEUE", "admit", "reply_seq", "update_seq"]

UPDATES_QUEUE = "cm.updates"
ALLOWED_UPDATES = ("message",)  # what the game reads; Telegram sends nothing else


def update_seq(bot_id: int, chat: int, update_id: int) -> Seq:
    """An update as a number of its chat's stream (update ids are numbered per bot)."""
    return Seq(f"tg:{bot_id}:{chat}", update_id)


def reply_seq(bot_id: int, chat: int, update_id: int) -> Seq:
    """What makes the answer to an update once (``notify(..., key=...)``): the update's number in
    the stream of its chat's answers (kept on the notify queue, whatever chat the answer goes
    to), so a handler run again after a crash answers once."""
    return Seq(f"reply:{bot_id}:{chat}", update_id)


async def admit(
    bus: Bus,
    update: Mapping[str, Any],
    bot_id: int,
    *,
    queue: str = UPDATES_QUEUE,
    job_id: str | None = None,
) -> Outcome | None:
    """Put ``update`` on its chat's lane: ``ENQUEUED``, ``DUPLICATE`` (admitted before), or
    ``None`` for an update that belongs to no chat (nothing for the game; not admitted).
    ``ValueError`` for a body that is not an update. ``job_id``: the job's id, minted by the
    caller (updates admitted at once keep their order in a chat's lane only if their ids were
    minted in it); else minted here. A cancelled call may or may not have admitted it; call
    again: the update's number makes that safe."""
    update_id = update_id_of(update)
    chat = chat_of(update)
    if chat is None:
        return None
    admitted = await lanes.enqueue(
        bus, queue, str(chat), json.dumps(dict(update), ensure_ascii=False), job_id=job_id,
        limit=1, seq=update_seq(bot_id, chat, update_id),
    )  # fmt: skip
    return admitted.outcome
