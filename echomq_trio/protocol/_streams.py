"""The stream commands of events and the audit (pure), built and parsed here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from echomq_trio._checks import (
    check_int,
    check_ms,
    check_name,
    check_stream_id,
)
from echomq_trio._replies import as_bytes, as_text
from echomq_trio.keys import QueueKeys
from echomq_trio.protocol._base import (
    AUDIT_ACK_MAX,
    Call,
    StreamEntry,
    _call,
    _named,
)
from echomq_trio.results import (
    Acknowledged,
    AuditOutcome,
    AuditRecord,
)

# --- streams (events, audit) ---------------------------------------------------------------------


def range_command(key: str, after: str, count: int) -> list[str]:
    """``XRANGE`` of up to ``count`` entries after ``after`` (exclusive; ``"-"``: the start)."""
    check_stream_id("after", after, ("-",))
    start = after if after == "-" else "(" + after
    return ["XRANGE", key, start, "+", "COUNT", str(check_int("count", count, 1))]


def last_id_command(key: str) -> list[str]:
    return ["XREVRANGE", key, "+", "-", "COUNT", "1"]


def create_group_command(key: str, group: str, start: str) -> list[str]:
    """``XGROUP CREATE ... MKSTREAM``, ``start`` a stream id or ``"$"`` (new entries only)."""
    name = check_name("group", group)
    check_stream_id("start", start, ("$",))
    return ["XGROUP", "CREATE", key, name, start, "MKSTREAM"]


def read_group_command(
    key: str, group: str, consumer: str, count: int, *, pending: bool = False
) -> list[str]:
    """``XREADGROUP``: new entries, or with ``pending`` the consumer's unacknowledged ones."""
    return [
        "XREADGROUP", "GROUP", check_name("group", group), check_name("consumer", consumer),
        "COUNT", str(check_int("count", count, 1)), "STREAMS", key, "0" if pending else ">",
    ]  # fmt: skip


def stream_ack_command(key: str, group: str, stream_ids: Sequence[str]) -> list[str]:
    """``XACK``; an empty list of ids makes no command (``[]``)."""
    name = check_name("group", group)
    checked = _stream_ids(stream_ids)
    return ["XACK", key, name, *checked] if checked else []


def autoclaim_command(
    key: str, group: str, consumer: str, min_idle_ms: int, count: int
) -> list[str]:
    """``XAUTOCLAIM`` of entries idle for ``min_idle_ms``, from the start."""
    return [
        "XAUTOCLAIM", key, check_name("group", group), check_name("consumer", consumer),
        str(check_ms("min_idle_ms", min_idle_ms)), "0-0",
        "COUNT", str(check_int("count", count, 1)),
    ]  # fmt: skip


def _stream_ids(stream_ids: Sequence[str]) -> list[str]:
    if isinstance(stream_ids, str):
        raise TypeError("stream_ids must be a sequence of stream ids, not one str")
    return [check_stream_id("stream id", i) for i in stream_ids]


def stream_entries(raw: Any) -> list[StreamEntry]:
    """Entries of ``XRANGE``/``XREVRANGE``/``XAUTOCLAIM``: a map ``{id: [[field, value], ...]}``
    or a list of ``[id, fields]`` pairs (fields flat or paired). An entry trimmed away while
    pending comes as ``None`` and is left out."""
    out: list[StreamEntry] = []
    if not raw:
        return out
    items = raw.items() if isinstance(raw, dict) else raw
    for stream_id, pairs in items:
        if pairs is None:
            continue
        flat = pairs if pairs and not isinstance(pairs[0], list) else [x for p in pairs for x in p]
        fields = {as_text(flat[i]): as_bytes(flat[i + 1]) for i in range(0, len(flat), 2)}
        out.append(StreamEntry(as_text(stream_id), fields))
    return out


def read_group_entries(raw: Any) -> list[StreamEntry]:
    """Entries of an ``XREADGROUP`` of one stream (``None`` when there were none)."""
    if not raw:
        return []
    (entries,) = raw.values() if isinstance(raw, dict) else [raw[0][1]]
    return stream_entries(entries)


def autoclaim_entries(raw: Sequence[Any]) -> list[StreamEntry]:
    """Entries of ``XAUTOCLAIM``: ``[next cursor, entries, (deleted ids)]``."""
    return stream_entries(raw[1])


def audit_records(entries: Iterable[StreamEntry]) -> list[AuditRecord]:
    """Audit records from audit stream entries (fields as the settling scripts write them)."""
    return [
        AuditRecord(
            stream_id=e.stream_id,
            job_id=as_text(e.fields["id"]),
            outcome=AuditOutcome(as_text(e.fields["outcome"])),
            attempts=int(e.fields["attempts"]),
            settled_ms=int(e.fields["settled_ms"]),
            payload=e.fields.get("payload", b""),
            note=as_text(e.fields.get("note", b"")),
            error=as_text(e.fields.get("error", b"")),
        )
        for e in entries
    ]


def audit_ack_calls(
    k: QueueKeys, group: str, stream_ids: Sequence[str]
) -> list[Call[Acknowledged]]:
    """``audit_ack``: acknowledge ``stream_ids`` for ``group`` and trim the audit stream below
    what the group has acknowledged; one call per ``AUDIT_ACK_MAX`` ids (one with none: it
    trims alone)."""
    name = check_name("group", group)
    checked = _stream_ids(stream_ids)
    return [
        _call(
            "audit_ack", k.audit, [name, *checked[start : start + AUDIT_ACK_MAX]], audit_ack_reply
        )
        for start in range(0, max(len(checked), 1), AUDIT_ACK_MAX)
    ]


def audit_ack_reply(raw: Sequence[Any]) -> Acknowledged:
    """``{acknowledged, removed}``."""
    r = _named("audit_ack", raw)
    return Acknowledged(int(r["acked"]), int(r["trimmed"]))


def audit_forget_call(
    k: QueueKeys, group: str, idle_ms: int, keep: str | None = None
) -> Call[list[str]]:
    """``audit_forget``: remove the readers of ``group`` that hold no record and have been idle
    for more than ``idle_ms``, except ``keep``."""
    name = check_name("group", group)
    idle = str(check_ms("idle_ms", idle_ms))
    kept = "" if keep is None else check_name("consumer", keep)
    return _call("audit_forget", k.audit, [k.prefix, name, idle, kept], audit_forget_reply)


def audit_forget_reply(raw: Iterable[object] | None) -> list[str]:
    """The names of the readers removed."""
    return [as_text(name) for name in raw or ()]
