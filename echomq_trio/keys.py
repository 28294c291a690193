"""Key names of one queue, and validation of the names a caller gives us (pure).

Every key of queue ``q`` is ``emq:{q}:<suffix>``: the braces are the cluster hash tag, so a
queue lives in one slot and every script touches one slot, on a single server or a cluster.
"""

from __future__ import annotations

import re

import attrs

from echomq_trio import ids

__all__ = [
    "JOB_NS",
    "QueueKeys",
    "as_text",
    "check_group",
    "check_int",
    "check_job_id",
    "check_name",
    "check_payload",
    "check_queue",
    "queue_keys",
]

JOB_NS = "JOB"
MAX_QUEUE_BYTES = 128
_BAD_QUEUE_CHARS = re.compile(r"[{}\s]")


def check_queue(queue: object) -> str:
    """Return ``queue`` if it can sit inside a hash tag; raise ``ValueError`` otherwise."""
    return check_name("queue name", queue)


def check_name(kind: str, value: object) -> str:
    """Queue names, lane groups, repeat names: 1-128 bytes, printable, no whitespace or braces
    (a queue name sits inside the ``{...}`` hash tag). Any such string works, so a Telegram
    chat id such as ``-1001234567890`` is a valid group."""
    if not isinstance(value, str):
        raise ValueError(f"{kind} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{kind} must not be empty")
    if len(value.encode()) > MAX_QUEUE_BYTES:
        raise ValueError(f"{kind} is over {MAX_QUEUE_BYTES} bytes: {value[:40]!r}...")
    if _BAD_QUEUE_CHARS.search(value) or not value.isprintable():
        raise ValueError(
            f"{kind} must not contain braces, whitespace or control characters: {value!r}"
        )
    return value


def check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an int (not a bool) of at least ``minimum``; ``TypeError`` or
    ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def as_text(value: object) -> str:
    """A server reply (bytes or str) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def check_group(group: object) -> str:
    """Return ``group`` if it can name a lane; raise ``ValueError`` otherwise."""
    return check_name("lane group", group)


def check_job_id(job_id: object) -> str:
    """Return ``job_id`` if it is a branded ``JOB`` id; raise ``ValueError`` otherwise."""
    if not ids.is_valid(job_id, JOB_NS):
        raise ValueError(
            f"job id must be a branded JOB id such as ids.generate('JOB'), got {job_id!r}"
        )
    return job_id  # type: ignore[return-value]


def check_payload(payload: object) -> bytes:
    """Payloads are ``str`` (stored as UTF-8) or ``bytes``; anything else is a ``TypeError``."""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    raise TypeError(
        f"payload must be str or bytes, got {type(payload).__name__}; serialize it first "
        "(for example with json.dumps)"
    )


@attrs.frozen
class QueueKeys:
    """The keys of one queue. Scripts get ``prefix`` and derive the rest the same way."""

    name: str
    prefix: str

    @property
    def pending(self) -> str:
        return self.prefix + "pending"

    @property
    def schedule(self) -> str:
        return self.prefix + "schedule"

    @property
    def active(self) -> str:
        return self.prefix + "active"

    @property
    def dead(self) -> str:
        return self.prefix + "dead"

    @property
    def wake(self) -> str:
        return self.prefix + "wake"

    @property
    def tick(self) -> str:
        return self.prefix + "tick"

    @property
    def events(self) -> str:
        return self.prefix + "events"

    @property
    def repeat(self) -> str:
        return self.prefix + "repeat"

    def lane(self, group: str) -> str:
        return self.prefix + "g:" + check_group(group)

    def job(self, job_id: str) -> str:
        return self.prefix + "job:" + check_job_id(job_id)


def queue_keys(queue: str) -> QueueKeys:
    """Validate ``queue`` and return its keys."""
    return QueueKeys(name=check_queue(queue), prefix=f"emq:{{{queue}}}:")
