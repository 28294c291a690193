"""The queue's events stream: a capped Redis stream (``QueueKeys.events``) that the transition
scripts append to (enqueued, scheduled, claimed, acked, retried, deferred, dead, released,
reaped, replayed, discarded, fired, paused, resumed, registered, cancelled, deleted,
deleted_many; a whole queue's queue_paused, queue_resumed, queue_limit; and progress: a job's
latest progress, at most one per job per consumer's ``progress_interval_s``), in the same atomic
step as the transition. Read it from a point, follow it, or share it out with a consumer group.
It is capped at about 10,000 entries; a reader that falls further behind misses the oldest.

Every function takes ``stream`` (default ``"events"``): the queue's other stream, ``"audit"``,
is read the same way (``echomq_trio.audit`` reads it as typed records). Names, counts and stream
ids (``<ms>`` or ``<ms>-<seq>``) are checked before any I/O. Read-only calls change nothing
when cancelled; ``create_group`` and ``ack`` are idempotent (call again).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

import attrs
import trio

from echomq_trio import protocol
from echomq_trio._checks import check_stream_id
from echomq_trio._replies import as_text
from echomq_trio.bus import Bus
from echomq_trio.errors import ServerError
from echomq_trio.protocol import StreamEntry

__all__ = [
    "Event",
    "ack",
    "autoclaim",
    "create_group",
    "follow",
    "last_id",
    "read",
    "read_group",
]


@attrs.frozen
class Event:
    """One stream entry: ``kind`` (``e``), ``subject`` (``id``: a job id, lane or repeat name),
    and the rest of its fields."""

    stream_id: str
    kind: str
    subject: str
    fields: Mapping[str, str]

    @property
    def time_ms(self) -> int:
        """Server time of the entry (the first part of its stream id)."""
        return int(self.stream_id.split("-", 1)[0])


def _events(entries: Sequence[StreamEntry]) -> list[Event]:
    out = []
    for entry in entries:
        fields = {name: as_text(value) for name, value in entry.fields.items()}
        kind = fields.pop("e", "")
        subject = fields.pop("id", "")
        out.append(Event(entry.stream_id, kind, subject, fields))
    return out


def _key(bus: Bus, queue: str, stream: str) -> str:
    return bus.keys(queue).stream(stream)


async def read(
    bus: Bus, queue: str, after: str = "-", count: int = 100, *, stream: str = "events"
) -> list[Event]:
    """Up to ``count`` entries after stream id ``after`` (exclusive; ``"-"`` from the start)."""
    raw = await bus.transport.command(
        *protocol.range_command(_key(bus, queue, stream), after, count)
    )
    return _events(protocol.stream_entries(raw))


async def last_id(bus: Bus, queue: str, *, stream: str = "events") -> str:
    """The id of the newest entry, or ``"0-0"`` for an empty stream."""
    raw = await bus.transport.command(*protocol.last_id_command(_key(bus, queue, stream)))
    entries = protocol.stream_entries(raw)
    return entries[0].stream_id if entries else "0-0"


async def follow(
    bus: Bus, queue: str, after: str | None = None, *, poll_s: float = 0.2, stream: str = "events"
) -> AsyncIterator[Event]:
    """Yield entries as they arrive, from after ``after`` (default: from now on). Polls every
    ``poll_s`` while idle (a plain cancellable sleep, no blocked connection). A malformed
    ``after`` raises ``ValueError`` on the first iteration, before any I/O."""
    if after is not None:
        check_stream_id("after", after, ("-",))
    cursor = await last_id(bus, queue, stream=stream) if after is None else after
    while True:
        batch = await read(bus, queue, cursor, 500, stream=stream)
        for event in batch:
            yield event
        if batch:
            cursor = batch[-1].stream_id
        else:
            await trio.sleep(poll_s)


async def create_group(
    bus: Bus, queue: str, group: str, start: str = "0", *, stream: str = "events"
) -> bool:
    """Create a consumer group reading from ``start`` (``"0"``: everything kept, ``"$"``: new
    entries only, or a stream id); ``False`` if it exists already. Creates the stream if needed."""
    command = protocol.create_group_command(_key(bus, queue, stream), group, start)
    try:
        await bus.transport.command(*command)
    except ServerError as exc:
        if "BUSYGROUP" in str(exc):
            return False
        raise
    return True


async def read_group(
    bus: Bus,
    queue: str,
    group: str,
    consumer: str,
    count: int = 100,
    *,
    pending: bool = False,
    stream: str = "events",
) -> list[Event]:
    """Entries for ``consumer`` in ``group``: new ones, or with ``pending=True`` the ones it was
    given before and has not acked (read those first after a restart)."""
    command = protocol.read_group_command(
        _key(bus, queue, stream), group, consumer, count, pending=pending
    )
    return _events(protocol.read_group_entries(await bus.transport.command(*command)))


async def ack(
    bus: Bus, queue: str, group: str, stream_ids: Sequence[str], *, stream: str = "events"
) -> int:
    """Acknowledge entries for ``group``; returns how many were pending."""
    command = protocol.stream_ack_command(_key(bus, queue, stream), group, stream_ids)
    if not command:
        return 0
    return int(await bus.transport.command(*command))


async def autoclaim(
    bus: Bus,
    queue: str,
    group: str,
    consumer: str,
    min_idle_ms: int,
    count: int = 100,
    *,
    stream: str = "events",
) -> list[Event]:
    """Take over entries another consumer of ``group`` was given but has not acked for
    ``min_idle_ms`` (it crashed); they now belong to ``consumer``."""
    command = protocol.autoclaim_command(
        _key(bus, queue, stream), group, consumer, min_idle_ms, count
    )
    return _events(protocol.autoclaim_entries(await bus.transport.command(*command)))
