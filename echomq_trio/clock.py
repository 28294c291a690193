"""Steps of the server clock (pure, no I/O): noticing them, and what they mean for a time.

Every time the bus keeps is the server's clock (``TIME``), so when that clock steps (an NTP
correction, a VM restored from a snapshot, a clock set by hand) every time written before the
step is off by the step's size. The server has no clock that does not step, but its callers do:
a caller that read the server clock (``seen``) knows, by its own monotonic clock, at least how
much time has passed since (``elapsed``), and how long the call that read it took (``spread``).
Its next call hands that evidence to the script (a ``Witness``), and the script compares it with
the server clock now: a difference of at least ``STEP_LEAST_MS`` either way is a step, recorded
once on the queue's meta (the prelude's ``witness``), whichever caller sees it first.

What a step does (``scripts/README.md``, "When the clock steps"): a wait of a length (a lane's
wait, a retry's backoff, a deferral, ``enqueue_in``) keeps its length, carried across by the
metronome (``clock.lua``); a lease is never shortened under a live holder (no lease is reaped
for ``REAP_GRACE_MS`` after a step, so holders renew first); an expiry given as a length
(``expires_in``) moves with the step, one given as a time (``expires_at``) does not; a time
given as a time (``enqueue_at``, a recurring schedule's anchor) keeps its wall-clock meaning;
a recurring schedule is never more than one period away. The queue's meta keeps the sum of
every step recorded (``clock_total``, ``jobs.clock_total``): an application reads its own times
across steps by noting the sum when it writes a time and adding what it grew by since
(codemojex's rounds), or keeps a clock of its own that the steps do not move (the prelude's
``steady_ms``: codemojex's rate limiter).

A step is told apart from the caller's own delays by the witness's bounds: a step back is
certain (nothing makes time run backwards); a step forward is a difference beyond the call's
own time and ``STEP_LEAST_MS``, so a server that stalls for longer than that between a call's
sending and its running reads as a step forward of the stall's length: its waits are then
carried that much later, once (they wait longer, never shorter).

``Witness`` is the caller's side of the evidence, written for one task at a time (each
metronome and each rate limiter keeps its own); ``describe_step`` is a step's one-line
description for a log, and ``StepLog`` (``Bus.steps``) what a process has told of already.
"""

from __future__ import annotations

import attrs

from servicekit.humane import span

__all__ = ["REAP_GRACE_MS", "STEP_LEAST_MS", "StepLog", "Witness", "describe_step"]

STEP_LEAST_MS = 2_000  # the prelude's STEP_LEAST_MS: smaller steps are not noticed
# After a step is recorded no lease is reaped for this long, so that every live holder renews
# its lease on the new clock first (a consumer renews each third of its lease: 30 s by default);
# the metronome uses it after refused writes too.
REAP_GRACE_MS = 30_000


@attrs.define
class Witness:
    """What a caller knows of the server clock: the server ms it last read, and the times (its
    monotonic clock, seconds) around the call that read it. ``args(now)`` is what a script takes
    (``('', '0', '0')`` before any reading); ``observe`` records a reading."""

    seen_ms: int | None = None
    sent_at: float = 0.0
    answered_at: float = 0.0

    def args(self, now: float) -> tuple[str, str, str]:
        """``(seen, elapsed ms, spread ms)`` for a call sent at ``now`` (monotonic seconds):
        ``elapsed`` is at least the time since the reading (rounded down), ``spread`` how long
        its call took (rounded up)."""
        if self.seen_ms is None:
            return ("", "0", "0")
        elapsed = max(0, int((now - self.answered_at) * 1000))
        spread = max(0, -int(-(self.answered_at - self.sent_at) * 1000 // 1))
        return (str(self.seen_ms), str(elapsed), str(spread))

    def observe(self, server_ms: int, sent_at: float, answered_at: float) -> None:
        """A call sent at ``sent_at`` and answered at ``answered_at`` read ``server_ms``."""
        self.seen_ms = server_ms
        self.sent_at = sent_at
        self.answered_at = answered_at


@attrs.define
class StepLog:
    """The steps a process has told of lately, so a step that several queues' metronomes see
    (each queue records it) is logged once: ``news`` is true for a step unlike any told within
    ``memory_s`` (monotonic seconds)."""

    memory_s: float = 60.0
    _told: list[tuple[float, int]] = attrs.field(factory=list)

    def news(self, step_ms: int, now: float) -> bool:
        self._told = [(t, s) for t, s in self._told if now - t < self.memory_s]
        if any(abs(s - step_ms) < STEP_LEAST_MS for _, s in self._told):
            return False
        self._told.append((now, step_ms))
        return True


def describe_step(step_ms: int) -> str:
    """``'back 1 h (-3,600,012 ms)'`` or ``'forward 3 s (2,512 ms)'``."""
    way = "back" if step_ms < 0 else "forward"
    return f"{way} {span(round(step_ms, -3))} ({step_ms:,} ms)"  # a step is known to the ms
