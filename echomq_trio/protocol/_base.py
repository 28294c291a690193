"""What every script call of the protocol shares: ``Call``, the argument checks and builders,
the reply decoding helpers and the reply shapes (``REPLY_FIELDS``). Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs

from echomq_trio import ids
from echomq_trio._checks import (
    JOB_NS,
    check_int,
    check_job_id,
    check_name,
    check_payload,
)
from echomq_trio._replies import as_text
from echomq_trio.results import (
    Outcome,
)
from echomq_trio.sequence import Seq

T = TypeVar("T")


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
    "cap_share": ("fenced", "max_active", "active", "waiting"),
    "cap_total": ("total", "epoch"),
    "claim": ("lease_deadline", "jobs..."),
    "claim/job": ("id", "payload", "attempts", "token", "group", "options"),
    "clock": ("recorded", "step", "step_at", "carried", "more", "now"),
    "count_lanes": ("lanes", "waiting"),
    "debounce": ("outcome", "id", "at", "absorbed"),
    "delete": ("deleted", "next"),
    "counts": ("exists", "pending", "scheduled", "active", "dead", "lanes", "paused_lanes",
               "waiting_lanes", "completed_total", "retried_total", "dead_total",
               "deferred_total", "repeats", "cancelled", "cancelled_total", "expired_total",
               "waiting_children"),
    "extend": ("deadline", "lost..."),
    "fire": ("fired", "next_due", "now", "wanted..."),
    "flow": ("state", "parent", "on_fail", "unfinished", "children..."),
    "flow/child": ("ref", "state", "end"),
    "fire/wanted": ("name", "at", "cron", "tz"),
    "inspect/job": ("id", "state", "attempts", "payload", "last_error", "score", "group",
                    "progress", "result", "finished", "priority", "expires", "debounce"),
    "lane_config": ("limit", "weight"),
    "lane_status": ("next", "lanes..."),
    "lane_status/lane": ("group", "depth", "in_flight", "limit", "weight", "paused",
                         "wait_until", "on_ring"),
    "queue_limit": ("max_active", "active"),
    "promote": ("moved", "lanes_resumed", "next_due", "now", "carrying", "now_us", "lateness..."),
    "reap": ("reaped", "now", "carrying", "next_from?"),
    "result": ("state", "keeps_ms", "error", "result?"),
    "register": ("outcome", "at"),
    "repeats/registration": ("name", "next_run", "every", "template", "group", "last_fired",
                             "cron", "tz", "priority"),
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


class Outdated(ValueError):
    """A reply of ``counts`` or a ``lane_status`` page says the queue has an earlier layout
    (``meta.layout``): upgrade it, then ask again (``_layouts.run_current``)."""


def outdated(raw: object) -> bool:
    """Whether ``raw`` is the ``outdated`` answer (see ``Outdated``)."""
    return isinstance(raw, list) and len(raw) == 1 and as_text(raw[0]) == "outdated"


def _refuse_outdated(script: str, raw: object) -> None:
    if outdated(raw):
        raise Outdated(f"{script}: the queue has an earlier layout; upgrade it first")
