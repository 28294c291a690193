"""A chat's streak of 429s (the store of the key ``flooded:<chat>``, an app key of the notify
queue, ``codemojex.keys``): set with a lifetime at a chat's first 429 since its last delivery,
deleted at a delivery, so its remaining lifetime tells how long the chat has answered 429 (on
the server's clock, shared by every worker process)."""

from __future__ import annotations

from codemojex.keys import queue_app_keys
from codemojex.notify.notifier import NOTIFY_QUEUE
from echomq_trio import Bus

__all__ = ["end_streak", "flooded_for_ms", "streak_key"]


def streak_key(bus: Bus, chat: int, *, queue: str = NOTIFY_QUEUE) -> str:
    """The key of ``chat``'s streak of 429s."""
    return queue_app_keys(queue).flooded(chat)


async def end_streak(bus: Bus, chat: int, *, queue: str = NOTIFY_QUEUE) -> None:
    """A notice to ``chat`` was delivered: its streak of 429s ends (one ``DEL``)."""
    await bus.command("DEL", streak_key(bus, chat, queue=queue))


async def flooded_for_ms(bus: Bus, chat: int, ttl_ms: int, *, queue: str = NOTIFY_QUEUE) -> int:
    """``chat`` answered 429: how long its streak has lasted (ms, 0 at its first 429). The
    streak's key is set with a lifetime of ``ttl_ms`` at the first 429 (``SET NX PX``), and
    its remaining lifetime (``PTTL``) tells the time since; choose ``ttl_ms`` longer than any
    streak worth telling apart (the worker: twice its cap)."""
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 1:
        raise ValueError(f"ttl_ms must be a positive int, got {ttl_ms!r}")
    key = streak_key(bus, chat, queue=queue)
    await bus.command("SET", key, "1", "NX", "PX", ttl_ms)
    left = await bus.command("PTTL", key)
    return max(0, ttl_ms - left) if isinstance(left, int) and left >= 0 else 0
