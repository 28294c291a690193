"""The daily standings digest: a recurring schedule on ``cm.game`` (``register_digest``) whose
occurrences ``send_digest`` turns into one top-10 notice per room; ``game_handler`` is the
handler of ``cm.game`` jobs.

It runs once a day at a local time in a time zone (``register_digest(bus, at="09:00",
tz="Europe/Berlin")``; the service's ``--digest-at`` and ``--digest-tz``): a cron schedule
(``echomq_trio.cron``), so it keeps its local time across daylight saving changes. By default
at 00:10 UTC, ``days.DIGEST_AFTER_MIDNIGHT_MS`` after a UTC midnight. A changed time or zone
replaces the registration at the next boot (one whose schedule is the same is left as it is).

A digest reports one day's board (``board.day_board``): the UTC day before the one its
occurrence fired in (the occurrence job id's mint time, so a retried occurrence reports the same
day), the last complete day, whatever the zone: boards are kept per UTC day. (A digest time in
the first minutes after a UTC midnight reports a day early if the firing host's clock is behind
the server's; the default keeps 10 minutes from it.)

The fan-out is idempotent: each room's notice carries the idempotency key
``digest:<occurrence job id>:<room>``, so when the occurrence is retried the rooms already
admitted answer duplicate and only the rest go. Rooms go independently: one that fails is
logged and the others still go.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from codemojex.game import board
from codemojex.game.days import day_label, digest_day
from codemojex.game.rooms import Room, get_room, list_room_ids, player_names
from codemojex.game.rounds import standings_text
from codemojex.game.rules import TOP_N
from codemojex.game.texts import Text
from codemojex.keys import QUEUES
from codemojex.notify import notifier
from echomq_trio import Bury, Bus, BusError, Job, ids, repeat
from echomq_trio.repeat import Registered

__all__ = [
    "DEFAULT_DIGEST_AT",
    "DEFAULT_DIGEST_TZ",
    "DIGEST_NAME",
    "GAME_QUEUE",
    "DigestIncomplete",
    "Notify",
    "digest_cron",
    "digest_text",
    "game_handler",
    "register_digest",
    "send_digest",
]

GAME_QUEUE = QUEUES["game"]
ROOMS_AT_ONCE = 32  # the digest's notices admitted at once
DIGEST_NAME = "daily-standings"
DEFAULT_DIGEST_AT = "00:10"  # local time (HH:MM), days.DIGEST_AFTER_MIDNIGHT_MS past midnight
DEFAULT_DIGEST_TZ = "UTC"

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


def digest_cron(at: str) -> str:
    """The cron expression of a daily time ``HH:MM`` (``"09:30"`` -> ``"30 9 * * *"``);
    ``ValueError`` for anything else."""
    m = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", at) if isinstance(at, str) else None
    if m is None:
        raise ValueError(f"a digest time is HH:MM, 00:00 to 23:59, got {at!r}")
    return f"{int(m[2])} {int(m[1])} * * *"


async def register_digest(
    bus: Bus,
    *,
    at: str = DEFAULT_DIGEST_AT,
    tz: str = DEFAULT_DIGEST_TZ,
    clock: repeat.Clock | None = None,
) -> tuple[Registered, int]:
    """Register the daily digest on ``cm.game`` at the local time ``at`` (``HH:MM``) in the zone
    ``tz``: idempotent (a live registration with this schedule is kept: ``EXISTS``), and one
    with another schedule (another time, zone, or the ``every_ms`` one of earlier versions) is
    replaced (``REPLACED``). ``clock`` is ``repeat.register``'s (for tests). ``ValueError`` for a
    bad time or zone, before any I/O."""
    return await repeat.register(
        bus, GAME_QUEUE, DIGEST_NAME, template="digest", cron=digest_cron(at), tz=tz,
        replace=True, clock=clock,
    )  # fmt: skip


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
