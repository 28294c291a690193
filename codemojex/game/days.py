"""Days of the game (pure): a day is a UTC calendar day, numbered from 1970-01-01 (day 0), of
the server's clock. A room keeps a board per day (``board.day_board``); the daily digest reports
the day before the one its occurrence fired in, and is first registered to fire
``DIGEST_AFTER_MIDNIGHT_MS`` after a UTC midnight, so it reports a day just ended and every day
once. ``board_record.lua`` numbers days the same way (``floor(now_ms / DAY_MS)``)."""

from __future__ import annotations

import datetime

from codemojex.game.rules import DAY_MS

__all__ = ["DIGEST_AFTER_MIDNIGHT_MS", "day_label", "day_of", "digest_day", "next_digest_in_ms"]

# Late enough that a host clock a little behind the server's still mints the occurrence on the
# new day; early enough that the day is fresh news.
DIGEST_AFTER_MIDNIGHT_MS = 10 * 60_000
_EPOCH = datetime.date(1970, 1, 1)


def day_of(ms: int) -> int:
    """The day number of a Unix time in ms."""
    return ms // DAY_MS


def day_label(day: int) -> str:
    """``2026-12-01``: the day's date (UTC)."""
    return (_EPOCH + datetime.timedelta(days=day)).isoformat()


def digest_day(fired_ms: int) -> int:
    """The day a digest fired at ``fired_ms`` reports: the day before, the last complete one."""
    return day_of(fired_ms) - 1


def next_digest_in_ms(now_ms: int) -> int:
    """Ms from ``now_ms`` to the next ``DIGEST_AFTER_MIDNIGHT_MS`` past a UTC midnight."""
    at = (day_of(now_ms - DIGEST_AFTER_MIDNIGHT_MS) + 1) * DAY_MS + DIGEST_AFTER_MIDNIGHT_MS
    return at - now_ms
