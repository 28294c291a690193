"""Leaderboards: sorted sets of best percentages, one per round and one per day in each room.

What a board means. A round's board (``round_board``, ``cm:{<room>}:board:round:<RND id>``)
holds each player's best in that round: what the live page shows while the round runs and the
"Round over" results list; it expires with its round (``round_end`` gives both the same
lifetime). A day's board (``day_board``, ``cm:{<room>}:board:day:<n>``, ``n`` the UTC day of
the server's clock, see ``days``) holds each player's best of that day across the room's rounds:
what the daily digest reports; it expires ``DAY_BOARD_KEEP_MS`` after its day ends. There is no
all-time board: every board starts empty, so the live page moves every round.

``record`` offers a guess's percentage to the open round's board and to today's board in one
script (``board_record``) that keeps each best atomically (``ZADD GT``); ties rank the earlier
best first (the score packs the percentage with when it was reached). The script refuses a
round that is not open, so no board is ever written after its round's lifetime was set.
``top``, ``rank`` and ``around`` read the board they are given; ranks are computed on read,
never stored. Every improvement of a round's board, and every round opened or closed, is
published on ``cm:board:<room>`` so live feeds in any process see it.
"""

from __future__ import annotations

import attrs

from codemojex import ids
from codemojex.game.rules import DAY_MS, GameError
from codemojex.keys import FEED_PATTERN, feed_channel, room_keys
from codemojex.store import number, pairs, script, text
from echomq_trio import Bus

__all__ = [
    "DAY_BOARD_KEEP_MS",
    "FEED_PATTERN",
    "Board",
    "Recorded",
    "Standing",
    "around",
    "day_board",
    "feed_channel",
    "rank",
    "record",
    "round_board",
    "size",
    "top",
]

DAY_BOARD_KEEP_MS = 7 * DAY_MS  # a day's board is kept a week after the day ends
_SCALE = 10**13


@attrs.frozen
class Board:
    """One leaderboard of a room: a round's (``round_board``) or a day's (``day_board``)."""

    room: str
    key: str


def round_board(room: str, round_id: str) -> Board:
    """The board of one round: each player's best in it."""
    return Board(room, room_keys(room).round_board(round_id))  # checks both ids


def day_board(room: str, day: int) -> Board:
    """The board of one UTC day (``days.day_of``): each player's best that day."""
    if isinstance(day, bool) or not isinstance(day, int) or day < 0:
        raise ValueError(f"day must be a day number >= 0, got {day!r}")
    return Board(room, room_keys(room).day_board(day))


@attrs.frozen
class Recorded:
    improved: bool  # the round's best went up
    best: int  # the player's best in the round
    day: int  # the day whose board the percentage was offered to


@attrs.frozen
class Standing:
    rank: int  # 1-based
    player: str
    percentage: int


def _pct(score: object) -> int:
    return int(float(text(score)) // _SCALE)


def _check_player(player: str) -> str:
    if not ids.is_valid(player, ids.USER):
        raise ValueError(f"player must be a USR id, got {player!r}")
    return player


async def record(
    bus: Bus,
    room: str,
    round_id: str,
    player: str,
    percentage: int,
    *,
    day_keep_ms: int = DAY_BOARD_KEEP_MS,
) -> Recorded:
    """Offer a percentage in the room's open round: the round's board and today's keep the
    player's best. Concurrent writers are safe. ``GameError`` if the round is not open (then
    nothing is written). ``day_keep_ms``: how long today's board lives after the day ends."""
    if (
        isinstance(percentage, bool)
        or not isinstance(percentage, int)
        or not 0 <= percentage <= 100
    ):
        raise ValueError(f"percentage must be an int in 0..100, got {percentage!r}")
    if isinstance(day_keep_ms, bool) or not isinstance(day_keep_ms, int) or day_keep_ms < 0:
        raise ValueError(f"day_keep_ms must be an int >= 0, got {day_keep_ms!r}")
    k = room_keys(room)
    got = await _RECORD.run(
        bus,
        [k.round(round_id), k.round_board(round_id), k.day_board_stem],
        [_check_player(player), str(percentage), feed_channel(room), room, str(day_keep_ms)],
    )
    if got["outcome"] != "recorded":
        raise GameError(f"round {round_id} is not open")
    return Recorded(got["improved"] == "1", int(got["best"]), int(got["day"]))


_RECORD = script("board_record")


def _standings(raw: object, first_rank: int) -> list[Standing]:
    # WITHSCORES comes back as {member: score} (RESP3, in order) or a flat list (RESP2).
    return [Standing(first_rank + i, text(m), _pct(s)) for i, (m, s) in enumerate(pairs(raw))]


async def top(bus: Bus, board: Board, n: int = 10) -> list[Standing]:
    """The best ``n`` players of ``board``, best first (none once it has expired)."""
    if n < 1:
        return []
    raw = await bus.command("ZRANGE", board.key, 0, n - 1, "REV", "WITHSCORES")
    return _standings(raw, 1)


async def size(bus: Bus, board: Board) -> int:
    """How many players have a score on ``board`` (0 once it has expired)."""
    return number(await bus.command("ZCARD", board.key))


async def rank(bus: Bus, board: Board, player: str) -> int | None:
    """A player's 1-based rank on ``board``, or ``None`` if they have no score on it."""
    r = await bus.command("ZREVRANK", board.key, _check_player(player))
    return None if r is None else number(r) + 1


async def around(bus: Bus, board: Board, player: str, k: int = 2) -> list[Standing]:
    """The player's standing with up to ``k`` players above and below (empty if unranked)."""
    r = await rank(bus, board, player)
    if r is None:
        return []
    start = max(0, r - 1 - k)
    raw = await bus.command("ZRANGE", board.key, start, r - 1 + k, "REV", "WITHSCORES")
    return _standings(raw, start + 1)
