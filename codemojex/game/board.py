"""Leaderboards: one sorted set per room, ``cm:{<room>}:board``, of best percentages.

A player's best is kept atomically (one script with ``ZADD GT``); ties rank the earlier best
first (the score packs the percentage with when it was reached). ``top``, ``rank`` and
``around`` read it; ranks are computed on read, never stored. Every improvement is published on
``cm:board:<room>`` so live feeds in any process see it.
"""

from __future__ import annotations

import attrs

from codemojex import ids
from codemojex.game.rooms import room_key
from echomq_trio import Bus
from echomq_trio.protocol import as_text

__all__ = [
    "FEED_PATTERN",
    "Recorded",
    "Standing",
    "around",
    "feed_channel",
    "rank",
    "record",
    "top",
]

FEED_PATTERN = "cm:board:*"
_SCALE = 10**13


def board_key(room: str) -> str:
    if not ids.is_valid(room, ids.ROOM):
        raise ValueError(f"room must be an RMM id, got {room!r}")
    return room_key(room, "board")


def feed_channel(room: str) -> str:
    return "cm:board:" + room


@attrs.frozen
class Recorded:
    improved: bool
    best: int


@attrs.frozen
class Standing:
    rank: int  # 1-based
    player: str
    percentage: int


def _pct(score: object) -> int:
    return int(float(as_text(score)) // _SCALE)


def _check_player(player: str) -> str:
    if not ids.is_valid(player, ids.USER):
        raise ValueError(f"player must be a USR id, got {player!r}")
    return player


async def record(bus: Bus, room: str, player: str, percentage: int) -> Recorded:
    """Offer a percentage; the board keeps the player's best. Concurrent writers are safe."""
    if (
        isinstance(percentage, bool)
        or not isinstance(percentage, int)
        or not 0 <= percentage <= 100
    ):
        raise ValueError(f"percentage must be an int in 0..100, got {percentage!r}")
    changed, best = await bus.wire.script(
        "codemojex.game/board_record",
        [board_key(room)],
        [_check_player(player), str(percentage), feed_channel(room), room],
    )
    return Recorded(bool(changed), int(best))


def _standings(raw: object, first_rank: int) -> list[Standing]:
    # WITHSCORES comes back as {member: score} (RESP3, in order) or a flat list (RESP2).
    if isinstance(raw, dict):
        pairs = list(raw.items())
    else:
        items = list(raw) if isinstance(raw, list) else []
        pairs = list(zip(items[::2], items[1::2], strict=True))
    return [Standing(first_rank + i, as_text(m), _pct(s)) for i, (m, s) in enumerate(pairs)]


async def top(bus: Bus, room: str, n: int = 10) -> list[Standing]:
    """The best ``n`` players, best first."""
    if n < 1:
        return []
    raw = await bus.wire.command("ZRANGE", board_key(room), "0", str(n - 1), "REV", "WITHSCORES")
    return _standings(raw, 1)


async def rank(bus: Bus, room: str, player: str) -> int | None:
    """A player's 1-based rank, or ``None`` if they have no score in the room."""
    r = await bus.wire.command("ZREVRANK", board_key(room), _check_player(player))
    return None if r is None else int(r) + 1


async def around(bus: Bus, room: str, player: str, k: int = 2) -> list[Standing]:
    """The player's standing with up to ``k`` players above and below (empty if unranked)."""
    r = await rank(bus, room, player)
    if r is None:
        return []
    start = max(0, r - 1 - k)
    raw = await bus.wire.command(
        "ZRANGE", board_key(room), str(start), str(r - 1 + k), "REV", "WITHSCORES"
    )
    return _standings(raw, start + 1)
