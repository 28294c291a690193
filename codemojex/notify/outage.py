"""``OutageGate``: the worker's global pause while Telegram does not answer the bot, and its
watch for requests that get no answer at all.

A chat task whose send got a 5xx, no answer, or an answer that is not the Bot API's asks
``getMe`` (``TelegramBot.reachable``); when that fails too, the trouble is the bot's, not the
notice's, and it closes the gate. While the gate is closed the claimer claims nothing and every
chat task waits at the gate before its next send, holding its notice (the lease renewed, no
attempt spent). ``run`` probes ``getMe`` with capped exponential backoff and full jitter
(``PROBE_BACKOFF``) and opens the gate on the first answer; the held notices are then sent
again. Cancelling ``run`` (shutdown) leaves the gate as it is; the chat tasks waiting at it are
cancelled with the worker and their notices go back.

``run`` also watches the bot's requests in flight (``TelegramBot.unanswered``): one that has had
no answer for ``hang_after_s`` is an outage too, before any timeout says so. Either way the gate
keeps one ``Trouble`` per outage (``codemojex.notify.health``, pure): one warning when it begins,
one info line when answers come back with how long it lasted, one count by cause
(``statistics()``); the summary line and the metrics show the outage while it lasts.

With ``shared`` (the worker's ``RateLimiter``), the outage is every process's: while the gate is
closed, ``run`` holds the shared budget (``hold_outage``) until a little after its next probe
has its answer or has given up on one (the bot's ``timeout_s``), so the other processes' chat
tasks get a pause from the limiter instead of sending into the outage, and it ends the hold
when a probe succeeds. If this process dies, the hold runs out by itself and another process
finds the outage again. A failure to reach the server for the hold is logged; the gate works
locally all the same.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from typing import Protocol

import attrs
import trio

from codemojex.notify import health
from codemojex.notify.health import Trouble
from codemojex.stats import added
from codemojex.telegram.bot import Answer, InFlight
from codemojex.telegram.classify import CAUSES
from echomq_trio.backoff import Exponential, Jitter, Policy, delay_ms
from echomq_trio.errors import BusError

__all__ = [
    "DEFAULT_HANG_AFTER_S",
    "HOLD_SLACK_MS",
    "PROBE_BACKOFF",
    "OutageGate",
    "OutageStats",
    "SharedHold",
    "log_to_stderr",
]

log = logging.getLogger("codemojex.notify.outage")

PROBE_BACKOFF: Policy = Jitter(Exponential(500, 15_000))


# How long the shared hold outlasts the next probe's answer (or the bot's timeout): the hold's
# own round trip, and some.
HOLD_SLACK_MS = 2_000
# A request unanswered this long is an outage. Telegram answers in well under a second; the
# bot's client gives up at 10 s (``open_bot``), and a hang must show before that.
DEFAULT_HANG_AFTER_S = 5.0
WATCH_EVERY_S = 0.5  # at most this long between two looks at the requests in flight


@attrs.frozen
class OutageStats:
    """The outages this process saw (a snapshot): how many began, by cause
    (``codemojex.telegram.classify.CAUSES``), the probes sent, and the outage now, if any."""

    outages: int = 0
    server_error: int = 0
    no_answer: int = 0
    not_bot_api: int = 0
    unanswered: int = 0
    probes: int = 0
    trouble: Trouble | None = None


class Bot(Protocol):
    timeout_s: float  # the longest a probe waits for its answer

    async def reachable(self) -> bool: ...

    def unanswered(self) -> InFlight | None: ...

    @property
    def last_answer(self) -> Answer | None: ...


class SharedHold(Protocol):
    async def hold_outage(self, ms: int) -> int: ...

    async def end_outage(self) -> None: ...


class OutageGate:
    def __init__(
        self,
        bot: Bot,
        *,
        backoff: Policy = PROBE_BACKOFF,
        rng: random.Random | None = None,
        shared: SharedHold | None = None,
        hang_after_s: float = DEFAULT_HANG_AFTER_S,
    ) -> None:
        if not hang_after_s > 0:
            raise ValueError(f"hang_after_s must be positive, got {hang_after_s!r}")
        self._bot = bot
        self._shared = shared
        self._backoff = backoff
        self._rng = rng or random.Random()
        self.hang_after_s = hang_after_s
        self._open = trio.Event()
        self._open.set()
        self._closed = trio.Event()
        self._stats = OutageStats()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    @property
    def reason(self) -> str:
        """What the outage now is about ("" when there is none)."""
        trouble = self._stats.trouble
        return "" if trouble is None else trouble.what

    @property
    def probes(self) -> int:
        return self._stats.probes

    def statistics(self) -> OutageStats:
        return self._stats

    def close(self, reason: str, cause: str = "server_error") -> bool:
        """A probe failed after a send failed for ``reason`` (``cause``, one of
        ``codemojex.telegram.classify.CAUSES``): close the gate (``True`` if it was open). The
        outage is logged when it begins, here or earlier by the watch, not at each close."""
        if cause not in CAUSES:
            raise ValueError(f"cause must be one of {CAUSES}, got {cause!r}")
        if not self._open.is_set():
            return False
        trouble = self._stats.trouble
        now = trio.current_time()
        closed = health.paused(trouble, reason, cause, now, time.time_ns() // 1_000_000)
        if trouble is None:
            self._begin(closed, now)
        else:
            self._stats = attrs.evolve(self._stats, trouble=closed)
        self._open = trio.Event()
        self._closed.set()
        return True

    async def wait_open(self) -> None:
        await self._open.wait()

    async def run(self) -> None:
        """Probe while the gate is closed, and open it when Telegram answers; watch the requests
        in flight for a hang. Runs until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch)
            await self._probe_while_closed()

    def _begin(self, trouble: Trouble, now: float) -> None:
        log.warning("%s", health.began(trouble, now))
        self._stats = added(attrs.evolve(self._stats, trouble=trouble),
                            outages=1, **{trouble.cause: 1})  # fmt: skip

    def _end(self, now: float) -> None:
        trouble = self._stats.trouble
        if trouble is not None:
            log.info("%s", health.ended(trouble, now))
            self._stats = attrs.evolve(self._stats, trouble=None)

    async def _watch(self) -> None:
        """Look at the oldest request in flight every ``WATCH_EVERY_S`` at most: an outage
        begins when it has waited ``hang_after_s``; one that paused nothing ends when the Bot
        API answers promptly again (see ``codemojex.notify.health``)."""
        every = min(self.hang_after_s / 4, WATCH_EVERY_S)
        while True:
            await trio.sleep(every)
            now = trio.current_time()
            oldest = self._bot.unanswered()
            trouble = self._stats.trouble
            if trouble is None:
                hang = health.hanging(oldest, now, self.hang_after_s)
                if hang is not None:
                    self._begin(hang, now)
            elif health.hang_over(trouble, oldest, self._bot.last_answer, now, self.hang_after_s):
                self._end(now)

    async def _probe_while_closed(self) -> None:
        while True:
            await self._closed.wait()
            failures = 0
            while True:
                failures += 1
                delay = delay_ms(self._backoff, failures, self._rng)
                # Held until the probe has its answer, or has given up on one (a hang).
                await self._hold(delay + round(self._bot.timeout_s * 1000) + HOLD_SLACK_MS)
                await trio.sleep(delay / 1000)
                self._stats = added(self._stats, probes=1)
                if await self._bot.reachable():
                    break
            await self._end_hold()
            self._end(trio.current_time())
            self._closed = trio.Event()
            self._open.set()

    async def _hold(self, ms: int) -> None:
        if self._shared is None:
            return
        try:
            await self._shared.hold_outage(ms)
        except BusError as exc:
            log.warning("could not hold the other processes' sends during the outage: %s", exc)

    async def _end_hold(self) -> None:
        if self._shared is None:
            return
        try:
            await self._shared.end_outage()
        except BusError as exc:  # the hold runs out by itself
            log.warning("could not end the other processes' hold after the outage: %s", exc)


def log_to_stderr() -> None:
    """How the commands (``codemojex.run``, ``codemojex.notify``) log: on stderr, a line each
    with its time, level and part; warnings and errors of every part, and this module's info
    lines too (Telegram answers again, and how long the outage lasted)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    log.setLevel(logging.INFO)
