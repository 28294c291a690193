"""The audit as a bus feature, on a standalone server and a 3-node cluster: records written by the
settling scripts, read as typed records by a consumer group, taken over from a crashed reader,
acknowledged and trimmed in one script without losing what another reader holds, and readers of
past runs removed from the group once they hold nothing."""

from __future__ import annotations

import pytest

from echomq_trio import Bus, audit, ids, jobs, protocol
from echomq_trio.results import Acknowledged, AuditOutcome
from tests.support import wait_for

pytestmark = pytest.mark.cluster


def jid() -> str:
    return ids.generate("JOB")


async def _settle_three(bus: Bus, queue: str) -> tuple[str, str, str]:
    """One job acked with a note, one buried (dropped), one out of attempts (dead)."""
    a, b, c = jid(), jid(), jid()
    await jobs.enqueue_many(bus, queue, [(a, b"\xff\x00raw"), (b, "pb"), (c, "pc")])
    ja, jb, jc = await jobs.claim(bus, queue, 3)
    await jobs.ack(bus, queue, a, ja.token, note='{"message_id": 7}')
    await jobs.retry(bus, queue, b, jb.token, 0, 5, "chat not found", buried=True)
    await jobs.retry(bus, queue, c, jc.token, 0, 1, "boom")
    return a, b, c


async def test_records_are_typed_and_exactly_what_was_settled(bus: Bus, queue: str) -> None:
    await audit.enable(bus, queue)
    assert await audit.create_group(bus, queue, "archive") is True
    assert await audit.create_group(bus, queue, "archive") is False
    before = await bus.transport.server_time_ms()
    a, b, c = await _settle_three(bus, queue)
    after = await bus.transport.server_time_ms()
    got = await audit.read(bus, queue, "archive", "r1", 10)
    assert [(r.job_id, r.outcome, r.attempts, r.payload, r.note, r.error) for r in got] == [
        (a, AuditOutcome.ACKED, 1, b"\xff\x00raw", '{"message_id": 7}', ""),
        (b, AuditOutcome.DROPPED, 1, b"pb", "", "chat not found"),
        (c, AuditOutcome.DEAD, 1, b"pc", "", "boom"),
    ]
    assert all(before <= r.settled_ms <= after for r in got)
    assert await audit.read(bus, queue, "archive", "r1", 10) == []  # nothing new
    assert await audit.read(bus, queue, "archive", "r1", 10, pending=True) == got


async def test_ack_and_trim_drops_only_what_every_reader_acknowledged(bus: Bus, queue: str) -> None:
    await audit.enable(bus, queue)
    await audit.create_group(bus, queue, "archive")
    await _settle_three(bus, queue)
    first = await audit.read(bus, queue, "archive", "r1", 2)  # r1 is handed two
    await _settle_three(bus, queue)
    second = await audit.read(bus, queue, "archive", "r2", 10)  # r2 the other four
    assert len(first) == 2 and len(second) == 4
    # r2 stores and acknowledges: nothing can go, r1's two are still pending and come first.
    got = await audit.ack_and_trim(bus, queue, "archive", [r.stream_id for r in second])
    assert got == Acknowledged(acked=4, trimmed=0)
    assert await bus.transport.command("XLEN", bus.keys(queue).audit) == 6
    # r1 acknowledges its first: everything below its second goes.
    got = await audit.ack_and_trim(bus, queue, "archive", [first[0].stream_id])
    assert got == Acknowledged(acked=1, trimmed=1)
    # And its second: all were delivered and acknowledged, so all go.
    got = await audit.ack_and_trim(bus, queue, "archive", [first[1].stream_id])
    assert got == Acknowledged(acked=1, trimmed=5)
    assert await bus.transport.command("XLEN", bus.keys(queue).audit) == 0
    # Again: acknowledging twice is harmless.
    assert await audit.ack_and_trim(bus, queue, "archive", [first[1].stream_id]) == Acknowledged(
        0, 0
    )


async def test_a_record_never_handed_out_is_never_trimmed(bus: Bus, queue: str) -> None:
    await audit.enable(bus, queue)
    await audit.create_group(bus, queue, "archive")
    await _settle_three(bus, queue)
    handed = await audit.read(bus, queue, "archive", "r1", 1)
    await audit.ack_and_trim(bus, queue, "archive", [r.stream_id for r in handed])
    rest = await audit.read(bus, queue, "archive", "r1", 10)
    assert len(rest) == 2  # the two never delivered are still there


async def test_autoclaim_takes_over_a_crashed_reader_s_records(bus: Bus, queue: str) -> None:
    await audit.enable(bus, queue)
    await audit.create_group(bus, queue, "archive")
    await _settle_three(bus, queue)
    crashed = await audit.read(bus, queue, "archive", "gone", 10)
    taken = await audit.autoclaim(bus, queue, "archive", "heir", min_idle_ms=0)
    assert taken == crashed
    assert await audit.read(bus, queue, "archive", "heir", 10, pending=True) == crashed
    assert await audit.read(bus, queue, "archive", "gone", 10, pending=True) == []


async def _readers(bus: Bus, queue: str, group: str) -> dict[str, int]:
    """The group's readers and how many records each holds."""
    raw = await bus.transport.command("XINFO", "CONSUMERS", bus.keys(queue).audit, group)
    return {protocol.as_text(c[b"name"]): int(c[b"pending"]) for c in raw}


async def test_forget_idle_readers_removes_only_idle_readers_that_hold_nothing(
    bus: Bus, queue: str
) -> None:
    await audit.enable(bus, queue)
    await audit.create_group(bus, queue, "archive")
    await _settle_three(bus, queue)
    stored = await audit.read(bus, queue, "archive", "past", 2)  # a past run: stored, acked
    await audit.ack_and_trim(bus, queue, "archive", [r.stream_id for r in stored])
    (held,) = await audit.read(bus, queue, "archive", "crashed", 10)  # never acknowledged
    assert await audit.read(bus, queue, "archive", "me", 10) == []  # the current reader
    # A read that finds nothing makes its reader on Redis 7.2+ and Valkey, not on Redis 7.0.
    await bus.transport.command("XGROUP", "CREATECONSUMER", bus.keys(queue).audit, "archive", "me")
    assert await _readers(bus, queue, "archive") == {"past": 0, "crashed": 1, "me": 0}
    # Nobody has been idle for an hour: nobody goes.
    assert await audit.forget_idle_readers(bus, queue, "archive", 3_600_000, keep="me") == []
    removed: list[str] = []

    async def forgotten() -> bool:
        removed.extend(await audit.forget_idle_readers(bus, queue, "archive", 20, keep="me"))
        return bool(removed)

    await wait_for(forgotten)  # once "past" has been idle for more than 20 ms
    assert removed == ["past"], "a reader that holds a record, or the one kept, went"
    assert await _readers(bus, queue, "archive") == {"crashed": 1, "me": 0}
    # Once its record is taken over, the crashed reader holds nothing and goes too.
    assert await audit.autoclaim(bus, queue, "archive", "me", 0) == [held]
    removed.clear()
    await wait_for(forgotten)
    assert removed == ["crashed"]
    # Without keep, a reader holding a record stays all the same; the record is still there.
    assert await audit.forget_idle_readers(bus, queue, "archive", 0) == []
    assert await _readers(bus, queue, "archive") == {"me": 1}
    assert await audit.read(bus, queue, "archive", "me", 10, pending=True) == [held]


async def test_enable_off_stops_records_and_set_audit_is_the_same(bus: Bus, queue: str) -> None:
    await audit.create_group(bus, queue, "archive")
    await jobs.set_audit(bus, queue)
    await _settle_three(bus, queue)
    await audit.enable(bus, queue, on=False)
    await _settle_three(bus, queue)
    assert len(await audit.read(bus, queue, "archive", "r", 100)) == 3
    await jobs.set_audit(bus, queue, False)
    await audit.enable(bus, queue)
    await _settle_three(bus, queue)
    assert len(await audit.read(bus, queue, "archive", "r", 100)) == 3


async def test_bad_input_is_refused_before_any_io(bus: Bus, queue: str) -> None:
    with pytest.raises(ValueError, match="group must not contain"):
        await audit.create_group(bus, queue, "a b")
    with pytest.raises(ValueError, match="start must be a stream id"):
        await audit.create_group(bus, queue, "g", start="-")
    with pytest.raises(ValueError, match="count must be >= 1"):
        await audit.read(bus, queue, "g", "c", 0)
    with pytest.raises(ValueError, match="min_idle_ms must be >= 0"):
        await audit.autoclaim(bus, queue, "g", "c", -1)
    with pytest.raises(ValueError, match="stream id must be a stream id"):
        await audit.ack_and_trim(bus, queue, "g", ["1-1", "nope"])
    with pytest.raises(TypeError, match="not one str"):
        await audit.ack_and_trim(bus, queue, "g", "1-1")
    with pytest.raises(ValueError, match="idle_ms must be >= 0"):
        await audit.forget_idle_readers(bus, queue, "g", -1)
    with pytest.raises(ValueError, match="consumer must not contain"):
        await audit.forget_idle_readers(bus, queue, "g", 0, keep="a b")
    assert not (await jobs.counts(bus, queue)).exists
    assert await bus.transport.command("EXISTS", bus.keys(queue).audit) == 0
