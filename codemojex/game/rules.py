"""The game's rules and input limits (pure): how far ahead a round may start, how many
standings a message lists, and what a name or title may hold. ``GameError`` is what every part
of the game raises for a move it refuses.

Every message the game builds must fit Telegram's 4096 characters, counted as Telegram counts
them (UTF-16 code units, so a character outside the Basic Multilingual Plane counts 2; for the
texts sent as HTML, after parsing: markup and escapes do not count). The worst
cases, every character of a name or title counting 2 and ``TOP_N`` standings of 100%: round
results 1,692 (about 67 + 2·MAX_TITLE + TOP_N·(10 + 2·MAX_NAME)); daily digest 1,664; round
announcement 368; guess reply about 110 (with the rank's digits); start reminder 55.
``tests/codemojex/game/test_game.py`` builds each message at these limits and checks it fits.
Names and titles holding control or format characters or line breaks (Unicode categories Cc,
Cf, Cs, Zl, Zp; the zero-width joiner of emoji sequences is allowed) are refused too, so no
input can forge lines of a message.
"""

from __future__ import annotations

import unicodedata

__all__ = [
    "DAY_MS",
    "MAX_NAME",
    "MAX_START_DELAY_MS",
    "MAX_TITLE",
    "TOP_N",
    "GameError",
    "check_label",
    "clean_label",
]

DAY_MS = 86_400_000
MAX_NAME = 64  # a player's name, in characters (Telegram allows 64 for a first name)
MAX_TITLE = 128  # a room's title, in characters (Telegram's limit for a chat title)
MAX_START_DELAY_MS = 7 * DAY_MS  # how far ahead a round may start
TOP_N = 10  # standings in the round results and the daily digest
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_ZWJ = "\u200d"


class GameError(ValueError):
    """A move the game refuses (no open round, unknown room or player, bad guess)."""


def check_label(field: str, value: object, limit: int) -> str:
    """``value`` without surrounding spaces, if it is 1-``limit`` characters with no control
    or format characters and no line breaks; ``GameError`` naming the field and limit if not."""
    raw = value if isinstance(value, str) else ""
    text = raw.strip()
    refused = any(unicodedata.category(c) in _REFUSED_CATEGORIES and c != _ZWJ for c in raw)
    if refused or not 1 <= len(text) <= limit:
        raise GameError(
            f"{field} must be 1-{limit} characters without control characters or newlines"
        )
    return text


def clean_label(value: str, limit: int, fallback: str) -> str:
    """``value`` made acceptable to ``check_label``: every refused character (see above) and
    run of white space becomes one space, the ends are stripped, and the text is cut to
    ``limit`` characters; ``fallback`` (itself cleaned) when nothing is left. For names that
    come from outside (a Telegram user's display name, a group's title)."""
    kept = "".join(
        " " if unicodedata.category(c) in _REFUSED_CATEGORIES and c != _ZWJ else c for c in value
    )
    text = " ".join(kept.split())[:limit].strip()
    if text:
        return text
    return clean_label(fallback, limit, "?") if fallback != "?" else "?"
