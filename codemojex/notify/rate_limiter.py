"""The shared rate limit: sliding send windows kept on the server (one Lua script, server clock),
so every worker process spends one budget. ``take(chat)`` takes from the bot's global window and
the chat's window together or from neither, and answers ok or how long to wait; ``sent(chat,
entry)`` after the send's answer stamps its entry with the answer's time, so the window counts
from when the message is known to have arrived rather than assuming the margin's worth of trip
(``rate_take.lua`` explains the logs).

Defaults (``codemojex.telegram.Limits``): 30 sends per second for the bot, a private chat 3 per
3 s (1/s with a burst of 3), a group chat 20 per minute. ``pause`` honours a 429: only its chat,
or everything when the global limit tripped; a pause only ever extends. Keys live under the
notification queue's hash tag, in the same slot as the queue: under the queue's app key
``rate:`` (the ``rate_*`` keys of ``codemojex.keys``; every script gets them all in KEYS).
``statistics()`` counts
what this limiter answered (each process counts its own; the budget is shared).

Steps of the server clock: every call carries this limiter's witness of the server clock
(``echomq_trio.clock.Witness``), so the first call after a step records it on the queue, and
the scripts keep their times on a clock of their own that the recorded steps do not move (the
prelude's ``steady_ms``): an hour's step back does not hold a chat for the hour, and a step
forward does not empty the bot's window or a chat's. The logs and pauses keep no lifetime on the
server (its expiry follows its stepped clock); a chat's log is forgotten a window after its last
entry, on the limiter's clock. Only a chat's reservation expires by the server clock: a step
forward ends it early, and its entry stays in the logs (one more than was sent, always safe).

A slot holds as long as its send reaches Telegram within the margin: the worker hands back one
whose answer came later than that (``steps.slot_missed``), and the limiter places it again.
"""

from __future__ import annotations

import attrs
import trio

from codemojex.keys import queue_app_keys
from codemojex.notify.notifier import NOTIFY_QUEUE
from codemojex.stats import added
from codemojex.store import script
from codemojex.telegram.limits import Limits
from echomq_trio import Bus
from echomq_trio.clock import Witness

__all__ = ["DEFAULT_MARGIN_MS", "LimiterStats", "RateLimiter", "Take"]

DEFAULT_MARGIN_MS = 30


@attrs.frozen
class Take:
    ok: bool
    wait_ms: int = 0
    blocked_by: str = ""  # 'global', 'chat', 'paused' or 'booked' (a send booked) when not ok
    # The send's entry in the logs (ok or 'booked'): for ``sent`` once the send has its answer,
    # and for ``take(booking=...)`` when a booking is refined or a slot is handed back late.
    entry: str = ""
    ask_ms: int = 0  # with 'booked': ask again (``booking=entry``) after this many ms (0: never)


@attrs.frozen
class LimiterStats:
    """What this limiter has answered since it was made: sends taken, denials by reason (with
    the waits they handed out), and pauses by the scope paused."""

    taken: int = 0  # sends taken now or booked
    refined: int = 0  # slots passed back and moved (brought forward, or late and re-placed)
    confirmed: int = 0  # sends stamped with their answer's time
    denied_global: int = 0  # the bot's window was full (the chat got a reserved slot)
    denied_chat: int = 0  # the chat's own window was full
    denied_paused: int = 0  # a pause after a 429 was on
    denied_wait_ms: int = 0  # the waits handed out with the denials, summed
    paused_global: int = 0
    paused_chat: int = 0


# Constant maps from the scripts' answers to LimiterStats' counters: the statistics are a fixed
# set of counters, nothing per chat.
_DENIED = {"global": "denied_global", "chat": "denied_chat", "paused": "denied_paused"}
_PAUSED = {"global": "paused_global", "chat": "paused_chat"}


class RateLimiter:
    """One budget for every process using the same server and ``tag``."""

    def __init__(
        self,
        bus: Bus,
        limits: Limits = Limits(),
        *,
        tag: str = NOTIFY_QUEUE,
        margin_ms: int = DEFAULT_MARGIN_MS,
    ) -> None:
        if margin_ms < 0:
            raise ValueError("margin_ms must be >= 0")
        self.bus = bus
        self.limits = limits
        self.margin_ms = margin_ms
        k = queue_app_keys(tag)  # checks the tag
        self.prefix = k.rate_prefix
        self.global_window = k.rate_global  # the bot's send log (the scripts' KEYS[1])
        self._outage = k.rate_pause_outage
        # KEYS of every limiter script (codemojex.store.SCRIPTS names them), among them the
        # queue's meta, where a step of the server clock is recorded (the limiter keeps a clock
        # of its own that steps do not move)
        self._keys = [k.rate_global, bus.keys(tag).meta, k.rate_clock, k.rate_pause_global,
                      k.rate_pause_outage, k.rate_paused, k.rate_chats, k.rate_seq,
                      k.rate_chat_stem, k.rate_reserved_stem]  # fmt: skip
        self._witness = Witness()  # this limiter's evidence of the server clock (echomq_trio.clock)
        self._stats = LimiterStats()

    def statistics(self) -> LimiterStats:
        return self._stats

    async def take(self, chat: int, *, book_ms: int = 0, booking: str = "") -> Take:
        """Take one send for ``chat`` now, or learn how long to wait. With ``book_ms``, a send
        the bot's window has room for within that many ms is booked: the answer is
        ``blocked_by='booked'`` and ``wait_ms`` until the slot, and the caller sends then
        without taking again (see ``rate_take.lua``), unless ``ask_ms`` says to ask again
        first: then it passes the booking back (``booking=Take.entry``) after ``ask_ms`` and the
        slot is refined (brought forward as far as the sends before it allow, never later). A
        caller that wakes for its slot later than half the margin, or whose answer (a send taken
        now or a booking) took longer than the margin to come, passes its entry back too, and
        the limiter decides, as for a late reservation."""
        chat = _chat(chat)
        window = self.limits.for_chat(chat)
        sent_at = trio.current_time()
        got = await _TAKE.run(
            self.bus,
            self._keys,
            [
                str(chat),
                str(self.limits.global_.limit),
                str(self.limits.global_.window_ms),
                str(window.limit),
                str(window.window_ms),
                str(self.margin_ms),
                str(book_ms),
                booking,
                *self._witness.args(sent_at),
            ],
        )
        self._witness.observe(int(got["now"]), sent_at, trio.current_time())
        take = _take(got)
        if take.ok or take.blocked_by == "booked":
            if not booking:
                self._stats = added(self._stats, taken=1)
            elif take.entry != booking:  # the same send, its slot moved
                self._stats = added(self._stats, refined=1)
        elif take.blocked_by in _DENIED:
            self._stats = added(self._stats, **{_DENIED[take.blocked_by]: 1},
                                denied_wait_ms=take.wait_ms)  # fmt: skip
        return take

    async def sent(self, chat: int, entry: str) -> bool:
        """The send taken as ``entry`` (``Take.entry``) has Telegram's answer: stamp its entry
        with now, less the margin, so its window counts from the answer. Call it for every
        answer Telegram gave (any status), not for a request that got none. ``False`` when the
        entry had already left the logs."""
        if not entry:
            raise ValueError("entry must be a Take.entry")
        window = self.limits.for_chat(_chat(chat))
        got = await _SENT.run(
            self.bus,
            self._keys,
            [
                str(chat),
                entry,
                str(self.margin_ms),
                str(self.limits.global_.window_ms),
                str(window.window_ms),
                *self._witness.args(trio.current_time()),
            ],
        )
        self._stats = added(self._stats, confirmed=1)
        return int(got["held"]) > 0

    async def pause(self, scope: str, chat: int, ms: int) -> tuple[str, int]:
        """Pause ``scope`` (``'chat'``, ``'global'``, ``'auto'``, or ``'outage'``: every chat,
        apart from a 429's pause, see ``hold_outage``) for ``ms``; returns the scope paused and
        the pause's end (server ms)."""
        if scope not in ("chat", "global", "auto", "outage"):
            raise ValueError(f"scope must be chat, global, auto or outage, got {scope!r}")
        if not isinstance(ms, int) or ms < 1:
            raise ValueError(f"ms must be a positive int, got {ms!r}")
        got = await _PAUSE.run(
            self.bus,
            self._keys,
            [
                scope,
                str(_chat(chat)),
                str(ms),
                str(self.limits.global_.limit),
                str(self.limits.global_.window_ms),
                str(self.margin_ms),
                *self._witness.args(trio.current_time()),
            ],
        )
        paused = got["scope"]
        if paused in _PAUSED:
            self._stats = added(self._stats, **{_PAUSED[paused]: 1})
        return paused, int(got["until_ms"])

    async def hold_outage(self, ms: int) -> int:
        """Telegram answers nobody: every process sharing this budget holds its sends for ``ms``
        (extending, never shortening, a hold already on); returns its end (server ms). The
        process that probes extends it while the probes fail and calls ``end_outage`` when one
        succeeds; if that process dies, the hold runs out by itself."""
        _, until = await self.pause("outage", 0, ms)
        return until

    async def end_outage(self) -> None:
        """Telegram answers again: every process may send (a 429's pause stays)."""
        await self.bus.command("DEL", self._outage)


_TAKE, _SENT, _PAUSE = script("rate_take"), script("rate_sent"), script("rate_pause")


def _take(got: dict[str, str]) -> Take:
    """``rate_take``'s answer by name: ``taken``, ``booked``, or the window or pause that holds
    the send (``global``, ``chat``, ``paused``)."""
    outcome = got["outcome"]
    if outcome == "taken":
        return Take(True, entry=got["entry"])
    if outcome == "booked":
        return Take(False, int(got["wait_ms"]), "booked", got["entry"], int(got["ask_ms"]))
    if outcome in _DENIED:
        return Take(False, int(got["wait_ms"]), outcome)
    raise ValueError(f"rate_take answered {outcome!r}")


def _chat(chat: object) -> int:
    if isinstance(chat, bool) or not isinstance(chat, int):
        raise ValueError(f"chat id must be an int, got {chat!r}")
    return chat
