"""The consumer's settlement decision: what a handler's result means for its job. Pure.

A handler returns ``None``, ``Ack``, ``RetryIn``, ``DeferIn`` or ``Bury``, a result (``str`` or
``bytes``), or raises. ``decide`` turns that, the job and the consumer's ``SettlePolicy`` into
the one transition to run:

========================  ==========================================================  =============
handler                   transition                                                  script
========================  ==========================================================  =============
``None``                  ``AckJob("")``                                              ack
``Ack(note)``             ``AckJob(note)``                                            ack
``Ack(note, result=r)``   ``AckJob(note, r as bytes)``                                ack, results
a ``str``/``bytes`` r     ``AckJob("", r as bytes)``                                  ack, results
``RetryIn(ms, why)``      ``RetryJob(ms, why, max_attempts)``                         retry
raises ``exc``            ``RetryJob(backoff delay, "Type: message", max_attempts)``  retry
``DeferIn(ms, why)``      ``DeferJob(ms, why)``                                       defer
``Bury(why)``             ``BuryJob(why)``                                            retry, buried
timed out (``TimedOut``)  ``RetryJob(backoff delay, "timed out after N ms", ...)``    retry
raises refused writes     ``DeferJob(backoff delay, "the bus failed: ...")``          defer
anything else             as if the handler raised a ``TypeError`` saying so          retry
========================  ==========================================================  =============

A result is kept with the finished job when its queue keeps results (``jobs.keep_results``), for
``jobs.result`` and ``get_job`` to read; a queue that keeps none drops it. A result over the
policy's ``max_result_bytes`` is the handler's error (a ``ValueError`` saying so), retried as
any other. An ack with no result runs the plain ack (the same script and arguments as before
results existed).

Refused writes are ``WritesRefused`` (a full disk, the memory ceiling, a failover), raised by a
call the handler made to the bus (an enqueue, say): the server takes writes again by itself,
and the job did not fail, so its attempt is given back and it runs again after the backoff
(while the server refuses writes the deferral itself waits, and the consumer claims nothing).
Any other failure of the bus (a dropped connection, a timeout) is the attempt's, as before: a
failure that lasts (refused credentials, say) ends in the dead set, not in deferrals forever.
A retry that has used ``max_attempts`` is buried by the server (the job is dead with the error).
``StopConsumer`` is not a result: the consumer stops and hands the job back, it never gets here.
Nor is a cancel (``jobs.cancel``): the job is the server's already, the consumer settles nothing.
A handler cancelled at its deadline (the job's ``timeout_ms``, or the consumer's ``timeout_s``)
is ``TimedOut``, which the consumer passes here: a failed attempt like an exception, so
``max_attempts`` and the backoff apply.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

import attrs

from echomq_trio._checks import DEFAULT_MAX_PAYLOAD_BYTES, MAX_DELAY_MS
from echomq_trio.backoff import Policy, delay_ms
from echomq_trio.errors import WritesRefused

if TYPE_CHECKING:
    from echomq_trio.jobs import Job

__all__ = [
    "Ack",
    "AckJob",
    "Bury",
    "BuryJob",
    "DeferIn",
    "DeferJob",
    "HandlerResult",
    "RetryIn",
    "RetryJob",
    "SettlePolicy",
    "TimedOut",
    "Transition",
    "decide",
    "error_text",
]


def _delay_ms(value: object) -> int:
    """A handler's delay: a number of ms, rounded up (never early) and kept within what the
    server's scores hold (0 to ``MAX_DELAY_MS``). Anything else is a ``TypeError`` where the
    handler builds it, so it counts as the handler's own error."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise TypeError(f"delay_ms must be a number of ms, got {value!r}")
    return int(min(max(0, math.ceil(value)), MAX_DELAY_MS))


# --- what a handler returns ------------------------------------------------------------------


def _result(value: object) -> bytes | None:
    """A handler's result as bytes (``str`` as UTF-8); ``None`` for none. Anything else is a
    ``TypeError`` where the handler builds it, so it counts as the handler's own error."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"result must be str or bytes, got {type(value).__name__}")


@attrs.frozen
class Ack:
    """Returned by a handler: done, like returning ``None``, with a ``note`` for the queue's
    audit record (for example what the far side answered) and a ``result`` (``str`` or
    ``bytes``) kept with the finished job when its queue keeps results (``jobs.keep_results``;
    returning a ``str`` or ``bytes`` is ``Ack(result=...)``)."""

    note: str = ""
    result: bytes | None = attrs.field(default=None, converter=_result, kw_only=True)


@attrs.frozen
class RetryIn:
    """Returned by a handler: fail this attempt and try again after ``delay_ms``."""

    delay_ms: int = attrs.field(converter=_delay_ms)
    reason: str = "retry requested by handler"


@attrs.frozen
class DeferIn:
    """Returned by a handler: not now, and not a failure. The job waits ``delay_ms`` without
    spending an attempt; a lane job keeps its place and its lane waits with it."""

    delay_ms: int = attrs.field(converter=_delay_ms)
    reason: str = "deferred by handler"


@attrs.frozen
class Bury:
    """Returned by a handler: this job can never succeed (a permanent error). It goes to the dead
    set at once with ``reason``, where it can be listed and replayed."""

    reason: str


HandlerResult = Ack | RetryIn | DeferIn | Bury | str | bytes | None


@attrs.frozen
class TimedOut:
    """Not returned by a handler: what the consumer passes to ``decide`` for a handler it
    cancelled at its deadline of ``timeout_ms``."""

    timeout_ms: int

    @property
    def error(self) -> str:
        """The error the failed attempt keeps."""
        return f"timed out after {self.timeout_ms} ms"


# --- what the consumer runs --------------------------------------------------------------------


@attrs.frozen
class AckJob:
    """Finish the job (script ``ack``); ``note`` goes into the audit record, ``result`` (``None``:
    none) is kept with the finished job when the queue keeps results."""

    note: str = ""
    result: bytes | None = None


@attrs.frozen
class RetryJob:
    """Fail the attempt (script ``retry``): scheduled again after ``delay_ms``, or dead with
    ``error`` once the job has used ``max_attempts``."""

    delay_ms: int
    error: str
    max_attempts: int


@attrs.frozen
class DeferJob:
    """Put the job back to wait ``delay_ms`` without spending an attempt (script ``defer``)."""

    delay_ms: int
    reason: str


@attrs.frozen
class BuryJob:
    """Dead at once with ``reason`` (script ``retry``, buried: audited as dropped)."""

    reason: str


Transition = AckJob | RetryJob | DeferJob | BuryJob


@attrs.frozen
class SettlePolicy:
    """The consumer's settings that shape a decision. ``rng`` draws the jitter of ``backoff``
    (the ``random`` module's own when ``None``); pass a seeded one for repeatable delays."""

    max_attempts: int
    backoff: Policy
    rng: random.Random | None = attrs.field(default=None, eq=False)
    max_result_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES  # a larger result is the handler's error


def error_text(exc: BaseException) -> str:
    """How a raised exception is kept as a job's error: ``"Type: message"``."""
    return f"{type(exc).__name__}: {exc}"


def decide(
    result: HandlerResult | Exception | TimedOut, job: Job, policy: SettlePolicy
) -> Transition:
    """The transition for ``job`` after its handler returned (or raised) ``result``, or was
    cancelled at its deadline (``TimedOut``)."""
    if result is None:
        return AckJob()
    if isinstance(result, str | bytes):
        result = Ack(result=result)
    if isinstance(result, Ack):
        kept = result.result
        if kept is None or len(kept) <= policy.max_result_bytes:
            return AckJob(result.note, kept)
        result = ValueError(
            f"result of {len(kept)} bytes is over max_result_bytes ({policy.max_result_bytes})"
        )
    if isinstance(result, RetryIn):
        return RetryJob(result.delay_ms, result.reason, policy.max_attempts)
    if isinstance(result, DeferIn):
        return DeferJob(result.delay_ms, result.reason)
    if isinstance(result, Bury):
        return BuryJob(result.reason)
    if isinstance(result, TimedOut):
        wait = delay_ms(policy.backoff, max(job.attempts, 1), policy.rng)
        return RetryJob(wait, result.error, policy.max_attempts)
    if not isinstance(result, Exception):
        result = TypeError(
            f"handler returned {result!r}; expected None, str, bytes, Ack, RetryIn, DeferIn or Bury"
        )
    wait = delay_ms(policy.backoff, max(job.attempts, 1), policy.rng)
    if isinstance(result, WritesRefused):
        return DeferJob(wait, f"the bus failed: {error_text(result)}")
    return RetryJob(wait, error_text(result), policy.max_attempts)
