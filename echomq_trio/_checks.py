"""Checks of what a caller gives the bus (pure): names, ids, payloads, times and stream ids,
each checked before any I/O. A bad value raises ``ValueError`` (or ``TypeError`` for a wrong
type) naming the argument and the limit, so nothing is written.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from echomq_trio import ids

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "JOB_NS",
    "MAX_DELAY_MS",
    "MAX_NAME_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_TIME_MS",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "check_group",
    "check_holder",
    "check_int",
    "check_job_id",
    "check_lane_cursor",
    "check_max_payload_bytes",
    "check_ms",
    "check_name",
    "check_payload",
    "check_priority",
    "check_queue",
    "check_stream_id",
    "check_when",
]

JOB_NS = "JOB"
MAX_NAME_BYTES = 128
_BAD_NAME_CHARS = re.compile(r"[{}\s]")

# Sorted-set scores are doubles: integers are exact up to 2**53, and a later time would be
# rounded (or overflow the scripts' integer replies). A delay leaves room for the server's now,
# which stays below 2**43 ms until the year 2248.
MAX_TIME_MS = 2**53
MAX_DELAY_MS = MAX_TIME_MS - 2**43

# A job's priority: an int in this range, higher first, 0 the default. A job waits at minus its
# priority in its sorted set, so any int a double holds exactly would do; the bound keeps typos
# (a timestamp, a byte count) out and leaves room for a later use of the score.
PRIORITY_MIN = -1_000_000
PRIORITY_MAX = 1_000_000

DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576  # 1 MiB, the bus's default
MAX_PAYLOAD_BYTES = 512 * 1_048_576  # the server's largest string (proto-max-bulk-len)

_STREAM_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")
_MAX_STREAM_PART = 2**64 - 1


def check_queue(queue: object) -> str:
    """Return ``queue`` if it can sit inside a hash tag; raise ``ValueError`` otherwise."""
    return check_name("queue name", queue)


def check_name(kind: str, value: object) -> str:
    """Queue names, lane groups, repeat names, idempotency keys, stream group and consumer names,
    app key names: 1-128 bytes, printable, no whitespace or braces
    (a queue name sits inside the ``{...}`` hash tag). Any such string works, so a Telegram
    chat id such as ``-1001234567890`` is a valid group."""
    if not isinstance(value, str):
        raise ValueError(f"{kind} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{kind} must not be empty")
    if len(value.encode()) > MAX_NAME_BYTES:
        raise ValueError(f"{kind} is over {MAX_NAME_BYTES} bytes: {value[:40]!r}...")
    if _BAD_NAME_CHARS.search(value) or not value.isprintable():
        raise ValueError(
            f"{kind} must not contain braces, whitespace or control characters: {value!r}"
        )
    return value


def check_holder(value: object) -> str:
    """A bus's holder id (``Bus.holder``), named as a queue is."""
    return check_name("holder", value)


def check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an int (not a bool) of at least ``minimum``; ``TypeError`` or
    ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {_shown(value)}")
    return value


def check_ms(name: str, value: object, minimum: int = 0, *, absolute: bool = False) -> int:
    """Return ``value`` if it is an int in ms from ``minimum`` up to what a sorted-set score
    holds exactly: ``MAX_TIME_MS`` (2**53) for an ``absolute`` time, ``MAX_DELAY_MS``
    (2**53 - 2**43) for a delay, so now + delay stays exact. ``TypeError`` or ``ValueError``
    naming ``name`` and the limit otherwise."""
    ms = check_int(name, value, minimum)
    if absolute and ms > MAX_TIME_MS:
        raise ValueError(
            f"{name} must be at most {MAX_TIME_MS} (2**53 ms, the latest time a sorted-set "
            f"score holds exactly), got {_shown(ms)}"
        )
    if not absolute and ms > MAX_DELAY_MS:
        raise ValueError(
            f"{name} must be at most {MAX_DELAY_MS} (2**53 - 2**43 ms, so that the server's now "
            f"plus it stays exact in a sorted-set score), got {_shown(ms)}"
        )
    return ms


def _shown(n: int) -> str:
    """``n`` as a line can hold it: its digits, or ``1.000e+300`` past 24 digits."""
    return str(n) if abs(n) < 10**24 else f"{n:.3e}"


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)


def check_priority(value: object) -> int:
    """Return ``value`` if it is an int (not a bool) from ``PRIORITY_MIN`` to ``PRIORITY_MAX``;
    ``TypeError`` or ``ValueError`` naming ``priority`` and the range otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"priority must be an int, got {type(value).__name__}")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise ValueError(
            f"priority must be from {PRIORITY_MIN} to {PRIORITY_MAX}, got {_shown(value)}"
        )
    return value


def check_when(name: str, value: object, *, absolute: bool) -> int:
    """A time (``absolute``: Unix ms) or a delay, in whole ms, checked by ``check_ms``. Besides
    an int it takes a float number of ms, and an aware ``datetime`` (a time) or a ``timedelta``
    (a delay): each is rounded UP to the next whole ms, so a job never runs early. A naive
    ``datetime`` (no tzinfo: which clock?) or a float that is not finite raises ``ValueError``."""
    if absolute and isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"{name} is a naive datetime: give it a time zone, e.g. "
                f"datetime.now(timezone.utc) or dt.replace(tzinfo=ZoneInfo(...))"
            )
        value = -((_EPOCH - value) // _US // 1000)  # whole µs, then ms rounded up
    elif not absolute and isinstance(value, dt.timedelta):
        value = -(-(value // _US) // 1000)  # whole µs as an int first: -timedelta.max overflows
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number of ms, got {value}")
        value = math.ceil(value)
    return check_ms(name, value, absolute=absolute)


def check_group(group: object) -> str:
    """Return ``group`` if it can name a lane; raise ``ValueError`` otherwise."""
    return check_name("lane group", group)


_LANE_CURSOR = re.compile(r"([0-9]{1,20}):(.*)", re.DOTALL)


def check_lane_cursor(cursor: object) -> str:
    """Return ``cursor`` if it is ``''`` or a lane status page's ``next`` (``'1536:'``, or
    ``'1536:chat-7'``: an HSCAN cursor, and the last lane taken from that call when a page cut
    it); raise ``ValueError`` otherwise."""
    if cursor == "":
        return ""
    found = _LANE_CURSOR.fullmatch(cursor) if isinstance(cursor, str) else None
    if found and int(found[1]) < 2**64 and (not found[2] or _is_group(found[2])):
        return found[0]
    raise ValueError(f"a lane page cursor is '' or a page's next ('1536:'), got {cursor!r}")


def _is_group(text: str) -> bool:
    try:
        check_group(text)
    except ValueError:
        return False
    return True


def check_job_id(job_id: object) -> str:
    """Return ``job_id`` if it is a branded ``JOB`` id; raise ``ValueError`` otherwise."""
    if not ids.is_valid(job_id, JOB_NS):
        raise ValueError(
            f"job id must be a branded JOB id such as ids.generate('JOB'), got {job_id!r}"
        )
    return job_id  # type: ignore[return-value]


def check_payload(payload: object, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> bytes:
    """Payloads are ``str`` (stored as UTF-8) or ``bytes`` of at most ``max_bytes``; another
    type is a ``TypeError``, a longer payload a ``ValueError`` naming the limit."""
    if isinstance(payload, bytes):
        data = payload
    elif isinstance(payload, str):
        data = payload.encode()
    else:
        raise TypeError(
            f"payload must be str or bytes, got {type(payload).__name__}; serialize it first "
            "(for example with json.dumps)"
        )
    if len(data) > max_bytes:
        raise ValueError(
            f"payload is {len(data)} bytes, over the bus's limit of {max_bytes} bytes "
            "(open_bus(max_payload_bytes=...) sets it)"
        )
    return data


def check_max_payload_bytes(value: object) -> int:
    """Return ``value`` if it can be a bus's payload limit: an int from 1 to
    ``MAX_PAYLOAD_BYTES`` (512 MiB, the most the server takes in one string)."""
    limit = check_int("max_payload_bytes", value, 1)
    if limit > MAX_PAYLOAD_BYTES:
        raise ValueError(
            f"max_payload_bytes must be at most {MAX_PAYLOAD_BYTES} (512 MiB, the server's "
            f"largest string), got {limit}"
        )
    return limit


def check_stream_id(name: str, value: object, specials: tuple[str, ...] = ()) -> str:
    """Return ``value`` if it is a stream id as the server takes it, ``<ms>`` or ``<ms>-<seq>``
    (each part 0 to 2**64 - 1), or one of ``specials`` (such as ``"-"``, ``"$"``);
    ``TypeError`` or ``ValueError`` naming ``name`` otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str stream id, got {type(value).__name__}")
    if value in specials:
        return value
    match = _STREAM_ID.fullmatch(value)
    if match is None or any(int(part) > _MAX_STREAM_PART for part in match.groups("0")):
        also = "".join(f" or {s!r}" for s in specials)
        raise ValueError(
            f"{name} must be a stream id such as '1700000000000-0' or '0'{also}, got {value[:60]!r}"
        )
    return value
