"""Recurring schedules, registered idempotently under a caller-chosen name.

A registration lives on the server (the queue's ``repeats`` set scored by next run, plus a
``registration`` record), timed by the server clock. The metronome ``fire``s due registrations:
each occurrence becomes a job with a fresh ``JOB`` id and the template as payload (in the
registration's lane when it has a group), and the registration moves to its next run anchored
to the schedule, so lateness does not drift it and runs missed while nothing was running
collapse into one. ``fire`` is one atomic script, so any number of metronomes fire each
occurrence exactly once.
"""

from __future__ import annotations

from echomq_trio import ids, protocol
from echomq_trio._checks import JOB_NS, check_int
from echomq_trio.bus import Bus
from echomq_trio.results import Fired, Registered, Registration

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
    is left unchanged (cancel it first to change it).

    A cancelled call may or may not have registered it; call again: ``EXISTS`` then means the
    first call went through."""
    call = protocol.register_call(
        bus.keys(queue), name, every_ms, template, bus.max_payload_bytes,
        first_in_ms=first_in_ms, group=group,
    )  # fmt: skip
    return await bus.run(call)


async def cancel(bus: Bus, queue: str, name: str) -> bool:
    """Remove a registration; ``True`` if it existed (jobs already fired are left alone).

    A cancelled call may or may not have removed it; call again (``False`` then)."""
    return await bus.run(protocol.unregister_call(bus.keys(queue), name))


async def fire(bus: Bus, queue: str, batch: int = 100) -> Fired:
    """Fire up to ``batch`` due occurrences (what a metronome does each beat).

    A cancelled call may or may not have fired them; calling again is always safe (each
    occurrence fires exactly once)."""
    k = bus.keys(queue)
    fresh = [ids.generate(JOB_NS) for _ in range(check_int("batch", batch, 1))]
    return await bus.run(protocol.fire_call(k, fresh))


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


async def advance(bus: Bus, queue: str, name: str) -> int | None:
    """Move ``name`` to its next run anchored to its schedule; ``None`` if it is not registered.

    Not idempotent: each call moves it one run further. A cancelled call may or may not have
    moved it; read ``list_repeats`` before calling again."""
    call = protocol.advance_call(bus.keys(queue), name)
    return await bus.run(call)
