"""Recurring schedules, registered idempotently under a caller-chosen name.

A registration lives on the server (``emq:{q}:repeat`` scored by next run, plus a record hash),
timed by the server clock. The metronome ``fire``s due registrations: each occurrence becomes a
job with a fresh ``JOB`` id and the template as payload (in the registration's lane when it has
a group), and the registration moves to its next run anchored to the schedule, so lateness does
not drift it and runs missed while nothing was running collapse into one. ``fire`` is one
atomic script, so any number of metronomes fire each occurrence exactly once.
"""

from __future__ import annotations

import enum

import attrs

from echomq_trio import ids
from echomq_trio.bus import Bus
from echomq_trio.keys import (
    JOB_NS,
    as_text,
    check_group,
    check_int,
    check_ms,
    check_name,
    check_payload,
)

__all__ = [
    "Fired",
    "Registered",
    "Registration",
    "advance",
    "cancel",
    "due",
    "fire",
    "list_repeats",
    "register",
]


class Registered(enum.StrEnum):
    REGISTERED = "registered"
    EXISTS = "exists"


@attrs.frozen
class Registration:
    name: str
    next_run_ms: int
    every_ms: int
    template: bytes
    group: str | None
    last_fired_ms: int | None


@attrs.frozen
class Fired:
    fired: int
    next_due_ms: int | None
    server_now_ms: int


async def register(
    bus: Bus,
    queue: str,
    name: str,
    every_ms: int,
    template: str | bytes,
    first_in_ms: int = 0,
    group: str | None = None,
) -> tuple[Registered, int]:
    """Register ``name`` to fire every ``every_ms``, first ``first_in_ms`` from now (server
    clock). Answers ``(REGISTERED, first run)``, or ``(EXISTS, next run)`` for a live name, which
    is left unchanged (cancel it first to change it)."""
    k = bus.keys(queue)
    args: list[str | bytes] = [
        k.prefix,
        check_name("repeat name", name),
        str(check_ms("every_ms", every_ms, 1)),
        check_payload(template, bus.max_payload_bytes),
        str(check_ms("first_in_ms", first_in_ms)),
        "" if group is None else check_group(group),
    ]
    code, at = await bus.wire.script("register", [k.repeat], args)
    return (Registered.REGISTERED if code == 1 else Registered.EXISTS, int(at))


async def cancel(bus: Bus, queue: str, name: str) -> bool:
    """Remove a registration; ``True`` if it existed (jobs already fired are left alone)."""
    k = bus.keys(queue)
    code = await bus.wire.script(
        "unregister", [k.repeat], [k.prefix, check_name("repeat name", name)]
    )
    return bool(code)


async def fire(bus: Bus, queue: str, batch: int = 100) -> Fired:
    """Fire up to ``batch`` due occurrences (what a metronome does each beat)."""
    k = bus.keys(queue)
    fresh = [ids.generate(JOB_NS) for _ in range(check_int("batch", batch, 1))]
    n, nxt, now = await bus.wire.script("fire", [k.repeat], [k.prefix, *fresh])
    return Fired(int(n), None if nxt < 0 else int(nxt), int(now))


def _registrations(rows: list[list[object]]) -> list[Registration]:
    return [
        Registration(
            name=as_text(r[0]),
            next_run_ms=int(float(as_text(r[1]))),
            every_ms=int(as_text(r[2])),
            template=r[3] if isinstance(r[3], bytes) else as_text(r[3]).encode(),
            group=as_text(r[4]) or None,
            last_fired_ms=int(as_text(r[5])) if as_text(r[5]) else None,
        )
        for r in rows
    ]


async def list_repeats(bus: Bus, queue: str, limit: int = 1000) -> list[Registration]:
    """Registrations, soonest next run first."""
    k = bus.keys(queue)
    rows = await bus.wire.script(
        "repeats", [k.repeat], [k.prefix, "all", str(check_int("limit", limit, 1))]
    )
    return _registrations(rows)


async def due(bus: Bus, queue: str, limit: int = 100) -> list[Registration]:
    """Registrations whose next run has come (server clock), for a hand-written pump."""
    k = bus.keys(queue)
    rows = await bus.wire.script(
        "repeats", [k.repeat], [k.prefix, "due", str(check_int("limit", limit, 1))]
    )
    return _registrations(rows)


async def advance(bus: Bus, queue: str, name: str) -> int | None:
    """Move ``name`` to its next run anchored to its schedule; ``None`` if it is not registered."""
    k = bus.keys(queue)
    nxt = await bus.wire.script("advance", [k.repeat], [k.prefix, check_name("repeat name", name)])
    return None if nxt < 0 else int(nxt)
