"""Recurring schedules, registered idempotently under a caller-chosen name.

A registration lives on the server (the queue's ``repeats`` set scored by next run, plus a
``registration`` record), timed by the server clock: every ``every_ms``, or at the occurrences of
a cron expression in a time zone (``echomq_trio.cron``). The metronome ``fire``s due
registrations: each occurrence becomes a job with a fresh ``JOB`` id and the template as payload
(in the registration's lane when it has a group), and the registration moves to its next run
anchored to the schedule, so lateness does not drift it and runs missed while nothing was
running collapse into one. ``fire`` is one atomic script, so any number of metronomes fire each
occurrence exactly once.

Cron, theory of operation. Lua cannot compute cron, so the next run of a cron registration is
computed here and handed to the script: a first ``fire`` call fires what is due every ms and
answers the due cron registrations (``Fired.wanted``: name, the run read, expression, zone); the
next run of each is computed (the first occurrence after the server's now, so missed runs
collapse into one; never before the occurrence after the run read, so it is anchored) and a
second call fires them, each only if it still waits for the run read (compare-and-set on the
stored next run). Two metronomes that read the same run compute their moves apart; the first to
arrive fires the occurrence and moves the run, the other's move no longer matches and does
nothing. A queue with no cron registration makes one call, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from echomq_trio import cron as cron_
from echomq_trio import ids, protocol
from echomq_trio._checks import JOB_NS, check_int
from echomq_trio.bus import Bus
from echomq_trio.results import CronDue, Fired, Registered, Registration

__all__ = [
    "Clock",
    "CronDue",
    "Fired",
    "Registered",
    "Registration",
    "advance",
    "cancel",
    "due",
    "fire",
    "get",
    "list_repeats",
    "next_runs",
    "register",
]

log = logging.getLogger("echomq_trio.repeat")

# What cron schedules count as now, given the server's now (Unix ms): by default the server's
# now itself. Injectable for tests and simulations (a clock in the past walks occurrences one
# by one; the server still decides what is due).
Clock = Callable[[int], int]

# Calls that move cron registrations, at most, per fire: one, and more only when another
# metronome moved a registration to a run already due in between (each call answers what is due
# then).
CRON_ROUNDS = 3


def _server_now(now_ms: int) -> int:
    return now_ms


async def register(
    bus: Bus,
    queue: str,
    name: str,
    every_ms: int | None = None,
    template: str | bytes | None = None,
    first_in_ms: int = 0,
    group: str | None = None,
    *,
    cron: str | None = None,
    tz: str = "UTC",
    replace: bool = False,
    clock: Clock | None = None,
    priority: int = 0,
) -> tuple[Registered, int]:
    """Register ``name`` to fire every ``every_ms``, first ``first_in_ms`` from now (server
    clock); or, with ``cron`` instead (``"0 9 * * MON-FRI"``), at each occurrence of the cron
    expression in the zone ``tz`` (an IANA name; ``UTC`` by default), first at its next
    occurrence after now (the DST rule is ``echomq_trio.cron``'s). Exactly one of ``every_ms``
    and ``cron``; a bad expression or an unknown zone is a ``ValueError`` before any I/O.

    Answers ``(REGISTERED, first run)``, or ``(EXISTS, next run)`` for a live name, which is left
    unchanged (cancel it first to change it). With ``replace=True`` a live name whose schedule,
    template or lane differs is replaced, ``(REPLACED, first run)``, and one that is the same is
    still left as it is (``EXISTS``): for a service whose schedule is a setting. ``clock``: see
    ``Clock`` (the first cron run is the first occurrence after ``clock(server now)``).
    ``priority``: every job it fires carries it (as for ``jobs.enqueue``); a live name with
    another priority differs (``replace``).

    A cancelled call may or may not have registered it; call again: ``EXISTS`` then means the
    first call went through."""
    if template is None:
        raise TypeError("register needs a template (the payload of each occurrence's job)")
    k = bus.keys(queue)
    if cron is None:
        call = protocol.register_call(
            k, name, every_ms, template, bus.max_payload_bytes,
            first_in_ms=first_in_ms, group=group, replace=replace, priority=priority,
        )  # fmt: skip
        return await bus.run(call)
    if every_ms is not None:
        raise ValueError("a repeat needs exactly one of every_ms and cron")
    schedule = cron_.parse(cron, tz)
    protocol.register_call(  # the other checks, before any I/O
        k, name, None, template, bus.max_payload_bytes, first_in_ms=first_in_ms, group=group,
        cron=schedule, priority=priority,
    )  # fmt: skip
    now = (clock or _server_now)(await bus.transport.server_time_ms())
    first = cron_.next_after(schedule, now)
    if first is None:
        raise ValueError(f"cron expression {cron!r} does not occur within 50 years")
    call = protocol.register_call(
        k, name, None, template, bus.max_payload_bytes, group=group, cron=schedule,
        first_at_ms=first, replace=replace, priority=priority,
    )  # fmt: skip
    return await bus.run(call)


async def cancel(bus: Bus, queue: str, name: str) -> bool:
    """Remove a registration; ``True`` if it existed (jobs already fired are left alone).

    A cancelled call may or may not have removed it; call again (``False`` then)."""
    return await bus.run(protocol.unregister_call(bus.keys(queue), name))


async def fire(bus: Bus, queue: str, batch: int = 100, *, clock: Clock | None = None) -> Fired:
    """Fire up to ``batch`` due occurrences (what a metronome does each beat); cron ones take a
    second call (see the module's docstring). ``clock``: see ``Clock``.

    A cancelled call may or may not have fired them; calling again is always safe (each
    occurrence fires exactly once)."""
    k = bus.keys(queue)
    fresh = [ids.generate(JOB_NS) for _ in range(check_int("batch", batch, 1))]
    f = await bus.run(protocol.fire_call(k, fresh))
    fired = f.fired
    for _ in range(CRON_ROUNDS):
        if not f.wanted:
            break
        now = (clock or _server_now)(f.server_now_ms)
        moves = [m for m in (_move(w, now) for w in f.wanted) if m is not None]
        if not moves:
            break
        fresh = [ids.generate(JOB_NS) for _ in range(len(moves) + batch)]
        f = await bus.run(protocol.fire_call(k, fresh, moves))
        fired += f.fired
    return attrs.evolve(f, fired=fired)


def _move(due: CronDue, now_ms: int) -> tuple[str, int, int] | None:
    """``(name, run read, next run)`` for a due cron registration; ``None`` (logged) when it has
    no next run here (a zone this machine's database lacks, or no occurrence left)."""
    try:
        nxt = cron_.next_after(cron_.parse(due.cron, due.tz), max(due.at_ms, now_ms))
    except ValueError as exc:
        log.error("repeat %r cannot be fired here: %s", due.name, exc)
        return None
    if nxt is None:
        log.error("repeat %r cannot be fired here: %r has no occurrence left", due.name, due.cron)
        return None
    return (due.name, due.at_ms, nxt)


def next_runs(reg: Registration, n: int = 3) -> list[int]:
    """The next ``n`` runs of ``reg`` (server ms), its next run first (pure: for displays)."""
    if reg.cron is None:
        every = reg.every_ms or 1
        return [reg.next_run_ms + i * every for i in range(n)]
    schedule = cron_.parse(reg.cron, reg.tz or "UTC")
    return [reg.next_run_ms, *cron_.upcoming(schedule, reg.next_run_ms, n - 1)][:n]


async def get(bus: Bus, queue: str, name: str) -> Registration | None:
    """The registration ``name``, or ``None``. Read only."""
    found = await bus.run(protocol.repeats_call(bus.keys(queue), "one", 1, name=name))
    return found[0] if found else None


async def list_repeats(
    bus: Bus, queue: str, limit: int = 1000, offset: int = 0
) -> list[Registration]:
    """Registrations, soonest next run first: ``limit`` of them from rank ``offset`` (a page;
    O(log n + limit) on the server). Read only."""
    call = protocol.repeats_call(bus.keys(queue), "all", limit, offset)
    return await bus.run(call)


async def due(bus: Bus, queue: str, limit: int = 100) -> list[Registration]:
    """Registrations whose next run has come (server clock), for a hand-written pump. Read
    only."""
    call = protocol.repeats_call(bus.keys(queue), "due", limit)
    return await bus.run(call)


async def advance(bus: Bus, queue: str, name: str, *, clock: Clock | None = None) -> int | None:
    """Move ``name`` to its next run anchored to its schedule; ``None`` if it is not registered.
    A cron registration moves to its first occurrence after the later of its run and now
    (``clock``: see ``Clock``), unless another caller moved it meanwhile (then it stays where
    that caller put it, which is answered).

    Not idempotent: each call moves it one run further. A cancelled call may or may not have
    moved it; read ``list_repeats`` before calling again."""
    k = bus.keys(queue)
    reg = await get(bus, queue, name)
    if reg is None or reg.cron is None:
        return await bus.run(protocol.advance_call(k, name))
    now = (clock or _server_now)(await bus.transport.server_time_ms())
    move = _move(CronDue(name, reg.next_run_ms, reg.cron, reg.tz or "UTC"), now)
    if move is None:
        raise ValueError(f"repeat {name!r} has no next run here (see the log)")
    return await bus.run(protocol.advance_call(k, name, (move[1], move[2])))
