"""The pure part of partitioned queues (``echomq_trio.partitions``): the partitions' names and
which partition a lane (or any routing key) belongs to. No I/O.

Names. Partition 0 is the queue itself; partition i > 0 is the queue named ``q~p<i>.<k>``, with
the least ``k`` (0, 1, 2...) that puts its hash slot in its share of the slots. The 16,384 slots
are cut into ``n`` equal ranges (range ``j`` is ``[j*16384//n, (j+1)*16384//n)``, the split
``server.form_cluster`` makes); partition 0's slot falls in some range ``r0``, and partition i
takes range ``(r0 + i) % n``, one slot clear of its edges (a split that rounds the other way,
such as ``redis-cli --cluster create``'s, still puts each partition in its own range). So
``n`` partitions on a cluster of ``n`` primaries that share the slots evenly put one partition
on each primary, whatever the queue's name.

Lanes. A lane belongs to partition ``crc32(group) % n`` (zlib's CRC-32 of the UTF-8 bytes: the
same in every process and on every machine, unlike Python's salted ``hash``), so all of its jobs
are in one ordinary queue and its order, limit, pause and wait stay exact.
"""

from __future__ import annotations

import zlib
from functools import lru_cache

from echomq_trio._checks import MAX_NAME_BYTES, check_queue
from echomq_trio.resp._cluster import SLOTS, key_slot

__all__ = [
    "MAX_PARTITIONED_NAME_BYTES",
    "MAX_PARTITIONS",
    "check_partitions",
    "partition_names",
    "route",
    "slot_range",
]

MAX_PARTITIONS = 256  # ranges of 64 slots at the most: a name is found in ~n tries
SUFFIX_BYTES = 16  # room for "~p<i>.<k>": "~p255." and a k of up to 10 digits
MAX_PARTITIONED_NAME_BYTES = MAX_NAME_BYTES - SUFFIX_BYTES  # the longest name that partitions


def check_partitions(n: object) -> int:
    """``n`` if it is a partition count (an int from 1 to ``MAX_PARTITIONS``); else raise."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"partitions must be an int, got {type(n).__name__}")
    if not 1 <= n <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be from 1 to {MAX_PARTITIONS}, got {n}")
    return n


def slot_range(j: int, n: int) -> range:
    """Range ``j`` of ``n`` equal ranges of the slots."""
    return range(j * SLOTS // n, (j + 1) * SLOTS // n)


def _slot(queue: str) -> int:
    # every key of a queue has the hash tag {queue} (keys.queue_keys; a test holds the two
    # together): this is the slot of each of them
    return key_slot("{" + queue + "}")


@lru_cache(maxsize=256, typed=True)  # pure and deterministic; the queues opened lately
def partition_names(queue: str, n: int) -> tuple[str, ...]:
    """The names of ``queue``'s ``n`` partitions, partition 0 first (``queue`` itself); the same
    in every process. ``ValueError`` for a name over ``MAX_PARTITIONED_NAME_BYTES`` (112) bytes
    when ``n > 1``, or a bad name or count."""
    check_queue(queue)
    check_partitions(n)
    if n == 1:
        return (queue,)
    if len(queue.encode()) > MAX_PARTITIONED_NAME_BYTES:
        raise ValueError(
            f"queue name is over {MAX_PARTITIONED_NAME_BYTES} bytes, too long to partition "
            f"(a partition's name adds up to {SUFFIX_BYTES}): {queue[:40]!r}..."
        )
    first = _slot(queue) * n // SLOTS
    names = [queue]
    for i in range(1, n):
        share = slot_range((first + i) % n, n)
        inside = range(share.start + 1, share.stop - 1)
        k = 0
        while _slot(name := f"{queue}~p{i}.{k}") not in inside:
            k += 1
        names.append(check_queue(name))
    return tuple(names)


def route(key: str, n: int) -> int:
    """The partition (0 to ``n - 1``) of a lane, a debounce key, an idempotency key or a job id
    ``key``: ``crc32(key) % n``."""
    return zlib.crc32(key.encode()) % n
