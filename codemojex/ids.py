"""The game's branded ids, on ``echomq_trio.ids``: typed by namespace and time-ordered, so
sorting ids sorts by mint time."""

from __future__ import annotations

from echomq_trio import ids

__all__ = ["JOB", "NOTICE", "ROOM", "ROUND", "USER", "is_valid", "new"]

USER = "USR"  # a player account
ROOM = "RMM"  # a room: the chat where a game runs
ROUND = "RND"  # a round: one secret to guess
NOTICE = "NOT"  # a notification
JOB = "JOB"  # a bus job (the only kind the bus admits)

KINDS = (USER, ROOM, ROUND, NOTICE, JOB)


def new(kind: str) -> str:
    """Mint an id of one of the game's kinds (``USR``, ``RMM``, ``RND``, ``NOT``, ``JOB``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return ids.generate(kind)


def is_valid(value: object, kind: str) -> bool:
    """True when ``value`` is a well-formed id of ``kind``."""
    return ids.is_valid(value, kind)
