"""The daily standings digest: a recurring schedule on ``cm.game`` (``register_digest``) whose
occurrences ``send_digest`` turns into one top-10 notice per room; ``game_handler`` is the
handler of ``cm.game`` jobs.

A digest reports one day's board (``board.day_board``): the UTC day before the one its
occurrence fired in (the occurrence job id's mint time, so a retried occurrence reports the same
day), the last complete day. A new registration first fires ``days.DIGEST_AFTER_MIDNIGHT_MS``
after the next UTC midnight (server clock), so each day is reported once, just after it ends.

The fan-out is idempotent: each room's notice carries the idempotency key
``digest:<occurrence job id>:<room>``, so when the occurrence is retried the rooms already
admitted answer duplicate and only the rest go. Rooms go independently: one that fails is
logged and the others still go.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from codemojex.game import board
from codemojex.game.days import day_label, digest_day, next_digest_in_ms
from codemojex.game.rooms import Room, get_room, list_room_ids, player_names
from codemojex.game.rounds import standings_text
from codemojex.game.rules import DAY_MS, TOP_N
from codemojex.game.texts import Text
from codemojex.keys import QUEUES
from codemojex.notify import notifier
from codemojex.store import server_time_ms
from echomq_trio import Bury, Bus, BusError, Job, ids, repeat
from echomq_trio.repeat import Registered

__all__ = [
    "DIGEST_NAME",
    "GAME_QUEUE",
    "DigestIncomplete",
    "Notify",
    "digest_text",
    "game_handler",
    "register_digest",
    "send_digest",
]

GAME_QUEUE = QUEUES["game"]
ROOMS_AT_ONCE = 32  # the digest's notices admitted at once
DIGEST_NAME = "daily-standings"

log = logging.getLogger(__name__)


class DigestIncomplete(Exception):
    """Some rooms' digest notices failed for a reason that may pass (the server, the network).
    The other rooms went; raised so the occurrence is retried, which sends only the rest."""


class Notify(Protocol):
    """What the game sends notices with: ``codemojex.notify.notify`` (a seam for tests)."""

    async def __call__(
        self,
        bus: Bus,
        chat: int,
        text: str,
        opts: dict[str, Any] | None = None,
        *,
        key: str | None = None,
    ) -> str | None: ...


async def digest_text(bus: Bus, room: Room, day: int) -> Text:
    """The room's standings of ``day`` (its day board's top 10), as HTML."""
    standings = await board.top(bus, board.day_board(room.id, day), TOP_N)
    names = await player_names(bus, [s.player for s in standings])
    title = f"Daily standings, {room.title} ({day_label(day)} UTC)"
    return standings_text(title, standings, names)


async def send_digest(bus: Bus, occurrence: str, *, notify: Notify = notifier.notify) -> int:
    """Send every room its top 10 of the day before ``occurrence`` fired (``occurrence`` is the
    occurrence's job id; see the module's docstring) through the notification pipeline; returns
    how many rooms' notices are admitted (now or by an earlier attempt of the occurrence, whose
    key makes this one a duplicate).

    Each room goes on its own: a room whose notice is invalid (``ValueError``, which includes a
    ``GameError``) is logged and skipped for good; any other failure is logged, the other rooms
    still go, and ``DigestIncomplete`` is raised at the end so the occurrence is retried."""
    day = digest_day(ids.timestamp_ms(occurrence))
    room_ids = await list_room_ids(bus)
    admitted = 0
    failed: list[str] = []
    rooms = iter(room_ids)

    async def send_rooms() -> None:
        nonlocal admitted
        for room_id in rooms:  # shared: each room is taken by one sender
            try:
                room = await get_room(bus, room_id)
                text = await digest_text(bus, room, day)
                key = f"digest:{occurrence}:{room_id}"
                await notify(bus, room.chat, text.body, text.opts(), key=key)
                admitted += 1
            except ValueError as exc:
                log.warning("digest %s: room %s skipped, its notice is invalid: %s",
                            occurrence, room_id, exc)  # fmt: skip
            except BusError as exc:
                log.warning("digest %s: room %s failed, to be retried: %s",
                            occurrence, room_id, exc)  # fmt: skip
                failed.append(room_id)
            except Exception:
                log.exception("digest %s: room %s failed, to be retried", occurrence, room_id)
                failed.append(room_id)

    # Rooms ROOMS_AT_ONCE at a time: an admission that waits for the disk (durability OnDisk)
    # waits for a sync of the server's file, which the rooms in flight then share.
    async with trio.open_nursery() as nursery:
        for _ in range(ROOMS_AT_ONCE):
            nursery.start_soon(send_rooms)
    if failed:
        raise DigestIncomplete(
            f"digest {occurrence}: {len(failed)} of {len(room_ids)} rooms failed "
            f"({', '.join(failed)}); the others were sent"
        )
    return admitted


async def register_digest(
    bus: Bus, *, every_ms: int = DAY_MS, first_in_ms: int | None = None
) -> tuple[Registered, int]:
    """Register the daily digest on ``cm.game`` (idempotent: a live registration is kept). With
    no ``first_in_ms`` it first fires ``DIGEST_AFTER_MIDNIGHT_MS`` after the next UTC midnight
    of the server's clock."""
    first = next_digest_in_ms(await server_time_ms(bus)) if first_in_ms is None else first_in_ms
    return await repeat.register(bus, GAME_QUEUE, DIGEST_NAME, every_ms, "digest", first)


def game_handler(
    bus: Bus, *, notify: Notify = notifier.notify
) -> Callable[[Job], Awaitable[Bury | None]]:
    """The handler of ``cm.game`` jobs: ``digest`` occurrences send the standings digest (a
    ``DigestIncomplete`` raised for rooms that failed makes the consumer retry the job)."""

    async def handle(job: Job) -> Bury | None:
        if job.payload == b"digest":
            await send_digest(bus, job.id, notify=notify)
            return None
        return Bury(f"unknown game job {job.payload[:40]!r}")

    return handle
