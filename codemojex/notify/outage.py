"""``OutageGate``: the worker's global pause while Telegram does not answer the bot at all.

A chat task whose send got a 5xx or no answer asks ``getMe`` (``TelegramBot.reachable``); when
that fails too, the trouble is the bot's, not the notice's, and it closes the gate. While the
gate is closed the claimer claims nothing and every chat task waits at the gate before its next
send, holding its notice (the lease renewed, no attempt spent). ``run`` probes ``getMe`` with
capped exponential backoff and full jitter (``PROBE_BACKOFF``) and opens the gate on the first
answer; the held notices are then sent again. Cancelling ``run`` (shutdown) leaves the gate as it
is; the chat tasks waiting at it are cancelled with the worker and their notices go back.

With ``shared`` (the worker's ``RateLimiter``), the outage is every process's: while the gate is
closed, ``run`` holds the shared budget (``hold_outage``) until a little after its next probe,
so the other processes' chat tasks get a pause from the limiter instead of sending into the
outage, and it ends the hold when a probe succeeds. If this process dies, the hold runs out by
itself and another process finds the outage again. A failure to reach the server for the hold is
logged; the gate works locally all the same.
"""

from __future__ import annotations

import logging
import random
from typing import Protocol

import trio

from echomq_trio.backoff import Exponential, Jitter, Policy, delay_ms
from echomq_trio.errors import BusError

__all__ = ["HOLD_SLACK_MS", "PROBE_BACKOFF", "OutageGate", "SharedHold"]

log = logging.getLogger("codemojex.notify.outage")

PROBE_BACKOFF: Policy = Jitter(Exponential(500, 15_000))


# How long the shared hold outlasts the next probe: the probe's round trip and the hold's own.
HOLD_SLACK_MS = 2_000


class Probe(Protocol):
    async def reachable(self) -> bool: ...


class SharedHold(Protocol):
    async def hold_outage(self, ms: int) -> int: ...

    async def end_outage(self) -> None: ...


class OutageGate:
    def __init__(
        self,
        bot: Probe,
        *,
        backoff: Policy = PROBE_BACKOFF,
        rng: random.Random | None = None,
        shared: SharedHold | None = None,
    ) -> None:
        self._bot = bot
        self._shared = shared
        self._backoff = backoff
        self._rng = rng or random.Random()
        self._open = trio.Event()
        self._open.set()
        self._closed = trio.Event()
        self.reason = ""
        self.probes = 0

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def close(self, reason: str) -> bool:
        """Close the gate (``True`` if it was open: a new outage)."""
        if not self._open.is_set():
            return False
        log.warning("Telegram does not answer the bot (%s): sending paused until it does", reason)
        self.reason = reason
        self._open = trio.Event()
        self._closed.set()
        return True

    async def wait_open(self) -> None:
        await self._open.wait()

    async def run(self) -> None:
        """Probe while the gate is closed; open it when Telegram answers. Runs until cancelled."""
        while True:
            await self._closed.wait()
            failures = 0
            while True:
                failures += 1
                delay = delay_ms(self._backoff, failures, self._rng)
                await self._hold(delay + HOLD_SLACK_MS)
                await trio.sleep(delay / 1000)
                self.probes += 1
                if await self._bot.reachable():
                    break
            await self._end_hold()
            log.warning("Telegram answers the bot again after %d probes: sending resumed",
                        failures)  # fmt: skip
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
