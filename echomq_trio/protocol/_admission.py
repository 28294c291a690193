"""What an admission may carry besides its payload (pure): a job's expiry (``expires_at`` or
``expires_in``, an argument of every enqueue script), the ``debounce`` call (one job per quiet
period of a key) and the queue's setting for expired jobs (``queue_expired``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from echomq_trio._checks import (
    check_group,
    check_job_id,
    check_ms,
    check_name,
    check_payload,
    check_when,
)
from echomq_trio._replies import as_text
from echomq_trio.keys import QueueKeys
from echomq_trio.protocol._base import Arg, Call, Payload, _call, _named, _outcome
from echomq_trio.protocol._jobs import priority_arg
from echomq_trio.results import Admitted, Outcome

# How long a debounce key outlives its job's run-at: a job left waiting longer (no consumer
# claimed it) no longer takes enqueues in, and the next one starts a new period.
DEBOUNCE_KEEP_MS = 24 * 3600 * 1000

ExpiresAt = int | float | datetime
ExpiresIn = int | float | timedelta


def expiry_arg(expires_at: ExpiresAt | None = None, expires_in: ExpiresIn | None = None) -> str:
    """A job's expiry as the enqueue scripts take it: ``''`` for none; ``expires_at`` (Unix ms,
    server clock, or an aware ``datetime``: checked as ``enqueue_at``'s time) as ms;
    ``expires_in`` (ms from the server's now at admission, or a ``timedelta``) as ``'+ms'``.
    Both given: ``ValueError``."""
    if expires_at is not None and expires_in is not None:
        raise ValueError("give expires_at or expires_in, not both")
    if expires_at is not None:
        return str(check_when("expires_at", expires_at, absolute=True))
    if expires_in is not None:
        return "+" + str(check_when("expires_in", expires_in, absolute=False))
    return ""


def debounce_call(
    k: QueueKeys,
    key: str,
    job: tuple[str, Payload],
    max_bytes: int,
    *,
    debounce_ms: int,
    max_wait_ms: int | None = None,
    group: str | None = None,
    timeout_ms: int | None = None,
    expires: str = "",
    priority: int = 0,
) -> Call[Admitted]:
    """``debounce``: admit ``job`` (id, payload) under debounce ``key``, or take it into the
    key's waiting job; ``debounce_ms`` (>= 1) the quiet period, ``max_wait_ms`` (>= 1, ``None``
    for no bound) the latest the job runs after its period's first enqueue; ``group`` a lane;
    ``timeout_ms`` and ``priority`` (a new period's) as for ``enqueue_calls``; ``expires`` an
    ``expiry_arg``."""
    job_id, payload = job
    args: list[Arg] = [
        k.prefix,
        check_name("debounce key", key),
        str(check_ms("debounce_ms", debounce_ms, 1)),
        "" if max_wait_ms is None else str(check_ms("max_wait_ms", max_wait_ms, 1)),
        str(DEBOUNCE_KEEP_MS),
        "" if group is None else check_group(group),
        "" if timeout_ms is None else str(check_ms("timeout_ms", timeout_ms, 1)),
        expires,
        check_job_id(job_id),
        check_payload(payload, max_bytes),
        priority_arg(priority),
    ]
    return _call("debounce", k.schedule, args, debounce_reply)


def debounce_reply(raw: Sequence[Any]) -> Admitted:
    """``{outcome, id, run-at, enqueues absorbed}``: ``SCHEDULED`` (a new period),
    ``DEBOUNCED`` (taken in) or ``DUPLICATE``."""
    r = _named("debounce", raw)
    outcome = _outcome(r["outcome"])
    at = None if outcome is Outcome.DUPLICATE else int(r["at"])
    return Admitted(as_text(r["id"]), outcome, at, int(r["absorbed"]))


EXPIRED_ACTIONS = ("dead", "drop")


def queue_expired_call(k: QueueKeys, action: str | None = None) -> Call[str]:
    """``queue_expired``: set what a claim does with an expired job (``"dead"``: keep it dead
    with the reason ``"expired"``; ``"drop"``: delete it), or with ``None`` only read it."""
    if action is not None and action not in EXPIRED_ACTIONS:
        raise ValueError(f"expired must be one of {EXPIRED_ACTIONS}, got {action!r}")
    return _call("queue_expired", k.meta, [k.prefix, action or ""], as_text)


def check_debounce(
    debounce: str | None,
    debounce_ms: int | None,
    max_wait_ms: int | None,
    *,
    job_id: str | None = None,
    key: str | None = None,
    seq: object = None,
) -> int | None:
    """The options of a debounced enqueue, checked together: ``debounce_ms`` when ``debounce``
    is given (else ``None``). ``ValueError`` for a combination that makes no sense: ``debounce``
    without ``debounce_ms`` or the reverse, or with a ``job_id`` (the job's id is that of its
    period's first enqueue), an idempotency ``key`` or a ``seq`` (the debounce key already
    decides which job takes the enqueue)."""
    if debounce is None:
        if debounce_ms is not None or max_wait_ms is not None:
            raise ValueError("debounce_ms and max_wait_ms need a debounce key (debounce=)")
        return None
    if debounce_ms is None:
        raise ValueError("debounce needs debounce_ms, the quiet period")
    if job_id is not None:
        raise ValueError("debounce takes no job_id: the job's id is its period's first enqueue's")
    if key is not None or seq is not None:
        raise ValueError("debounce takes no idempotency key or seq: the debounce key decides")
    return debounce_ms
