"""``admit``: the one way a Telegram update enters the bus, whether it was polled or pushed to
the webhook.

Each update becomes a job on the ``cm.updates`` queue, in its chat's lane (limit 1: a chat's
updates are handled one at a time, in the order Telegram numbered them, while other chats go
on), with ``<bot id>:<update_id>`` as its idempotency key. So an update admitted twice (the
poller died after admitting and before confirming the offset, or Telegram delivered a webhook
call again after a lost answer) is a ``DUPLICATE`` the second time and is handled once.
Telegram keeps an unconfirmed update for at most 24 hours; the key is remembered for two days.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from codemojex.chat.meaning import chat_of, update_id_of
from echomq_trio import Bus, Outcome, lanes

__all__ = ["ALLOWED_UPDATES", "KEY_TTL_MS", "UPDATES_QUEUE", "admit", "update_key"]

UPDATES_QUEUE = "cm.updates"
ALLOWED_UPDATES = ("message",)  # what the game reads; Telegram sends nothing else
KEY_TTL_MS = 2 * 86_400_000


def update_key(bot_id: int, update_id: int) -> str:
    """The idempotency key of an update: update ids are numbered per bot."""
    return f"tg:{bot_id}:{update_id}"


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
    again: the key makes that safe."""
    update_id = update_id_of(update)
    chat = chat_of(update)
    if chat is None:
        return None
    admitted = await lanes.enqueue(
        bus, queue, str(chat), json.dumps(dict(update), ensure_ascii=False), job_id=job_id,
        limit=1, key=update_key(bot_id, update_id), key_ttl_ms=KEY_TTL_MS,
    )  # fmt: skip
    return admitted.outcome
