"""Retry delay policies: fixed, capped exponential, and full jitter around either.

Pure: the caller passes ``attempts`` (the attempt that just failed, from 1) and may pass its own
``random.Random`` so tests are deterministic. The bus stores only the literal delay it is given.
``RECONNECT`` is the bus's own policy for trying the server again after a failed call.
"""

from __future__ import annotations

import random

import attrs

__all__ = ["RECONNECT", "Exponential", "Fixed", "Jitter", "Policy", "delay_ms", "reconnect_delay_s"]


def _non_negative(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{attr.name} must be a non-negative int, got {value!r}")


@attrs.frozen
class Fixed:
    """The same delay after every failure."""

    ms: int = attrs.field(validator=_non_negative)


@attrs.frozen
class Exponential:
    """``min(base * 2**(attempts-1), cap)``."""

    base: int = attrs.field(validator=_non_negative)
    cap: int = attrs.field(validator=_non_negative)


@attrs.frozen
class Jitter:
    """Full jitter: a uniform integer in ``0..inner`` inclusive, so failures that happened together
    do not retry together."""

    inner: Fixed | Exponential


Policy = Fixed | Exponential | Jitter


def delay_ms(policy: Policy, attempts: int, rng: random.Random | None = None) -> int:
    """The delay in ms before retrying after failed attempt number ``attempts`` (>= 1)."""
    if not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts must be an int >= 1, got {attempts!r}")
    if isinstance(policy, Fixed):
        return policy.ms
    if isinstance(policy, Exponential):
        # Avoid building a huge int for large attempt counts: past the cap it is the cap.
        if attempts > 64:
            return policy.cap
        return min(policy.base * (1 << (attempts - 1)), policy.cap)
    if isinstance(policy, Jitter):
        bound = delay_ms(policy.inner, attempts)
        if bound <= 0:
            return 0
        return (rng or random).randint(0, bound)
    raise TypeError(f"not a backoff policy: {policy!r}")


RECONNECT: Policy = Exponential(100, 1_000)
"""The bus's own pause between tries when the server does not answer (a claim, a settlement or a
metronome beat failing with ``ConnectionLost`` or ``RequestTimedOut``): 0.1 s after the first
failure in a row, doubling to at most 1 s."""


def reconnect_delay_s(failures: int) -> float:
    """Seconds to wait after ``failures`` (>= 1) failed tries in a row, by ``RECONNECT``."""
    return delay_ms(RECONNECT, failures) / 1000
