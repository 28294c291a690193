"""Steps of the server clock (pure, no I/O): noticing them, and what they mean for a time.

Every time the bus keeps is the server's clock (``TIME``), so when that clock steps (an NTP
correction, a VM restored from a snapshot, a clock set by hand) every time written before the
step is off by the step's size. The server has no clock that does not step, but its callers do:
a caller that read the server clock (``seen``) knows, by its own monotonic clock, at least how
much time has passed since (``elapsed``), and how long the call that read it took (``spread``).
Its next call hands that evidence to the script (a ``Witness``), and the script compares it with
the server clock now: a difference of at least ``STEP_LEAST_MS`` either way is a step, recorded
once on the queue's meta (the prelude's ``witness``), whichever caller sees it first.

What a step does (``scripts/README.md``, "When the clock steps"): a wait of a length (a lease,
a lane's wait, a retry's backoff, a deferral, ``enqueue_in``) keeps its length, carried across
by the metronome (``clock.lua``); a time given as a time (``enqueue_at``, a recurring schedule's
anchor) keeps its wall-clock meaning; a recurring schedule is never more than one period away.
An application's own times do the same with ``carried`` (``Step``) or with a private time base
(codemojex's rate limiter).

``Witness`` is the caller's side of the evidence, written for one task at a time (each
metronome and each rate limiter keeps its own); ``Step`` is a recorded step,
``describe_step`` its one-line description for a log, and ``StepLog`` (``Bus.steps``) what a
process has told of already.
"""

from __future__ import annotations

import attrs

from echomq_trio.humane import span

__all__ = ["STEP_LEAST_MS", "Step", "StepLog", "Witness", "describe_step"]

STEP_LEAST_MS = 2_000  # the prelude's STEP_LEAST_MS: smaller steps are not noticed


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


@attrs.frozen
class Step:
    """A step of the server clock recorded on a queue: ``step_ms`` (the new clock less the old:
    negative for a step back) and when it was recorded (``at_ms``, server ms on the new clock)."""

    step_ms: int
    at_ms: int

    def before(self, ms: int) -> bool:
        """Was ``ms`` written on the clock from before the step? Times on either side lie about
        a step apart; those beyond the middle (``at_ms - step_ms / 2``) are from before it."""
        middle = self.at_ms - self.step_ms / 2
        return ms > middle if self.step_ms < 0 else ms < middle

    def carried(self, ms: int) -> int:
        """``ms`` on the clock after the step: moved by the step when written before it."""
        return ms + self.step_ms if self.before(ms) else ms


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
