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
    check_priority,
)
from echomq_trio._replies import as_bytes, as_text
from echomq_trio.cron import Cron
from echomq_trio.keys import QueueKeys
from echomq_trio.protocol._base import (
    Arg,
    Call,
    Payload,
    _call,
    _items,
    _named,
    _time,
)
from echomq_trio.results import (
    CronDue,
    Fired,
    Registered,
    Registration,
)

# --- recurring schedules -------------------------------------------------------------------------


def register_call(
    k: QueueKeys,
    name: str,
    every_ms: int | None,
    template: Payload,
    max_bytes: int,
    *,
    first_in_ms: int = 0,
    group: str | None = None,
    cron: Cron | None = None,
    first_at_ms: int = 0,
    replace: bool = False,
    priority: int = 0,
) -> Call[tuple[Registered, int]]:
    """``register``: every ``every_ms`` (first ``first_in_ms`` from the server's now), or, with
    ``every_ms`` ``None``, at the occurrences of ``cron`` (first at ``first_at_ms``, server ms,
    which the caller computed: ``echomq_trio.cron.next_after``). ``priority``: of every job it
    fires (``protocol.priority_arg``)."""
    if (every_ms is None) == (cron is None):
        raise ValueError("a repeat needs exactly one of every_ms and cron")
    if cron is not None and first_in_ms:
        raise ValueError("first_in_ms is for every_ms; a cron schedule first runs at its next "
                         "occurrence")  # fmt: skip
    args: list[Arg] = [
        k.prefix,
        check_name("repeat name", name),
        "" if every_ms is None else str(check_ms("every_ms", every_ms, 1)),
        check_payload(template, max_bytes),
        str(check_ms("first_in_ms", first_in_ms)),
        "" if group is None else check_group(group),
        "" if cron is None else cron.expr,
        "" if cron is None else cron.tz,
        str(check_ms("first_at_ms", first_at_ms, absolute=True)),
        "1" if replace else "0",
        str(priority) if check_priority(priority) else "",
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


def fire_call(
    k: QueueKeys, fresh_ids: Sequence[str], moves: Sequence[tuple[str, int, int]] = ()
) -> Call[Fired]:
    """``fire``: up to ``len(fresh_ids)`` occurrences, each becoming a job with one of the ids
    (freshly minted by the caller: minting reads the clock). ``moves``: per due cron
    registration, ``(name, the run it was read at, its next run)`` (server ms), computed by the
    caller from a ``Fired.wanted`` item; one fires only if it still waits for that run."""
    if not fresh_ids:
        raise ValueError("fire needs at least one fresh job id")
    flat: list[Arg] = [k.prefix, str(len(moves))]
    for name, at, nxt in moves:
        if not at < nxt:
            raise ValueError(f"the next run of {name!r} must come after {at}, got {nxt}")
        flat += [
            check_name("repeat name", name),
            str(check_ms("at", at, absolute=True)),
            str(check_ms("next run", nxt, absolute=True)),
        ]
    return _call("fire", k.repeats, [*flat, *(check_job_id(i) for i in fresh_ids)], fire_reply)


def fire_reply(raw: Sequence[Any]) -> Fired:
    r = _named("fire", raw)
    wanted = tuple(
        CronDue(as_text(w["name"]), int(w["at"]), as_text(w["cron"]), as_text(w["tz"]))
        for w in _items("fire/wanted", r["wanted"])
    )
    return Fired(int(r["fired"]), _time(r["next_due"]), int(r["now"]), wanted)


def repeats_call(
    k: QueueKeys, which: str, limit: int, offset: int = 0, name: str = ""
) -> Call[list[Registration]]:
    """``repeats``: ``which`` is ``"all"`` (from ``offset`` in next-run order), ``"due"``, or
    ``"one"`` (the registration ``name``, if any)."""
    if which not in ("all", "due", "one"):
        raise ValueError(f"which must be 'all', 'due' or 'one', got {which!r}")
    lim, off = str(check_int("limit", limit, 1)), str(check_int("offset", offset, 0))
    args: list[Arg] = [k.prefix, which, lim, off]
    if which == "one":
        args.append(check_name("repeat name", name))
    return _call("repeats", k.repeats, args, repeats_reply)


def repeats_reply(raw: Iterable[Sequence[object]]) -> list[Registration]:
    """Per registration ``{name, next run, every ms or '', template, group or '', last fired or
    '', cron or '', zone or '', priority or ''}``."""
    out = []
    for row in raw:
        r = _named("repeats/registration", row)
        last_text, every_text = as_text(r["last_fired"]), as_text(r["every"])
        out.append(
            Registration(
                name=as_text(r["name"]),
                next_run_ms=int(float(as_text(r["next_run"]))),
                every_ms=int(every_text) if every_text else None,
                template=as_bytes(r["template"]),
                group=as_text(r["group"]) or None,
                last_fired_ms=int(last_text) if last_text else None,
                cron=as_text(r["cron"]) or None,
                tz=as_text(r["tz"]) or None,
                priority=int(as_text(r["priority"]) or 0),
            )
        )
    return out


def advance_call(k: QueueKeys, name: str, move: tuple[int, int] | None = None) -> Call[int | None]:
    """``advance``; ``move`` is a cron registration's ``(run read, next run)`` (server ms)."""
    at, nxt = ("", "") if move is None else (str(move[0]), str(move[1]))
    args: list[Arg] = [k.prefix, check_name("repeat name", name), nxt, at]
    return _call("advance", k.repeats, args, advance_reply)


def advance_reply(raw: Any) -> int | None:
    """The next run (server ms), or ``None`` for a name not registered."""
    return _time(raw)
