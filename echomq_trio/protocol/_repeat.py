"""The calls of recurring schedules (pure): register, unregister, fire, list, advance."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from echomq_trio._checks import (
    check_group,
    check_int,
    check_job_id,
    check_ms,
    check_name,
    check_payload,
)
from echomq_trio._replies import as_bytes, as_text
from echomq_trio.keys import QueueKeys
from echomq_trio.protocol._base import (
    Arg,
    Call,
    Payload,
    _call,
    _named,
    _time,
)
from echomq_trio.results import (
    Fired,
    Registered,
    Registration,
)

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
