"""The script protocol (pure, no I/O): for each of the bus's scripts, the call built from typed
arguments, every input checked first, and the reply parsed into typed results.

A ``Call`` is one run of a script, in one object: its name, its KEYS and ARGV (all keys from the
queue's schema, ``keys.QueueKeys``) and its reply's decoder; ``Bus.run(call)`` runs it and
returns the typed result (``bus.run(claim_call(k, 10, 30_000))`` is a ``list[Job]``). For script
``x`` (``scripts/x.lua``, whose header documents its ARGV and reply), ``x_call(...)`` builds the
call and ``x_reply(raw)``, the decoder it carries, parses what the server answered (tested on
its own, without a server). Status answers are words (``'acked'``, ``'stale'``, ``'gone'``, ...)
parsed by value into ``Outcome`` (or ``Registered``); an unknown word is a ``ValueError``.
Counts and times are integers, ``-1`` meaning none. The stream commands of ``events`` and
``audit`` are built and parsed here too. ``jobs``, ``lanes``, ``repeat``, ``events`` and ``audit``
are thin wrappers around this module: build, run, parse.

Nothing here does I/O, so all of it is tested without a server (tests/echomq_trio/
test_protocol.py). Replies arrive as the client library gives them: bulk strings as ``bytes``
(or ``str``), integers as ``int``, arrays as lists, a stream's entries as a map or pairs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import attrs

from echomq_trio import ids
from echomq_trio.checks import (
    JOB_NS,
    check_group,
    check_holder,
    check_int,
    check_job_id,
    check_lane_cursor,
    check_ms,
    check_name,
    check_payload,
    check_stream_id,
    check_when,
)
from echomq_trio.keys import QueueKeys
from echomq_trio.results import (
    Acknowledged,
    Admitted,
    AuditOutcome,
    AuditRecord,
    ClockCarried,
    Counts,
    Extended,
    Fired,
    Job,
    JobInfo,
    LanePage,
    LaneStatus,
    Outcome,
    Promoted,
    Reaped,
    Registered,
    Registration,
    Retention,
)
from echomq_trio.sequence import Seq
from echomq_trio.states import JobState

T = TypeVar("T")

__all__ = [
    "AUDIT_ACK_MAX",
    "DEFAULT_KEY_TTL_MS",
    "ENQUEUE_CHUNK",
    "LANE_PAGE_MAX",
    "REPLY_FIELDS",
    "STATE_SETS",
    "Call",
    "StreamEntry",
    "Uncounted",
    "ack_call",
    "ack_reply",
    "admitted_reply",
    "advance_call",
    "advance_reply",
    "as_bytes",
    "as_text",
    "audit_ack_calls",
    "audit_ack_reply",
    "audit_enable_call",
    "audit_forget_call",
    "audit_forget_reply",
    "audit_records",
    "autoclaim_command",
    "autoclaim_entries",
    "checked_job",
    "checked_pairs",
    "claim_call",
    "claim_reply",
    "clock_call",
    "clock_reply",
    "count_lanes_call",
    "count_lanes_reply",
    "counts_call",
    "counts_reply",
    "create_group_command",
    "defer_call",
    "discard_call",
    "enqueue_calls",
    "enqueue_checked_calls",
    "extend_call",
    "extend_reply",
    "fire_call",
    "fire_reply",
    "inspect_ids_call",
    "inspect_ids_reply",
    "inspect_lane_call",
    "inspect_reply",
    "inspect_state_call",
    "lane_config_call",
    "lane_config_reply",
    "lane_enqueue_call",
    "lane_pause_call",
    "lane_pause_reply",
    "lane_pause_until_call",
    "lane_resume_call",
    "lane_resume_reply",
    "lane_status_call",
    "lane_status_page_call",
    "lane_status_reply",
    "last_id_command",
    "outcome_reply",
    "promote_call",
    "promote_reply",
    "range_command",
    "read_group_command",
    "read_group_entries",
    "reap_call",
    "reap_holder_call",
    "reap_reply",
    "register_call",
    "register_reply",
    "release_call",
    "release_reply",
    "repeats_call",
    "repeats_reply",
    "replay_call",
    "retention_call",
    "retention_reply",
    "retry_call",
    "schedule_call",
    "schedule_reply",
    "state_set",
    "stream_ack_command",
    "stream_entries",
    "uncounted",
    "unregister_call",
    "unregister_reply",
    "with_ids",
]

ENQUEUE_CHUNK = 10_000  # jobs per script call, so one call never holds the server for long
DEFAULT_KEY_TTL_MS = 86_400_000  # how long an idempotency key is remembered: one day
AUDIT_ACK_MAX = 10_000  # stream ids per audit_ack call

Arg = str | bytes
Payload = str | bytes
# A run-at (int or float Unix ms, or an aware datetime) or a delay (int or float ms, or a
# timedelta): ``checks.check_when`` rounds it up to whole ms.
When = int | float | dt.datetime | dt.timedelta


# --- calls and stream entries -------------------------------------------------------------------


def _raw(reply: Any) -> Any:
    return reply


def _nothing(reply: object) -> None:
    """The decoder of a script whose answer says nothing (``'OK'``)."""


@attrs.frozen
class Call(Generic[T]):
    """One run of a packaged script: its name (see ``lua.script_source``), KEYS and ARGV, and
    ``decode``, what turns the server's reply into the script's typed result: ``Bus.run(call)``
    returns ``call.decode(reply)``. Built by this module's ``x_call`` functions, one per script
    and use, each with its script's decoder (``x_reply``); a ``Call`` made by hand without one
    returns the raw reply (``decode`` takes no part in equality)."""

    script: str
    keys: tuple[str, ...]
    args: tuple[Arg, ...]
    decode: Callable[[Any], T] = attrs.field(default=_raw, kw_only=True, eq=False, repr=False)


@attrs.frozen
class StreamEntry:
    """One stream entry as stored: its id and its fields, values as bytes."""

    stream_id: str
    fields: Mapping[str, bytes]


# --- reply decoding ------------------------------------------------------------------------------


def as_text(value: object) -> str:
    """A server reply (bytes or str) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def as_bytes(value: object) -> bytes:
    """A server reply (bytes or str) as bytes."""
    return value if isinstance(value, bytes) else str(value).encode()


def _time(value: Any) -> int | None:
    """A time reply: ``-1`` means none."""
    ms = int(value)
    return None if ms < 0 else ms


# Outcomes by their words, as the server sends them (bytes) or as text: parsing by value, one
# dict lookup per job on the hot path (ack_many, claim's enqueues).
_OUTCOMES: dict[object, Outcome] = {
    **{o.value: o for o in Outcome},
    **{o.value.encode(): o for o in Outcome},
}


def _outcome(word: object) -> Outcome:
    try:
        return _OUTCOMES[word]
    except (KeyError, TypeError):
        raise ValueError(f"{word!r} is not an outcome word") from None


def _outcomes(raw: Iterable[object]) -> list[Outcome]:
    try:
        return [_OUTCOMES[word] for word in raw]
    except (KeyError, TypeError):
        return [_outcome(word) for word in raw]  # names the word that is not one


# Every reply of a fixed shape, by its fields' names in the order the script answers them: a
# name ending ``?`` may be missing (the last), one ending ``...`` takes the rest (a list);
# ``script/each`` names the fields of each item of such a list (or of each row of a reply that
# is a list of rows). Each script's ``-- fields:`` header says the same, and a test holds them
# equal (tests/echomq_trio/test_scripts.py), so every decoder reads its reply by name.
REPLY_FIELDS: dict[str, tuple[str, ...]] = {
    "audit_ack": ("acked", "trimmed"),
    "claim": ("lease_deadline", "jobs..."),
    "claim/job": ("id", "payload", "attempts", "token", "group"),
    "clock": ("recorded", "step", "step_at", "carried", "more", "now"),
    "count_lanes": ("lanes", "waiting"),
    "counts": ("exists", "pending", "scheduled", "active", "dead", "lanes", "paused_lanes",
               "waiting_lanes", "completed_total", "retried_total", "dead_total",
               "deferred_total", "repeats"),
    "extend": ("deadline", "lost..."),
    "fire": ("fired", "next_due", "now"),
    "inspect/job": ("id", "state", "attempts", "payload", "last_error", "score", "group"),
    "lane_config": ("limit", "weight"),
    "lane_status": ("next", "lanes..."),
    "lane_status/lane": ("group", "depth", "in_flight", "limit", "weight", "paused",
                         "wait_until", "on_ring"),
    "promote": ("moved", "lanes_resumed", "next_due", "now", "carrying", "lateness..."),
    "reap": ("reaped", "now", "carrying", "next_from?"),
    "register": ("outcome", "at"),
    "repeats/registration": ("name", "next_run", "every", "template", "group", "last_fired"),
    "retention": ("dead_max", "dead_max_age_ms", "events", "events_max_len"),
    "schedule/job": ("outcome", "at?"),
}  # fmt: skip


def _named(shape: str, raw: Sequence[Any]) -> dict[str, Any]:
    """A reply (or one row of it) by field name (``REPLY_FIELDS[shape]``); a reply of another
    length is refused with the script's name."""
    names = REPLY_FIELDS[shape]
    out: dict[str, Any] = {}
    for i, name in enumerate(names):
        if name.endswith("..."):
            out[name[:-3]] = list(raw[i:])
            return out
        if name.endswith("?"):
            out[name[:-1]] = raw[i] if i < len(raw) else None
        elif i < len(raw):
            out[name] = raw[i]
    least = sum(not n.endswith("?") for n in names)
    if not least <= len(raw) <= len(names):
        raise ValueError(f"{shape} answered {len(raw)} fields, expected {len(names)}")
    return out


def _items(shape: str, flat: Sequence[Any]) -> list[dict[str, Any]]:
    """A flat list of items of ``REPLY_FIELDS[shape]``'s fields each, by name."""
    width = len(REPLY_FIELDS[shape])
    if len(flat) % width:
        raise ValueError(f"{shape} answered {len(flat)} fields, not items of {width}")
    return [_named(shape, flat[i : i + width]) for i in range(0, len(flat), width)]


def outcome_reply(raw: object) -> Outcome:
    """A script's one outcome word (``retry``, ``defer``, ``replay``)."""
    return _outcome(raw)


# --- argument building ---------------------------------------------------------------------------


Item = Payload | tuple[str, Payload]  # a payload (the bus mints its id), or (job id, payload)


def with_ids(items: Iterable[Item], job_id: str | None = None) -> list[tuple[str, Payload]]:
    """``(job id, payload)`` per item: a bare payload gets a fresh ``JOB`` id (or ``job_id``,
    given for a single item), a pair keeps its id (checked with the rest of the call)."""
    out: list[tuple[str, Payload]] = []
    for item in items:
        if isinstance(item, tuple):
            out.append(item)
        else:
            out.append((job_id or ids.generate(JOB_NS), item))
    return out


def checked_pairs(items: Iterable[tuple[str, Payload]], max_bytes: int) -> list[tuple[str, bytes]]:
    """Each ``(job id, payload)`` checked (``ValueError``/``TypeError`` for a bad one), the
    payload as bytes."""
    return [(check_job_id(i), check_payload(p, max_bytes)) for i, p in items]


def checked_job(payload: Payload, job_id: str | None, max_bytes: int) -> tuple[str, bytes]:
    """One job as ``checked_pairs`` gives it: ``job_id`` checked (a fresh ``JOB`` id when it is
    ``None`` or empty: minted ids need no check), the payload as bytes."""
    job = check_job_id(job_id) if job_id else ids.generate(JOB_NS)
    return job, check_payload(payload, max_bytes)


def _pairs(items: Iterable[tuple[str, Payload]], max_bytes: int) -> list[Arg]:
    flat: list[Arg] = []
    for job_id, payload in items:
        flat.append(check_job_id(job_id))
        flat.append(check_payload(payload, max_bytes))
    return flat


def _guard(key: str | None, key_ttl_ms: int) -> list[Arg]:
    """The arguments of an optional idempotency key: ``[key, ttl]``, or ``["", ""]``."""
    ttl = str(check_int("key_ttl_ms", key_ttl_ms, 1))
    return ["", ""] if key is None else [check_name("idempotency key", key), ttl]


def _seq(seq: Seq | None) -> list[Arg]:
    """The arguments of an optional ``Seq``: scope, number, window, TTL (or four ``""``)."""
    if seq is None:
        return ["", "", "", ""]
    if not isinstance(seq, Seq):
        raise TypeError(f"seq must be a Seq, got {type(seq).__name__}")
    return [seq.scope, str(seq.number), str(seq.window), str(seq.ttl_ms)]


def _tokens(items: Sequence[tuple[str, int]]) -> list[Arg]:
    flat: list[Arg] = []
    for job_id, token in items:
        flat += [check_job_id(job_id), str(check_int("token", token, 0))]
    return flat


def _call(script: str, key: str, args: Iterable[Arg], decode: Callable[[Any], T]) -> Call[T]:
    return Call(script, (key,), tuple(args), decode=decode)


# --- enqueue, lane_enqueue, schedule -------------------------------------------------------------


def enqueue_calls(
    k: QueueKeys,
    items: Iterable[tuple[str, Payload]],
    max_bytes: int,
    *,
    key: str | None = None,
    key_ttl_ms: int = DEFAULT_KEY_TTL_MS,
) -> list[Call[list[Admitted]]]:
    """``enqueue``: admit jobs to the flat pending set, one call per ``ENQUEUE_CHUNK`` jobs (none
    for no jobs). An idempotency ``key`` guards exactly one job."""
    guard = _guard(key, key_ttl_ms)
    flat = _pairs(items, max_bytes)
    if key is not None and len(flat) != 2:
        raise ValueError("an idempotency key guards exactly one job")
    return _enqueue_chunks(k, guard, flat)


def enqueue_checked_calls(
    k: QueueKeys, pairs: Sequence[tuple[str, bytes]]
) -> list[Call[list[Admitted]]]:
    """``enqueue_calls`` for pairs already checked by ``checked_pairs`` (no key)."""
    return _enqueue_chunks(k, ["", ""], [a for pair in pairs for a in pair])


def _enqueue_chunks(k: QueueKeys, guard: list[Arg], flat: list[Arg]) -> list[Call[list[Admitted]]]:
    step = 2 * ENQUEUE_CHUNK
    if 0 < len(flat) <= step:  # one call (every single enqueue): no slices to copy
        chunks = [flat]
    else:
        chunks = [flat[start : start + step] for start in range(0, len(flat), step)]
    return [
        Call(
            "enqueue",
            (k.pending,),
            (k.prefix, *guard, *chunk),
            decode=partial(admitted_reply, job_ids=[str(i) for i in chunk[::2]]),
        )
        for chunk in chunks
    ]


def lane_enqueue_call(
    k: QueueKeys,
    group: str,
    items: Iterable[tuple[str, Payload]],
    max_bytes: int,
    *,
    limit: int | None = None,
    key: str | None = None,
    key_ttl_ms: int = DEFAULT_KEY_TTL_MS,
    seq: Seq | None = None,
) -> Call[list[Admitted]]:
    """``lane_enqueue``: admit jobs to ``group``'s lane, setting its ``limit`` when given. An
    idempotency ``key`` or a ``seq`` (``sequence.Seq``) guards exactly one job."""
    guard = _guard(key, key_ttl_ms)
    lane = k.lane(group)
    flat = _pairs(items, max_bytes)
    if key is not None and len(flat) != 2:
        raise ValueError("an idempotency key guards exactly one job")
    if seq is not None and len(flat) != 2:
        raise ValueError("a seq guards exactly one job")
    lim = "" if limit is None else str(check_int("limit", limit, 1))
    decode = partial(admitted_reply, job_ids=[str(job_id) for job_id in flat[::2]])
    return _call("lane_enqueue", lane, [k.prefix, group, lim, *guard, *_seq(seq), *flat], decode)


def admitted_reply(raw: Iterable[object], job_ids: Sequence[str]) -> list[Admitted]:
    """``enqueue``/``lane_enqueue``: ``ENQUEUED`` or ``DUPLICATE`` per job of ``job_ids`` (the
    call's, in order)."""
    return [Admitted(i, o) for i, o in zip(job_ids, _outcomes(raw), strict=True)]


def schedule_call(
    k: QueueKeys,
    items: Sequence[tuple[str, Payload, When]],
    max_bytes: int,
    *,
    relative: bool,
    group: str | None = None,
) -> Call[list[Admitted]]:
    """``schedule``: ``(job id, payload, time)`` each, the time a run-at (Unix ms, or an aware
    datetime; checked as ``run_at_ms``) or with ``relative`` a delay from the server's now
    (``delay_ms``, or a timedelta); a float or a datetime is rounded up to the next ms
    (``checks.check_when``)."""
    flat: list[Arg] = []
    for job_id, payload, when in items:
        name = "delay_ms" if relative else "run_at_ms"
        ms = check_when(name, when, absolute=not relative)
        flat += [check_job_id(job_id), check_payload(payload, max_bytes), str(ms)]
    lane = "" if group is None else check_group(group)
    mode = "in" if relative else "at"
    decode = partial(schedule_reply, job_ids=[job_id for job_id, _, _ in items])
    return _call("schedule", k.schedule, [k.prefix, mode, lane, *flat], decode)


def schedule_reply(raw: Iterable[Sequence[Any]], job_ids: Sequence[str]) -> list[Admitted]:
    """``schedule``: ``{'scheduled', run-at}`` or ``{'duplicate'}`` per job of ``job_ids`` (the
    call's, in order)."""
    out = []
    for job_id, answer in zip(job_ids, raw, strict=True):
        r = _named("schedule/job", answer)
        outcome = _outcome(r["outcome"])
        at = int(r["at"]) if outcome is Outcome.SCHEDULED else None
        out.append(Admitted(job_id, outcome, at))
    return out


# --- promote, claim, reap ------------------------------------------------------------------------


def promote_call(
    k: QueueKeys,
    batch: int,
    *,
    lateness: bool = False,
    witness: tuple[str, str, str] | None = None,
) -> Call[Promoted]:
    """``lateness``: the reply also carries how late each moved job was. ``witness``: the
    caller's evidence of the server clock (``clock.Witness.args``), so a step is noticed."""
    args = [k.prefix, str(check_int("batch", batch, 1)), "1" if lateness else "0"]
    return _call("promote", k.schedule, [*args, *witness] if witness else args, promote_reply)


def promote_reply(raw: Sequence[Any]) -> Promoted:
    r = _named("promote", raw)
    return Promoted(int(r["moved"]), int(r["lanes_resumed"]), _time(r["next_due"]),
                    int(r["now"]), tuple(int(ms) for ms in r["lateness"]),
                    carrying=int(r["carrying"]) == 1)  # fmt: skip


def claim_call(k: QueueKeys, batch: int, lease_ms: int, holder: str = "") -> Call[list[Job]]:
    """``holder``: the claiming bus's id, kept in each claimed job's row (``reap_holder_call``)."""
    args = [k.prefix, str(check_int("batch", batch, 1)), str(check_ms("lease_ms", lease_ms, 1))]
    decode = partial(claim_reply, queue=k.name)
    return _call("claim", k.pending, [*args, check_holder(holder)] if holder else args, decode)


def claim_reply(raw: Sequence[Any], queue: str) -> list[Job]:
    """``{lease deadline, then per job: id, payload, attempts, token, group or ''}``."""
    r = _named("claim", raw)
    deadline = int(r["lease_deadline"])
    jobs = []
    for j in _items("claim/job", r["jobs"]):
        payload = j["payload"]
        if not isinstance(payload, bytes):
            payload = str(payload).encode()
        group = j["group"]
        jobs.append(
            Job(queue, as_text(j["id"]), payload, int(j["attempts"]), int(j["token"]), deadline,
                as_text(group) if group else None)
        )  # fmt: skip
    return jobs


def reap_call(k: QueueKeys, batch: int) -> Call[Reaped]:
    return _call("reap", k.active, [k.prefix, str(check_int("batch", batch, 1))], reap_reply)


def reap_reply(raw: Sequence[Any]) -> Reaped:
    r = _named("reap", raw)
    after = "" if r["next_from"] is None else as_text(r["next_from"])
    return Reaped(int(r["reaped"]), int(r["now"]), carrying=int(r["carrying"]) == 1,
                  next_from=after or None)  # fmt: skip


def reap_holder_call(k: QueueKeys, holder: str, after: str = "", batch: int = 1000) -> Call[Reaped]:
    """``reap`` of every job ``holder`` leased, whatever its deadline: a page of ``batch`` jobs of
    ``active`` past the lease deadline ``after`` ('' for the start; ``Reaped.next_from`` for the
    next page, ``None`` at the end)."""
    if after and not _is_number(after):
        raise ValueError(f"after must be a lease deadline from a reap's answer, got {after!r}")
    args = [k.prefix, str(check_int("batch", batch, 1)), check_holder(holder), after]
    return _call("reap", k.active, args, reap_reply)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def clock_call(
    k: QueueKeys,
    witness: tuple[str, str, str] | None = None,
    batch: int = 1000,
    *,
    reap_grace_ms: int = 30_000,
) -> Call[ClockCarried]:
    """``clock``: record a step the ``witness`` shows (``clock.Witness.args``; ``None``: none)
    and carry up to ``batch`` of the queue's waits across the last recorded step; no lease is
    reaped for ``reap_grace_ms`` after a step is recorded."""
    seen, elapsed, spread = witness or ("", "0", "0")
    grace = str(check_ms("reap_grace_ms", reap_grace_ms))
    args = [k.prefix, seen, elapsed, spread, str(check_int("batch", batch, 1)), grace]
    return _call("clock", k.meta, args, clock_reply)


def clock_reply(raw: Sequence[Any]) -> ClockCarried:
    r = _named("clock", raw)
    return ClockCarried(int(r["recorded"]), int(r["step"]), _time(r["step_at"]),
                        int(r["carried"]), int(r["more"]) == 1, int(r["now"]))  # fmt: skip


# --- ack, retry, defer, extend, release, replay --------------------------------------------------


def ack_call(
    k: QueueKeys, items: Sequence[tuple[str, int] | tuple[str, int, str]]
) -> Call[list[Outcome]]:
    """``ack``: ``(id, token)`` or ``(id, token, note)`` each."""
    flat: list[Arg] = [k.prefix]
    for item in items:
        job_id, token = item[0], item[1]
        note = item[2] if len(item) > 2 else ""
        flat += [check_job_id(job_id), str(check_int("token", token, 0)), str(note)]
    return _call("ack", k.active, flat, ack_reply)


def ack_reply(raw: Iterable[object]) -> list[Outcome]:
    """``ACKED``, ``STALE`` or ``GONE`` per job, in order."""
    return _outcomes(raw)


def retry_call(
    k: QueueKeys,
    job_id: str,
    token: int,
    delay_ms: int,
    max_attempts: int,
    error: str = "",
    *,
    buried: bool = False,
) -> Call[Outcome]:
    args = [
        k.prefix,
        check_job_id(job_id),
        str(check_int("token", token, 0)),
        str(check_ms("delay_ms", delay_ms)),
        str(check_int("max_attempts", max_attempts, 1)),
        str(error),
        "1" if buried else "0",
    ]
    return _call("retry", k.active, args, outcome_reply)


def defer_call(
    k: QueueKeys, job_id: str, token: int, delay_ms: int, reason: str = ""
) -> Call[Outcome]:
    args = [
        k.prefix,
        check_job_id(job_id),
        str(check_int("token", token, 0)),
        str(check_ms("delay_ms", delay_ms)),
        str(reason),
    ]
    return _call("defer", k.active, args, outcome_reply)


def extend_call(k: QueueKeys, items: Sequence[tuple[str, int]], lease_ms: int) -> Call[Extended]:
    lease = str(check_ms("lease_ms", lease_ms, 1))
    return _call("extend", k.active, [k.prefix, lease, *_tokens(items)], extend_reply)


def extend_reply(raw: Sequence[Any]) -> Extended:
    r = _named("extend", raw)
    return Extended(int(r["deadline"]), tuple(as_text(x) for x in r["lost"]))


def release_call(k: QueueKeys, items: Sequence[tuple[str, int]]) -> Call[int]:
    return _call("release", k.active, [k.prefix, *_tokens(items)], release_reply)


def release_reply(raw: Any) -> int:
    return int(raw)


def replay_call(k: QueueKeys, job_id: str) -> Call[Outcome]:
    return _call("replay", k.dead, [k.prefix, check_job_id(job_id)], outcome_reply)


def retention_call(
    k: QueueKeys,
    *,
    dead_max: int | None = None,
    dead_max_age_ms: int | None = None,
    events: bool = True,
    events_max_len: int | None = None,
    read_only: bool = False,
) -> Call[Retention]:
    """``retention``: set the queue's bounds (``None``: no bound; ``events_max_len`` ``None``:
    the bus's default), or with ``read_only`` only read them."""
    if read_only:
        return _call("retention", k.meta, [k.prefix, "0"], retention_reply)
    args = [
        "" if dead_max is None else str(check_int("dead_max", dead_max, 0)),
        "" if dead_max_age_ms is None else str(check_ms("dead_max_age_ms", dead_max_age_ms, 1)),
        "1" if _check_bool("events", events) else "0",
        "" if events_max_len is None else str(check_int("events_max_len", events_max_len, 1)),
    ]
    return _call("retention", k.meta, [k.prefix, "1", *args], retention_reply)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def retention_reply(raw: Sequence[Any]) -> Retention:
    """``retention``: the settings in effect."""
    r = {name: as_text(v) for name, v in _named("retention", raw).items()}
    dead_max, dead_age, events, max_len = (r["dead_max"], r["dead_max_age_ms"], r["events"],
                                           r["events_max_len"])  # fmt: skip
    return Retention(
        int(dead_max) if dead_max else None,
        int(dead_age) if dead_age else None,
        events != "0",
        int(max_len),
    )


def discard_call(k: QueueKeys, job_id: str) -> Call[Outcome]:
    return _call("discard", k.dead, [k.prefix, check_job_id(job_id)], outcome_reply)


def audit_enable_call(k: QueueKeys, on: bool) -> Call[None]:
    return _call("audit_enable", k.meta, [k.prefix, "1" if on else "0"], _nothing)


# --- counts, inspect -----------------------------------------------------------------------------


def counts_call(k: QueueKeys) -> Call[Counts]:
    return _call("counts", k.pending, [k.prefix], counts_reply)


def counts_reply(raw: Sequence[Any]) -> Counts:
    """The counters; ``Uncounted`` for a queue written before the lane counter."""
    _refuse_uncounted("counts", raw)
    r: dict[str, Any] = {name: int(v) for name, v in _named("counts", raw).items()}
    return Counts(**(r | {"exists": bool(r["exists"])}))


class Uncounted(ValueError):
    """A reply of ``counts`` or a ``lane_status`` page says the queue was written before the
    lane counter and index: run ``count_lanes`` once, then ask again (``upgrade.run_counted``)."""


def uncounted(raw: object) -> bool:
    """Whether ``raw`` is the ``uncounted`` answer (see ``Uncounted``)."""
    return isinstance(raw, list) and len(raw) == 1 and as_text(raw[0]) == "uncounted"


def _refuse_uncounted(script: str, raw: object) -> None:
    if uncounted(raw):
        raise Uncounted(f"{script}: the queue's lanes are not counted yet")


def count_lanes_call(k: QueueKeys) -> Call[tuple[int, int]]:
    return _call("count_lanes", k.meta, [k.prefix], count_lanes_reply)


def count_lanes_reply(raw: Sequence[Any]) -> tuple[int, int]:
    """``(lanes indexed, jobs waiting in lanes)``; ``(0, 0)`` when counted already."""
    r = _named("count_lanes", raw)
    return int(r["lanes"]), int(r["waiting"])


# Where a job in each state waits, by ``SCHEMA`` name (a pending lane job waits in its lane
# instead): ``states.JobState.waits_in``, the table scripts/README.md is written from.
STATE_SETS = {str(s): s.waits_in for s in JobState}


def state_set(k: QueueKeys, state: str) -> str:
    """The key of the sorted set that holds the jobs in ``state`` (``pending``: the flat set)."""
    if state not in STATE_SETS:
        raise ValueError(f"state must be one of {sorted(STATE_SETS)}, got {state!r}")
    key: str = getattr(k, STATE_SETS[state])
    return key


def _inspect_set(key: str, k: QueueKeys, offset: int, limit: int) -> Call[list[JobInfo]]:
    off = str(check_int("offset", offset, 0))
    args = [k.prefix, "set", off, str(check_int("limit", limit, 1))]
    return _call("inspect", key, args, inspect_reply)


def inspect_state_call(k: QueueKeys, state: str, offset: int, limit: int) -> Call[list[JobInfo]]:
    """``inspect`` the jobs in one state's set (``pending``: the flat set)."""
    return _inspect_set(state_set(k, state), k, offset, limit)


def inspect_lane_call(k: QueueKeys, group: str, offset: int, limit: int) -> Call[list[JobInfo]]:
    """``inspect`` the jobs waiting in a lane."""
    return _inspect_set(k.lane(group), k, offset, limit)


def inspect_ids_call(k: QueueKeys, job_ids: Sequence[str]) -> Call[list[JobInfo | None]]:
    args = [k.prefix, "ids", *(check_job_id(i) for i in job_ids)]
    return _call("inspect", k.pending, args, inspect_ids_reply)


def inspect_reply(raw: Iterable[Sequence[object]]) -> list[JobInfo]:
    """Per job ``{id, state, attempts, payload, last_error, score, group}``, of rows that exist
    (a set's; ``inspect_ids_reply`` tells a missing row)."""
    return [info for info in inspect_ids_reply(raw) if info is not None]


def inspect_ids_reply(raw: Iterable[Sequence[object]]) -> list[JobInfo | None]:
    """Per job named ``{id, state, attempts, payload, last_error, score, group}``: its row, or
    ``None`` for a missing row (state ``''``)."""
    out: list[JobInfo | None] = []
    for row in raw:
        r = _named("inspect/job", row)
        sc = as_text(r["score"])
        if not as_text(r["state"]):
            out.append(None)
            continue
        out.append(
            JobInfo(
                id=as_text(r["id"]),
                state=JobState(as_text(r["state"])),
                attempts=int(as_text(r["attempts"])),
                payload=as_bytes(r["payload"]),
                last_error=as_text(r["last_error"]) or None,
                score_ms=int(float(sc)) if sc else None,
                group=as_text(r["group"]) or None,
            )
        )
    return out


# --- lanes ---------------------------------------------------------------------------------------


def lane_pause_call(k: QueueKeys, group: str) -> Call[int]:
    return _call(
        "lane_pause", k.ring, [k.prefix, check_group(group), "pause", ""], lane_pause_reply
    )


def lane_pause_until_call(k: QueueKeys, group: str, at_ms: int) -> Call[int]:
    at = str(check_ms("at_ms", at_ms, absolute=True))
    return _call(
        "lane_pause", k.ring, [k.prefix, check_group(group), "until", at], lane_pause_reply
    )


def lane_pause_reply(raw: Any) -> int:
    """The lane's wait end (server ms) for ``until``; 0 for ``pause``."""
    return int(raw)


def lane_resume_call(k: QueueKeys, group: str) -> Call[bool]:
    return _call("lane_resume", k.ring, [k.prefix, check_group(group)], lane_resume_reply)


def lane_resume_reply(raw: object) -> bool:
    """``'resumed'`` (it was held) or ``'not_held'``."""
    word = as_text(raw)
    if word not in ("resumed", "not_held"):
        raise ValueError(f"lane_resume answered {word!r}")
    return word == "resumed"


def lane_config_call(
    k: QueueKeys, group: str, *, limit: int | None = None, weight: int | None = None
) -> Call[tuple[int | None, int]]:
    lim = "" if limit is None else str(check_int("limit", limit, 0))
    wt = "" if weight is None else str(check_int("weight", weight, 1))
    return _call("lane_config", k.ring, [k.prefix, check_group(group), lim, wt], lane_config_reply)


def lane_config_reply(raw: Sequence[Any]) -> tuple[int | None, int]:
    r = _named("lane_config", raw)
    return (int(r["limit"]) or None, int(r["weight"]))


LANE_PAGE_MAX = 1000  # most lanes in one page of lane status


def lane_status_call(k: QueueKeys, groups: Sequence[str]) -> Call[LanePage]:
    """``lane_status`` of the lanes named."""
    named = [check_group(g) for g in groups]
    return _call("lane_status", k.lane_index, [k.prefix, "groups", *named], lane_status_reply)


def lane_status_page_call(k: QueueKeys, after: str = "", count: int = 100) -> Call[LanePage]:
    """``lane_status`` of at most ``count`` (1 to ``LANE_PAGE_MAX``) more lanes of the lane index
    from the cursor ``after`` (``''``: from the first; else a page's ``next``)."""
    cursor = check_lane_cursor(after)
    n = check_int("count", count, 1)
    if n > LANE_PAGE_MAX:
        raise ValueError(f"count must be <= {LANE_PAGE_MAX}, got {n}")
    return _call("lane_status", k.lane_index, [k.prefix, "page", cursor, str(n)], lane_status_reply)


def lane_status_reply(raw: Sequence[Any]) -> LanePage:
    """The next page's cursor (``''``: none) and per lane its row; ``Uncounted`` for a queue
    written before the lane index."""
    _refuse_uncounted("lane_status", raw)
    page = _named("lane_status", raw)
    nxt = as_text(page["next"])
    lanes = []
    for row in page["lanes"]:
        r = _named("lane_status/lane", row)
        lanes.append(
            LaneStatus(
                group=as_text(r["group"]),
                depth=int(r["depth"]),
                in_flight=int(r["in_flight"]),
                limit=int(r["limit"]) or None,
                weight=int(r["weight"]),
                paused=bool(r["paused"]),
                wait_until_ms=int(r["wait_until"]) or None,
                on_ring=bool(r["on_ring"]),
            )
        )
    return LanePage(lanes, nxt or None)


# --- recurring schedules -------------------------------------------------------------------------


def register_call(
    k: QueueKeys,
    name: str,
    every_ms: int,
    template: Payload,
    max_bytes: int,
    *,
    first_in_ms: int = 0,
    group: str | None = None,
) -> Call[tuple[Registered, int]]:
    args: list[Arg] = [
        k.prefix,
        check_name("repeat name", name),
        str(check_ms("every_ms", every_ms, 1)),
        check_payload(template, max_bytes),
        str(check_ms("first_in_ms", first_in_ms)),
        "" if group is None else check_group(group),
    ]
    return _call("register", k.repeats, args, register_reply)


def register_reply(raw: Sequence[Any]) -> tuple[Registered, int]:
    r = _named("register", raw)
    return (Registered(as_text(r["outcome"])), int(r["at"]))


def unregister_call(k: QueueKeys, name: str) -> Call[bool]:
    return _call(
        "unregister", k.repeats, [k.prefix, check_name("repeat name", name)], unregister_reply
    )


def unregister_reply(raw: object) -> bool:
    """``'cancelled'`` or ``'absent'``."""
    word = as_text(raw)
    if word not in ("cancelled", "absent"):
        raise ValueError(f"unregister answered {word!r}")
    return word == "cancelled"


def fire_call(k: QueueKeys, fresh_ids: Sequence[str]) -> Call[Fired]:
    """``fire``: up to ``len(fresh_ids)`` occurrences, each becoming a job with one of the ids
    (freshly minted by the caller: minting reads the clock)."""
    if not fresh_ids:
        raise ValueError("fire needs at least one fresh job id")
    return _call("fire", k.repeats, [k.prefix, *(check_job_id(i) for i in fresh_ids)], fire_reply)


def fire_reply(raw: Sequence[Any]) -> Fired:
    r = _named("fire", raw)
    return Fired(int(r["fired"]), _time(r["next_due"]), int(r["now"]))


def repeats_call(k: QueueKeys, which: str, limit: int, offset: int = 0) -> Call[list[Registration]]:
    """``repeats``: ``which`` is ``"all"`` (from ``offset`` in next-run order) or ``"due"``."""
    if which not in ("all", "due"):
        raise ValueError(f"which must be 'all' or 'due', got {which!r}")
    lim, off = str(check_int("limit", limit, 1)), str(check_int("offset", offset, 0))
    return _call("repeats", k.repeats, [k.prefix, which, lim, off], repeats_reply)


def repeats_reply(raw: Iterable[Sequence[object]]) -> list[Registration]:
    """Per registration ``{name, next run, every ms, template, group or '', last fired or ''}``."""
    out = []
    for row in raw:
        r = _named("repeats/registration", row)
        last_text = as_text(r["last_fired"])
        out.append(
            Registration(
                name=as_text(r["name"]),
                next_run_ms=int(float(as_text(r["next_run"]))),
                every_ms=int(as_text(r["every"])),
                template=as_bytes(r["template"]),
                group=as_text(r["group"]) or None,
                last_fired_ms=int(last_text) if last_text else None,
            )
        )
    return out


def advance_call(k: QueueKeys, name: str) -> Call[int | None]:
    return _call("advance", k.repeats, [k.prefix, check_name("repeat name", name)], advance_reply)


def advance_reply(raw: Any) -> int | None:
    """The next run (server ms), or ``None`` for a name not registered."""
    return _time(raw)


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
