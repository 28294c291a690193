"""The audit: a queue that keeps one records every job it settles, for a reader to store.

Theory of operation:

* ``enable`` sets the queue's audit flag. From then on the script that settles a job (``ack``,
  and ``retry`` when it buries one) appends the job's ``AuditRecord`` to the queue's audit stream
  (``QueueKeys.audit``) in the same atomic step, so no job is settled without its record: outcome
  ``acked`` (with the handler's note), ``dropped`` (buried on purpose, with the reason) or
  ``dead`` (out of attempts, with the last error), its attempts, the settling time (server clock)
  and the payload.
* The bus never trims the stream by a cap: records are kept until a reader has stored them. A
  reader uses a consumer group (``create_group``), ``read``\\s batches (after a restart, its own
  unacknowledged ones first: ``pending=True``), takes over a crashed reader's records
  (``autoclaim``), stores them, then calls ``ack_and_trim``: one script acknowledges the batch and
  drops the records below what every reader of the group has acknowledged, so a record handed to
  a reader but not yet stored is never dropped.
* Storing is the reader's job and must be idempotent (by job id and outcome): a reader that
  crashes between storing and ``ack_and_trim`` is handed the same records again.
* A group keeps the name of every reader that ever read from it. A reader named per process
  (host and pid) leaves one behind at each restart; once it has taken over what such a past
  reader left pending (``autoclaim``), ``forget_idle_readers`` removes the readers that hold
  nothing and have been idle a while, in one script, so a reader handed records meanwhile is
  never removed with them.

Names, counts and stream ids are checked before any I/O (``ValueError``/``TypeError``).
"""

from __future__ import annotations

from collections.abc import Sequence

from echomq_trio import events, protocol
from echomq_trio.bus import Bus
from echomq_trio.results import Acknowledged, AuditOutcome, AuditRecord

__all__ = [
    "Acknowledged",
    "AuditOutcome",
    "AuditRecord",
    "ack_and_trim",
    "autoclaim",
    "create_group",
    "enable",
    "forget_idle_readers",
    "read",
]


async def enable(bus: Bus, queue: str, on: bool = True) -> None:
    """Make ``queue`` keep an audit (``on=False``: stop; records already written stay).

    Idempotent: a cancelled call may or may not have set the flag; call again."""
    await bus.run(protocol.audit_enable_call(bus.keys(queue), on))


async def create_group(bus: Bus, queue: str, group: str, start: str = "0") -> bool:
    """Create a consumer group on the audit stream reading from ``start`` (``"0"``: every record
    kept, ``"$"``: new ones only, or a stream id); ``False`` if it exists already. Creates the
    stream if needed.

    A cancelled call may or may not have created it; call again (``False`` then)."""
    return await events.create_group(bus, queue, group, start, stream="audit")


async def read(
    bus: Bus, queue: str, group: str, consumer: str, count: int = 100, *, pending: bool = False
) -> list[AuditRecord]:
    """Up to ``count`` records for ``consumer`` of ``group``: new ones, or with ``pending=True``
    the ones it was handed before and has not acknowledged (read those first after a restart).

    A cancelled call may have handed records to ``consumer`` that the caller never saw: they
    stay pending for it; read them with ``pending=True`` (or another reader ``autoclaim``\\s
    them)."""
    command = protocol.read_group_command(
        bus.keys(queue).audit, group, consumer, count, pending=pending
    )
    raw = await bus.transport.command(*command)
    return protocol.audit_records(protocol.read_group_entries(raw))


async def autoclaim(
    bus: Bus, queue: str, group: str, consumer: str, min_idle_ms: int, count: int = 100
) -> list[AuditRecord]:
    """Take over up to ``count`` records another reader of ``group`` was handed but has not
    acknowledged for ``min_idle_ms`` (it crashed); they now belong to ``consumer``.

    A cancelled call may have moved records to ``consumer`` that the caller never saw: read
    them with ``read(..., pending=True)``."""
    command = protocol.autoclaim_command(bus.keys(queue).audit, group, consumer, min_idle_ms, count)
    return protocol.audit_records(protocol.autoclaim_entries(await bus.transport.command(*command)))


async def ack_and_trim(bus: Bus, queue: str, group: str, stream_ids: Sequence[str]) -> Acknowledged:
    """Acknowledge the records ``stream_ids`` (stored by the caller) for ``group``, and drop from
    the stream every record below what every reader of the group has acknowledged (the oldest
    record still pending in the group, or when none is, everything delivered to it), in one
    script: ``Acknowledged(acked, trimmed)``. With no ids it only trims. Records of other
    groups' readers are not considered: use one group per audit.

    A cancelled call may or may not have run (one script per 10,000 ids, each atomic); call
    again: acknowledging twice is harmless (``acked`` counts the ones still pending)."""
    acked = trimmed = 0
    for call in protocol.audit_ack_calls(bus.keys(queue), group, stream_ids):
        got = await bus.run(call)
        acked, trimmed = acked + got.acked, trimmed + got.trimmed
    return Acknowledged(acked, trimmed)


async def forget_idle_readers(
    bus: Bus, queue: str, group: str, idle_ms: int, *, keep: str | None = None
) -> list[str]:
    """Remove from ``group`` every reader (consumer) other than ``keep`` that holds no pending
    record and has been idle for more than ``idle_ms`` (the server's ``XINFO CONSUMERS`` idle:
    since its last read or claim), in one script (``audit_forget.lua``); returns the names
    removed. A reader that holds records is kept, whatever its idle time: take them over first
    (``autoclaim``). A reader removed that reads again is simply a new reader. ``ServerError``
    (NOGROUP) when the group does not exist.

    A cancelled call may or may not have run (it is atomic); call again."""
    call = protocol.audit_forget_call(bus.keys(queue), group, idle_ms, keep)
    return await bus.run(call)
