"""Scoring a guess (pure): six distinct emojis are the secret; for each of six guessed positions,
an emoji found at distance ``d`` from its secret position earns ``100 - 20·d``, a miss 0. The
total is out of 600; the percentage ``round(total / 600 · 100)`` is computed, never stored
(totals move in steps of 20, so it never lands on a .5)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = [
    "ALPHABET",
    "MAX_TOTAL",
    "SIZE",
    "Position",
    "Score",
    "parse_emojis",
    "score",
    "status_word",
]

SIZE = 6
MAX_TOTAL = 100 * SIZE
# Single-code-point emojis, so one character is one emoji whatever the client sends.
ALPHABET = tuple("😀😂😍😎🤔😴🐶🐱🦊🐼🐸🐙🍎🍕🍩🍉🏀🎲🎸🚀🌈🔥💎🎁")
_VARIATION_SELECTORS = {"\ufe0e", "\ufe0f"}


@attrs.frozen
class Position:
    guess: str
    distance: int | None  # None: not in the secret
    points: int

    @property
    def status(self) -> str:
        return status_word(self.distance)


@attrs.frozen
class Score:
    total: int
    breakdown: tuple[Position, ...]

    @property
    def percentage(self) -> int:
        return round(self.total * 100 / MAX_TOTAL)


def status_word(distance: int | None) -> str:
    """EXACT (0), ADJACENT (1), NEAR (2-3), FAR (4), MAX (5), MISS (not in the secret)."""
    if distance is None:
        return "MISS"
    return {0: "EXACT", 1: "ADJACENT", 2: "NEAR", 3: "NEAR", 4: "FAR"}.get(distance, "MAX")


def score(secret: Sequence[str], guess: Sequence[str]) -> Score:
    """Score ``guess`` against ``secret`` (both six emojis; the secret's are distinct)."""
    if len(secret) != SIZE or len(set(secret)) != SIZE:
        raise ValueError(f"the secret must be {SIZE} distinct emojis")
    if len(guess) != SIZE:
        raise ValueError(f"a guess is exactly {SIZE} emojis, got {len(guess)}")
    where = {emoji: i for i, emoji in enumerate(secret)}
    breakdown = []
    for i, emoji in enumerate(guess):
        j = where.get(emoji)
        d = None if j is None else abs(i - j)
        breakdown.append(Position(emoji, d, 0 if d is None else 100 - 20 * d))
    return Score(sum(p.points for p in breakdown), tuple(breakdown))


def parse_emojis(text: str | Sequence[str], alphabet: Sequence[str] = ALPHABET) -> list[str]:
    """Split a guess into emojis of ``alphabet``; spaces and variation selectors are ignored.
    Raises ``ValueError`` naming the first character that is not in the alphabet, or when the
    guess is not exactly six emojis."""
    items = list(text) if isinstance(text, str) else [c for part in text for c in part]
    known = set(alphabet)
    out: list[str] = []
    for ch in items:
        if ch.isspace() or ch in _VARIATION_SELECTORS:
            continue
        if ch not in known:
            raise ValueError(f"{ch!r} is not one of the game's emojis: {''.join(alphabet)}")
        out.append(ch)
    if len(out) != SIZE:
        raise ValueError(f"a guess is exactly {SIZE} emojis, got {len(out)}")
    return out
