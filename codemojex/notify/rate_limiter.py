"""The shared rate limit: sliding send windows kept on the server (one Lua script, server clock),
so every worker process spends one budget. ``take(chat)`` takes from the bot's global window and
the chat's window together or from neither, and answers ok or how long to wait.

Defaults (``codemojex.notify.limits.Limits``): 30 sends per second for the bot, a private chat 3 per
3 s (1/s with a burst of 3), a group chat 20 per minute. ``pause`` honours a 429: only its chat,
or everything when the global limit tripped; a pause only ever extends. Keys live under the
notification queue's hash tag, in the same slot as the queue.
"""

from __future__ import annotations

import attrs

from codemojex.notify.limits import Limits
from echomq_trio import Bus
from echomq_trio.keys import check_queue

__all__ = ["DEFAULT_MARGIN_MS", "RateLimiter", "Take"]

DEFAULT_MARGIN_MS = 30


@attrs.frozen
class Take:
    ok: bool
    wait_ms: int = 0
    blocked_by: str = ""  # 'global', 'chat' or 'paused' when not ok


class RateLimiter:
    """One budget for every process using the same server and ``tag``."""

    def __init__(
        self,
        bus: Bus,
        limits: Limits = Limits(),
        *,
        tag: str = "cm.notify",
        margin_ms: int = DEFAULT_MARGIN_MS,
    ) -> None:
        if margin_ms < 0:
            raise ValueError("margin_ms must be >= 0")
        self.bus = bus
        self.limits = limits
        self.margin_ms = margin_ms
        self.prefix = f"emq:{{{check_queue(tag)}}}:rate:"

    async def take(self, chat: int) -> Take:
        """Take one send for ``chat`` now, or learn how long to wait."""
        chat = _chat(chat)
        window = self.limits.for_chat(chat)
        ok, wait, why = await self.bus.wire.script(
            "codemojex.notify/rate_take",
            [self.prefix + "global"],
            [
                self.prefix,
                str(chat),
                str(self.limits.global_.limit),
                str(self.limits.global_.window_ms),
                str(window.limit),
                str(window.window_ms),
                str(self.margin_ms),
            ],
        )
        return Take(bool(ok), int(wait), why.decode() if isinstance(why, bytes) else str(why))

    async def pause(self, scope: str, chat: int, ms: int) -> tuple[str, int]:
        """Pause ``scope`` (``'chat'``, ``'global'`` or ``'auto'``) for ``ms``; returns the scope
        paused and the pause's end (server ms)."""
        if scope not in ("chat", "global", "auto"):
            raise ValueError(f"scope must be chat, global or auto, got {scope!r}")
        if not isinstance(ms, int) or ms < 1:
            raise ValueError(f"ms must be a positive int, got {ms!r}")
        got_scope, until = await self.bus.wire.script(
            "codemojex.notify/rate_pause",
            [self.prefix + "global"],
            [
                self.prefix,
                scope,
                str(_chat(chat)),
                str(ms),
                str(self.limits.global_.limit),
                str(self.limits.global_.window_ms),
                str(self.margin_ms),
            ],
        )
        text = got_scope.decode() if isinstance(got_scope, bytes) else str(got_scope)
        return text, int(until)


def _chat(chat: object) -> int:
    if isinstance(chat, bool) or not isinstance(chat, int):
        raise ValueError(f"chat id must be an int, got {chat!r}")
    return chat
