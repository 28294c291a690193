"""The queue's events stream: a capped Redis stream ``emq:{q}:events`` that the transition
scripts append to (enqueued, scheduled, claimed, acked, retried, deferred, dead, released,
reaped, replayed, fired, paused, resumed, registered, cancelled), in the same atomic step as the
transition. Read it from a point, follow it, or share it out with a consumer group for an audit.
It is capped at about 10,000 entries; a reader that falls further behind misses the oldest.

Every function takes ``stream`` (default ``"events"``): the suffix of another stream of the
queue, ``emq:{q}:<stream>``, read the same way. Names, counts and stream ids (``<ms>`` or
``<ms>-<seq>``) are checked before any I/O.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs
import trio

from echomq_trio.bus import Bus
from echomq_trio.errors import ServerError
from echomq_trio.keys import as_text, check_int, check_ms, check_name, check_stream_id

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


def _entries(raw: Any) -> list[Event]:
    # RESP3 through the client: {stream_id: [[field, value], ...]} (or a list of pairs).
    out: list[Event] = []
    if not raw:
        return out
    items = raw.items() if isinstance(raw, dict) else raw
    for stream_id, pairs in items:
        if pairs is None:
            continue  # an entry deleted by trimming while pending
        fields: dict[str, str] = {}
        flat = pairs if pairs and not isinstance(pairs[0], list) else [x for p in pairs for x in p]
        for i in range(0, len(flat), 2):
            fields[as_text(flat[i])] = as_text(flat[i + 1])
        kind = fields.pop("e", "")
        subject = fields.pop("id", "")
        out.append(Event(as_text(stream_id), kind, subject, fields))
    return out


def _key(bus: Bus, queue: str, stream: str) -> str:
    return bus.keys(queue).prefix + check_name("stream", stream)


async def read(
    bus: Bus, queue: str, after: str = "-", count: int = 100, *, stream: str = "events"
) -> list[Event]:
    """Up to ``count`` entries after stream id ``after`` (exclusive; ``"-"`` from the start)."""
    key = _key(bus, queue, stream)
    check_stream_id("after", after, ("-",))
    start = after if after == "-" else "(" + after
    raw = await bus.wire.command(
        "XRANGE", key, start, "+", "COUNT", str(check_int("count", count, 1))
    )
    return _entries(raw)


async def last_id(bus: Bus, queue: str, *, stream: str = "events") -> str:
    """The id of the newest entry, or ``"0-0"`` for an empty stream."""
    raw = await bus.wire.command("XREVRANGE", _key(bus, queue, stream), "+", "-", "COUNT", "1")
    events = _entries(raw)
    return events[0].stream_id if events else "0-0"


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
    key, name = _key(bus, queue, stream), check_name("group", group)
    check_stream_id("start", start, ("$",))
    try:
        await bus.wire.command("XGROUP", "CREATE", key, name, start, "MKSTREAM")
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
    raw = await bus.wire.command(
        "XREADGROUP", "GROUP", check_name("group", group), check_name("consumer", consumer),
        "COUNT", str(check_int("count", count, 1)), "STREAMS", _key(bus, queue, stream),
        "0" if pending else ">",
    )  # fmt: skip
    if not raw:
        return []
    (entries,) = raw.values() if isinstance(raw, dict) else [raw[0][1]]
    return _entries(entries)


async def ack(
    bus: Bus, queue: str, group: str, stream_ids: Sequence[str], *, stream: str = "events"
) -> int:
    """Acknowledge entries for ``group``; returns how many were pending."""
    key, name = _key(bus, queue, stream), check_name("group", group)
    if isinstance(stream_ids, str):
        raise TypeError("stream_ids must be a sequence of stream ids, not one str")
    checked = [check_stream_id("stream id", i) for i in stream_ids]
    if not checked:
        return 0
    return int(await bus.wire.command("XACK", key, name, *checked))


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
    raw = await bus.wire.command(
        "XAUTOCLAIM", _key(bus, queue, stream), check_name("group", group),
        check_name("consumer", consumer), str(check_ms("min_idle_ms", min_idle_ms)), "0-0",
        "COUNT", str(check_int("count", count, 1)),
    )  # fmt: skip
    return _entries(raw[1])
