"""What a queue's ``meta`` says of partitions, and the counts of a whole partitioned queue: the
part of ``echomq_trio.partitions`` that readers of queues (``metrics``, the CLI) use without the
consumer and the metronome (``partitions`` imports those, and ``consumer`` imports ``metrics``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import attrs
import trio

from echomq_trio import jobs
from echomq_trio._partitioning import partition_names
from echomq_trio._replies import as_text
from echomq_trio.bus import Bus
from echomq_trio.results import Counts

__all__ = [
    "COUNT_FIELD",
    "INDEX_FIELD",
    "OF_FIELD",
    "Membership",
    "Meta",
    "each",
    "membership",
    "queue_counts",
    "read_meta",
    "sum_counts",
]

T = TypeVar("T")

# Fields of a partition's meta hash (keys.SCHEMA's meta).
COUNT_FIELD = "partitions"  # partition 0's: how many partitions the queue has
OF_FIELD = "partition_of"  # partition i > 0's: the queue it belongs to
INDEX_FIELD = "partition"  # partition i > 0's: its index


async def each(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run ``calls`` concurrently; their answers in order. The first error cancels the rest and
    is raised as itself, as the call of one partition raises it (the others' errors, when there
    are more, are its ``__cause__``); a cancellation is left as trio raises it, and wins over
    the errors of calls that failed as it came (the caller is stopping: its cancel scope takes
    the cancellation, and no failure escapes the scope)."""
    if len(calls) == 1:
        return [await calls[0]()]
    out: list[T | None] = [None] * len(calls)

    async def one(i: int) -> None:
        out[i] = await calls[i]()

    try:
        async with trio.open_nursery() as nursery:
            for i in range(len(calls)):
                nursery.start_soon(one, i)
    except BaseExceptionGroup as group:
        leaves = leaves_of(group)
        if all(isinstance(e, Exception) for e in leaves):
            raise leaves[0] from (group if len(leaves) > 1 else None)
        if all(isinstance(e, (Exception, trio.Cancelled)) for e in leaves):
            stop = group.subgroup(trio.Cancelled)  # stopping: the stop, not a failure
            raise (stop or group) from None
        raise  # an interrupt stays as trio raises it
    return out  # type: ignore[return-value]  # every slot is filled once the nursery is done


def leaves_of(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions in ``group``, its nested groups opened."""
    out: list[BaseException] = []
    for e in group.exceptions:
        out += leaves_of(e) if isinstance(e, BaseExceptionGroup) else [e]
    return out


Meta = tuple[int | None, str | None, int | None]  # a count, the queue of, an index


def _int(reply: object) -> int | None:
    return None if reply is None else int(as_text(reply))


async def read_meta(bus: Bus, queue: str) -> Meta:
    """``queue``'s meta: its partition count, the queue it is a partition of, and its index."""
    reply = await bus.command("HMGET", bus.keys(queue).meta, COUNT_FIELD, OF_FIELD, INDEX_FIELD)
    if not isinstance(reply, list) or len(reply) != 3:
        raise ValueError(f"HMGET answered {reply!r}, not three fields")
    count, of, index = reply
    return _int(count), None if of is None else as_text(of), _int(index)


def sum_counts(parts: Sequence[Counts]) -> Counts:
    """The counts of a queue made of ``parts`` (pure): every field added up, ``exists`` if any."""
    sums: dict[str, int | bool] = {}
    for field in attrs.fields(Counts):
        values = [getattr(c, field.name) for c in parts]
        sums[field.name] = any(values) if field.name == "exists" else sum(values)
    return Counts(**sums)  # type: ignore[arg-type]  # each field has its type


@attrs.frozen
class Membership:
    """What a queue's ``meta`` says of partitions (``membership``): ``partitions``, the count
    ``create`` recorded on a partitioned queue's partition 0 (``None``: none recorded, a plain
    queue), and on partition ``index`` > 0 of queue ``of``, those two."""

    partitions: int | None
    of: str | None
    index: int | None


async def membership(bus: Bus, queue: str) -> Membership:
    """Whether ``queue`` is a partitioned queue (``partitions``), a partition of one (``of``,
    ``index``), or neither: one ``HMGET`` of its ``meta``, for tools that list queues (``echomq
    queues`` folds each partition into its queue). Read only."""
    return Membership(*await read_meta(bus, queue))


async def queue_counts(bus: Bus, queue: str) -> Counts:
    """``jobs.counts`` of ``queue``, or of every partition of a partitioned queue, at once and
    added up (``sum_counts``). One more ``HMGET`` than ``jobs.counts``. Read only."""
    n = (await membership(bus, queue)).partitions or 1
    if n == 1:
        return await jobs.counts(bus, queue)
    return sum_counts(await each([_counter(bus, q) for q in partition_names(queue, n)]))


def _counter(bus: Bus, queue: str) -> Callable[[], Awaitable[Counts]]:
    return lambda: jobs.counts(bus, queue)
