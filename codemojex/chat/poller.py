"""``Poller``: read Telegram's updates with long polling and admit them to the bus.

Theory of operation: Telegram keeps each update until a ``getUpdates`` call names a higher
``offset`` (it is then confirmed and forgotten). The poller asks with the offset one past the
last update it has put on the bus, and only after every update of the answer is on the bus
(``intake.admit``) does it move that offset on, so the confirmation always follows the
admission. A crash in between (kill -9) loses nothing: the next start asks without an offset,
Telegram answers the unconfirmed updates again, and the bus answers ``DUPLICATE`` for those it
holds (the update id is the idempotency key), so each is handled once.

Errors: a 409 Conflict (another poller runs with this token, or a webhook is set) and a 401
or 404 (a wrong token) stop the poller with ``TelegramRefused``, one line naming the cause; a
429 waits its ``retry_after``; network trouble, 5xx and a bus that is away are tried again
with ``backoff.reconnect_delay_s``. Cancellation: a cancelled poll confirms nothing, so the
updates of its answer come again at the next start.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs
import httpx
import trio

from codemojex.chat.intake import ALLOWED_UPDATES, UPDATES_QUEUE, admit
from codemojex.stats import added
from codemojex.telegram.bot import TelegramBot
from echomq_trio import Bus, BusError, Outcome, ids
from echomq_trio.backoff import reconnect_delay_s

__all__ = ["POLL_TIMEOUT_S", "Poller", "PollerStats", "TelegramRefused", "refusal"]

log = logging.getLogger("codemojex.chat.poller")

POLL_TIMEOUT_S = 30  # how long Telegram holds a getUpdates call open when it has nothing
POLL_LIMIT = 100  # updates per answer (Telegram's most)


class TelegramRefused(RuntimeError):
    """Telegram refuses what the bot asks (polling, a webhook, its identity); the message is
    one line naming the cause and what to do."""


@attrs.frozen
class PollerStats:
    polls: int = 0
    admitted: int = 0
    duplicates: int = 0  # updates the bus held already (answered again after a crash)
    skipped: int = 0  # updates of no chat: nothing for the game
    errors: int = 0  # polls or admissions tried again


def refusal(status: int, body: object) -> str | None:
    """The one-line reason to stop polling for Telegram's answer, or ``None`` to go on (pure)."""
    description = body.get("description", "") if isinstance(body, Mapping) else ""
    if status == 409:
        if "webhook" in str(description).lower():
            return (
                "Telegram refused getUpdates (409 Conflict): a webhook is set for this bot. "
                "Run with --updates webhook, or delete the webhook (Bot API deleteWebhook) to poll"
            )
        return (
            "Telegram refused getUpdates (409 Conflict): another process is polling with this "
            "bot token; stop it (only one poller per bot)"
        )
    if status in (401, 404):
        return f"Telegram refused getUpdates ({status}): the bot token is wrong or revoked"
    return None


class Poller:
    """Run with ``nursery.start(poller.run)``; cancel to stop. ``bot`` needs an HTTP timeout
    longer than ``timeout_s`` (``open_bot(..., timeout_s=timeout_s + 15)``)."""

    def __init__(
        self,
        bus: Bus,
        bot: TelegramBot,
        bot_id: int,
        *,
        queue: str = UPDATES_QUEUE,
        timeout_s: int = POLL_TIMEOUT_S,
    ) -> None:
        self.bus = bus
        self.bot = bot
        self.bot_id = bot_id
        self.queue = queue
        self.timeout_s = timeout_s
        self.offset: int | None = None  # one past the last update on the bus
        self._stats = PollerStats()
        self._failing_since: float | None = None  # a spell of failed polls (told once)

    def statistics(self) -> PollerStats:
        return self._stats

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        failures = 0
        while True:
            updates = await self._poll()
            if updates is None:
                failures += 1
                await trio.sleep(reconnect_delay_s(failures))
                continue
            failures = 0
            if self._failing_since is not None:
                log.info("getUpdates answers again, after %.0f s of failed polls",
                         trio.current_time() - self._failing_since)  # fmt: skip
                self._failing_since = None
            # All at once (an admission that waits for the disk waits about a second: the batch
            # shares it), with ids minted here in Telegram's order, so each chat's lane keeps it.
            async with trio.open_nursery() as nursery:
                for update in updates:
                    nursery.start_soon(self._admit, update, ids.generate("JOB"))
            if updates:
                self.offset = max(int(u["update_id"]) for u in updates) + 1

    async def _poll(self) -> list[Mapping[str, Any]] | None:
        params: dict[str, Any] = {
            "timeout": self.timeout_s,
            "limit": POLL_LIMIT,
            "allowed_updates": list(ALLOWED_UPDATES),
        }
        if self.offset is not None:
            params["offset"] = self.offset
        try:
            status, body = await self.bot.call("getUpdates", params)
        except httpx.HTTPError as exc:
            self._failed(f"getUpdates failed: {self.bot.redact(repr(exc))}")
            return None
        self._stats = added(self._stats, polls=1)
        reason = refusal(status, body)
        if reason is not None:
            raise TelegramRefused(reason)
        if status == 429 and isinstance(body, Mapping):
            wait = (body.get("parameters") or {}).get("retry_after", 1)
            await trio.sleep(max(float(wait), 1.0))
            return []
        if status != 200 or not isinstance(body, Mapping) or not body.get("ok"):
            self._failed(f"getUpdates answered {status}: {body!r}")
            return None
        result = body.get("result")
        if not isinstance(result, list):
            self._failed(f"getUpdates answered no list: {body!r}")
            return None
        return [u for u in result if isinstance(u, Mapping) and _is_id(u.get("update_id"))]

    def _failed(self, text: str) -> None:
        """Count a failure; the first of a spell is a warning, the others (until a poll answers
        again) are debug lines: an outage of Telegram is one line, not one per retry."""
        self._stats = added(self._stats, errors=1)
        first = self._failing_since is None
        if first:
            self._failing_since = trio.current_time()
        log.log(logging.WARNING if first else logging.DEBUG, "%s; trying again", text)

    async def _admit(self, update: Mapping[str, Any], job_id: str) -> None:
        failures = 0
        while True:
            try:
                out = await admit(self.bus, update, self.bot_id, queue=self.queue, job_id=job_id)
            except ValueError as exc:  # not an update: nothing to admit
                log.warning("skipped a malformed update: %s", exc)
                out = None
            except BusError as exc:  # the server restarting: the offset waits for it
                failures += 1
                self._failed(f"admitting update {update.get('update_id')}: {exc}")
                await trio.sleep(reconnect_delay_s(failures))
                continue
            if out is None:
                self._stats = added(self._stats, skipped=1)
            elif out == Outcome.DUPLICATE:
                self._stats = added(self._stats, duplicates=1)
            else:
                self._stats = added(self._stats, admitted=1)
            return


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
