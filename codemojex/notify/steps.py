"""What a chat task does next with the notice it holds (pure: no I/O, no clock, no task).

A chat task (``codemojex.notify.worker``) asks three questions while it holds a notice, and each
has one function here that answers with a value the task then carries out:

* ``after_take(take, policy)``: the rate limiter answered; ``Send`` now, send when the
  ``Booked`` slot comes, ``Hold`` the notice in the task for a short wait (its lease renewed),
  or defer it durably for a long one (``DeferIn``).
* ``after_answer(verdict, attempts, policy, rng)``: Telegram answered; ``Done`` (ack),
  ``RetryIn`` (spends the attempt), ``Bury`` (dead with the reason), ``Flood`` (a 429: pause,
  then ``after_flood``), ``Follow`` (a migration: resend to the new id), ``AskBot`` (5xx, no
  answer, or an answer that is not the Bot API's: ask whether the bot is reachable at all, then
  ``after_asking``) or ``Stop`` (the bot is refused).
* ``after_flood(wait_ms, flooded_for_ms, policy)``: a 429 for ``wait_ms``, the chat answering 429
  for ``flooded_for_ms`` already: ``Hold``, ``DeferIn``, or ``Bury`` once that passes the cap.
* ``after_asking(bot_down, ...)``: the bot is down for everyone: ``BotDown`` (hold the notice,
  no attempt spent, until a probe succeeds); else the failure was this chat's: ``RetryIn``, its
  reason saying so.

What ends a notice's handling is said in the bus's own words (``echomq_trio.settlement``):
``RetryIn``, ``DeferIn`` and ``Bury`` are what the chat's handler returns; ``Done`` becomes an
``Ack`` with the delivery's note.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs

from codemojex.notify.rate_limiter import Take
from codemojex.telegram.classify import Delivered, Drop, Fatal, Migrate, RetryLater, Verdict
from echomq_trio.backoff import Exponential, Jitter, Policy, delay_ms
from echomq_trio.settlement import Bury, DeferIn, RetryIn

__all__ = [
    "BACKOFF",
    "DEFAULT_HOLD_MAX_MS",
    "DEFAULT_STUCK_AFTER_MS",
    "MAX_ATTEMPTS",
    "AskBot",
    "Booked",
    "BotDown",
    "Done",
    "Flood",
    "Follow",
    "Hold",
    "Send",
    "StepPolicy",
    "Stop",
    "after_answer",
    "after_asking",
    "after_flood",
    "after_take",
    "slot_missed",
]

MAX_ATTEMPTS = 6
BACKOFF: Policy = Jitter(Exponential(500, 30_000))
# Waits up to this are held in the chat task; longer ones are deferred on the server. A notice
# that misses its booked global slot queues again behind the others booked (up to 2 x the
# notices held / 30 s): shorter, those waits were deferred, each deferred lane kept its slot
# while the worker claimed another chat, which reserved further still (the docs' benchmarks,
# "Measurements behind the design"). 5 s is also the renewal period of the default 15 s lease,
# and below a group chat's 20/min window (3 s per message), which is deferred.
DEFAULT_HOLD_MAX_MS = 5_000
# A chat answering 429 for this long in a row (across notices, deferrals and processes): its
# notice is dead with the reason instead of deferred again.
DEFAULT_STUCK_AFTER_MS = 3_600_000


def _at_least(low: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{attr.name} must be an int >= {low}, got {value!r}")

    return check


@attrs.frozen
class StepPolicy:
    hold_max_ms: int = attrs.field(default=DEFAULT_HOLD_MAX_MS, validator=_at_least(0))
    stuck_after_ms: int = attrs.field(default=DEFAULT_STUCK_AFTER_MS, validator=_at_least(1))
    max_attempts: int = attrs.field(default=MAX_ATTEMPTS, validator=_at_least(1))
    backoff: Policy = BACKOFF


# --- the steps -------------------------------------------------------------------------------


@attrs.frozen
class Send:
    """A send is taken: send now."""


@attrs.frozen
class Booked:
    """A send is booked ``ms`` from the take: wait in the chat task, then send without asking
    the limiter again; or, with ``ask_ms``, ask again after that many ms, passing the booking
    back, so the limiter can bring the slot forward once the sends before it have answers."""

    ms: int
    ask_ms: int = 0


@attrs.frozen
class Hold:
    """Wait ``ms`` in the chat task, holding the notice, then ask the limiter again."""

    ms: int
    reason: str


@attrs.frozen
class Done:
    """Delivered: ack, with Telegram's message id and the chat reached for the audit.
    ``already``: not sent now, because the audit archive records it delivered (the ledger)."""

    message_id: int | None
    chat: int = 0  # filled in by the worker: the id sent to (after a migration, the new one)
    already: bool = False


@attrs.frozen
class Flood:
    """A 429: pause the limiter for ``ms`` (the chat's, or everyone's), then ``after_flood``."""

    ms: int
    reason: str


@attrs.frozen
class Follow:
    """The group moved: remember the new id and resend there at once."""

    new_chat_id: int


@attrs.frozen
class AskBot:
    """5xx, no answer, or not the Bot API's answer: ask whether the bot reaches Telegram at all,
    then ``after_asking``."""

    reason: str
    floor_ms: int  # the server's own retry hint, if it gave one (else 0)
    cause: str = "server_error"  # one of ``codemojex.telegram.classify.CAUSES``


@attrs.frozen
class BotDown:
    """Telegram is down for every chat: hold the notice, spending nothing, until it is back."""

    reason: str
    cause: str = "server_error"


@attrs.frozen
class Stop:
    """Telegram refuses the bot itself: stop the worker (the notice goes back)."""

    reason: str


# --- the decisions ---------------------------------------------------------------------------


def after_take(take: Take, policy: StepPolicy) -> Send | Booked | Hold | DeferIn:
    if take.ok:
        return Send()
    if take.blocked_by == "booked":
        return Booked(take.wait_ms, take.ask_ms)
    reason = f"rate limit ({take.blocked_by})"
    if take.wait_ms <= policy.hold_max_ms:
        return Hold(take.wait_ms, reason)
    return DeferIn(take.wait_ms, reason)


def slot_missed(late_ms: float, trip_ms: float, margin_ms: int) -> bool:
    """Whether a chat task about to send on its slot (taken now, or booked and waited for) must
    hand it back to the limiter and ask again instead of sending. The limiter counts on a send
    reaching Telegram within the margin of its slot; the slot was set on the server between the
    asking and the answer, so it lies ``late_ms`` (counted from the answer) to ``late_ms +
    trip_ms`` (the answer's round trip) behind. Missed: later than half the margin counted from
    the answer (the other half is the trip's), or an answer that took longer than the whole
    margin (this process, the link or the server stalled on the way, and the slot may lie
    seconds back, where a send would overfill Telegram's window)."""
    return late_ms > margin_ms / 2 or trip_ms > margin_ms


def after_answer(
    verdict: Verdict, attempts: int, policy: StepPolicy, rng: random.Random | None = None
) -> Done | RetryIn | Bury | Flood | Follow | AskBot | Stop:
    if isinstance(verdict, Delivered):
        return Done(verdict.message_id)
    if isinstance(verdict, Migrate):
        return Follow(verdict.new_chat_id)
    if isinstance(verdict, Drop):
        return Bury(verdict.reason)
    if isinstance(verdict, Fatal):
        return Stop(verdict.reason)
    if isinstance(verdict, RetryLater):
        if verdict.flood:
            return Flood(verdict.delay_ms or 1000, f"429: {verdict.reason}")
        if verdict.server:
            return AskBot(verdict.reason, verdict.delay_ms or 0, verdict.cause)
        return _retry(verdict.reason, verdict.delay_ms or 0, attempts, policy, rng)
    raise AssertionError(f"unhandled verdict {verdict!r}")  # pragma: no cover


def after_flood(wait_ms: int, flooded_for_ms: int, policy: StepPolicy) -> Hold | DeferIn | Bury:
    if flooded_for_ms >= policy.stuck_after_ms:
        return Bury(f"429 for {flooded_for_ms // 1000} s in a row: the chat is stuck")
    if wait_ms <= policy.hold_max_ms:
        return Hold(wait_ms, "429")
    return DeferIn(wait_ms, "429")


def after_asking(
    bot_down: bool,
    probe: AskBot,
    attempts: int,
    policy: StepPolicy,
    rng: random.Random | None = None,
) -> BotDown | RetryIn:
    if bot_down:
        return BotDown(probe.reason, probe.cause)
    reason = f"{probe.reason} (getMe answered: this chat's failure)"
    return _retry(reason, probe.floor_ms, attempts, policy, rng)


def _retry(
    reason: str, floor_ms: int, attempts: int, policy: StepPolicy, rng: random.Random | None
) -> RetryIn:
    return RetryIn(max(delay_ms(policy.backoff, max(attempts, 1), rng), floor_ms), reason)
