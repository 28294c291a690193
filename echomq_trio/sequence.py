"""Numbered streams (pure): ``Seq``, and the model of the window the bus keeps for each.

Idempotency keys (``key=``) remember one key per job admitted, for a TTL: their number grows
with the traffic. Many producers number what they send instead (Telegram numbers a bot's updates
with increasing ids; a reply answers one of them): for those, ``Seq(scope, number)`` asks the
bus to admit each number of a scope once, and the state it keeps grows with the scopes, not with
the traffic.

Theory of operation: for each scope the bus remembers the ``window`` highest numbers it has
admitted (a set of at most ``window`` integers, the queue's key ``seq:<scope>``). A number is
admitted when it is not among them and, once the set is full, is higher than the lowest of them;
admitting it adds it and, past ``window``, drops the lowest. So a number sent again is refused
as long as fewer than ``window`` higher numbers have been admitted since, and numbers that
arrive out of order are all admitted as long as each is higher than the lowest remembered. A
number below the window is refused: with a scope whose numbers only grow (a chat's updates, each
admitted once), it is a repeat of one admitted long ago. The set expires ``ttl_ms`` after the
scope's last admission, so a scope that goes quiet leaves nothing behind; the TTL must outlast
any repeat (Telegram keeps an unconfirmed update at most 24 hours).

``admit`` is the rule as a pure function: the script (``scripts/lane_enqueue.lua``) keeps the same
rule, and a test holds the two to each other.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from echomq_trio._checks import check_int, check_name

__all__ = ["DEFAULT_SEQ_TTL_MS", "DEFAULT_WINDOW", "MAX_NUMBER", "MAX_WINDOW", "Seq", "admit"]

DEFAULT_WINDOW = 32  # numbers remembered per scope: reordering deeper than this is refused
MAX_WINDOW = 512  # the set stays a compact intset (the server's set-max-intset-entries)
DEFAULT_SEQ_TTL_MS = 2 * 86_400_000  # a scope quiet this long is forgotten
MAX_NUMBER = 2**53  # exact as a sorted-set score and a Lua number


def _scope(_: object, __: attrs.Attribute[str], value: str) -> None:
    check_name("seq scope", value)


def _number(_: object, __: attrs.Attribute[int], value: int) -> None:
    if check_int("seq number", value, 0) > MAX_NUMBER:
        raise ValueError(f"seq number must be <= 2**53, got {value}")


def _window(_: object, __: attrs.Attribute[int], value: int) -> None:
    if check_int("seq window", value, 1) > MAX_WINDOW:
        raise ValueError(f"seq window must be <= {MAX_WINDOW}, got {value}")


def _ttl(_: object, __: attrs.Attribute[int], value: int) -> None:
    check_int("seq ttl_ms", value, 1)


@attrs.frozen
class Seq:
    """Number ``number`` (0 to 2**53) of the stream ``scope`` (a name: 1-128 bytes, no
    whitespace or braces): admitted once, as the module says. ``ValueError``/``TypeError`` at
    construction for bad input."""

    scope: str = attrs.field(validator=_scope)
    number: int = attrs.field(validator=_number)
    window: int = attrs.field(default=DEFAULT_WINDOW, validator=_window)
    ttl_ms: int = attrs.field(default=DEFAULT_SEQ_TTL_MS, validator=_ttl)


def admit(remembered: Iterable[int], number: int, window: int) -> tuple[bool, frozenset[int]]:
    """Whether ``number`` is admitted against the scope's ``remembered`` numbers, and what is
    remembered after (the model of the script's rule)."""
    seen = set(remembered)
    if number in seen or (len(seen) >= window and number < min(seen)):
        return False, frozenset(seen)
    seen.add(number)
    while len(seen) > window:
        seen.remove(min(seen))
    return True, frozenset(seen)
