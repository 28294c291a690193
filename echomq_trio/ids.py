"""Branded ids: a 3-letter namespace and an 11-character base-62 snowflake, 14 bytes in all.

Byte order of two ids of one namespace is their mint order, so a sorted set of ids with equal
scores pops in mint order and sorting ids sorts by time. The snowflake is
``ts(41) << 22 | node(10) << 12 | seq(12)`` with ``ts`` in ms since 2024-01-01 UTC.

Minting is strictly increasing within a process: a burst of more than 4096 ids in one millisecond
carries into the timestamp, and a clock that steps back keeps counting up from the last id.
"""

from __future__ import annotations

import os
import re
import threading
import time

__all__ = [
    "EPOCH_MS",
    "IdMinter",
    "generate",
    "is_valid",
    "namespace",
    "node_id",
    "timestamp_ms",
]

EPOCH_MS = 1_704_067_200_000
ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(ALPHABET)}
_WIDTH = 11
_MAX = (1 << 63) - 1
_NS = re.compile(r"[A-Z]{3}")
_ID = re.compile(r"[A-Z]{3}[0-9A-Za-z]{11}")


# Two base-62 digits at a time (62**2 strings): minting is on every enqueue's path, and five
# divisions cost a third of eleven.
_PAIRS = [a + b for a in ALPHABET for b in ALPHABET]
_PAIR = len(_PAIRS)


def _encode(value: int) -> str:
    """``value`` (0 <= value < 62**11) as ``_WIDTH`` base-62 digits."""
    value, e = divmod(value, _PAIR)
    value, d = divmod(value, _PAIR)
    value, c = divmod(value, _PAIR)
    value, b = divmod(value, _PAIR)
    value, a = divmod(value, _PAIR)
    return ALPHABET[value] + _PAIRS[a] + _PAIRS[b] + _PAIRS[c] + _PAIRS[d] + _PAIRS[e]


def _decode(text: str) -> int:
    value = 0
    for c in text:
        value = value * 62 + _INDEX[c]
    return value


_MAX_TEXT = _encode(_MAX)
_LOW = _PAIR * _PAIR  # the value of an id's last four digits
_HIGH_WIDTH = _WIDTH - 4


_CHECKED_NS: set[str] = set()  # namespaces found good; bounded: there are 26**3


def _check_namespace(ns: str) -> None:
    if ns.__class__ is str and ns in _CHECKED_NS:
        return
    if not isinstance(ns, str) or not _NS.fullmatch(ns):
        raise ValueError(f"namespace must be 3 capital letters A-Z, got {ns!r}")
    _CHECKED_NS.add(ns)


class IdMinter:
    """Mints strictly increasing snowflakes for one node; safe to share between threads."""

    def __init__(self, node: int = 0) -> None:
        if not 0 <= node <= 1023:
            raise ValueError(f"node must be in 0..1023, got {node}")
        self._node = node
        self._node_bits = node << 12
        self._last = -1  # ts << 12 | seq of the last id
        self._high: tuple[int, str] = (-1, "")  # a snowflake // _LOW, and its digits
        self._lock = threading.Lock()

    def snowflake(self, now_ms: int | None = None) -> int:
        if now_ms is None:
            now_ms = time.time_ns() // 1_000_000
        candidate = (now_ms - EPOCH_MS) << 12 if now_ms > EPOCH_MS else 0
        with self._lock:
            nxt = self._last + 1
            if candidate > nxt:
                nxt = candidate
            self._last = nxt
        return ((nxt >> 12) << 22) | self._node_bits | (nxt & 0xFFF)

    def generate(self, ns: str, now_ms: int | None = None) -> str:
        _check_namespace(ns)
        # The digits above the last four change about once a ms: kept from the last id (one
        # tuple, read and replaced whole, so threads never mix two), the last four encoded.
        high, low = divmod(self.snowflake(now_ms), _LOW)
        kept = self._high
        if kept[0] != high:
            kept = self._high = (high, _encode(high)[_WIDTH - _HIGH_WIDTH :])
        a, b = divmod(low, _PAIR)
        return ns + kept[1] + _PAIRS[a] + _PAIRS[b]


def node_id() -> int:
    """This process's node number: ``ECHOMQ_NODE`` if set, else derived from the pid."""
    raw = os.environ.get("ECHOMQ_NODE")
    if raw is not None:
        return int(raw) % 1024
    return os.getpid() % 1024


_default = IdMinter(node_id())


def generate(ns: str) -> str:
    """Mint a new id in namespace ``ns`` (3 capital letters); raises ``ValueError`` otherwise."""
    return _default.generate(ns)


def is_valid(value: object, ns: str | None = None) -> bool:
    """True when ``value`` is a well-formed branded id (of namespace ``ns`` when given)."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        return False
    if ns is not None and value[:3] != ns:
        return False
    return value[3:] <= _MAX_TEXT  # the alphabet is in ASCII order: text order is value order


def namespace(value: str) -> str:
    """The 3-letter namespace of a branded id."""
    _require(value)
    return value[:3]


def timestamp_ms(value: str) -> int:
    """Unix milliseconds at which the id was minted."""
    _require(value)
    return (_decode(value[3:]) >> 22) + EPOCH_MS


def _require(value: str) -> None:
    if not is_valid(value):
        raise ValueError(f"not a branded id (3 capitals + 11 base-62 chars): {value!r}")
