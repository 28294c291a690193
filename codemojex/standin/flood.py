"""Telegram's flood limits as the Bot API stand-in enforces them (pure): the stand-in's own
rules (``FloodRules``, configured apart from the rate limiter's ``Limits``), the sends each window
can still see, how long until one more message fits, the penalty for breaking them again, and the
most sends in any span.

The rules by default (``TELEGRAM_FLOOD``) are the figures Telegram documents in its Bots FAQ
("My bot is hitting limits, how do I avoid this?", https://core.telegram.org/bots/faq): in one
chat "avoid sending more than one message per second" (short bursts allowed: 3 in any 3 s), in a
group "no more than 20 messages per minute", and "about 30 messages per second" in bulk. Telegram
does not publish how ``retry_after`` grows; the clients that meet it (grammY's "Flood Limits" page,
python-telegram-bot's "Avoiding flood limits") report that it grows when a bot keeps breaking
the limits, so the stand-in models that: a scope (the bot, or one chat) that breaks a window is
refused until its wait is over, even when the window has room again (a call inside the wait gets
what is left of it); a scope that breaks a window again within ``penalty.forgive_s`` of the end
of its previous wait has that wait multiplied by ``penalty.growth`` (up to ``penalty.max_s``).
A client that keeps to the windows never meets a wait; one that only honours ``retry_after``
meets growing ones.

A send counts against a window while ``now - t < window``; once it is older it can never count
again (the clock only moves forward), so the model forgets it. Times are compared and
subtracted in whole milliseconds (``_ms``), never as floats: in floats ``1.003 + 1.0 - 1.003``
is ``1.0000000000000002`` (a wait of 1 s would be answered ``retry_after`` 2) and
``1.001 - 0.001`` is ``0.9999999999999999`` (a send exactly one window later would be
refused). What it keeps is bounded by the limits, never by how long it runs:

* the bot's window: its sends of the last ``global_.window_ms``, at most ``global_.limit`` (a
  send is recorded only when it fits);
* each chat's window: the chat's sends of the last ``for_chat(chat).window_ms``, at most that
  window's limit; a chat with no send inside its window is forgotten. So the chats kept are those
  sent to within their window, at most ``global_.limit`` per ``global_.window_ms`` of the longest
  chat window (with the defaults, 30/s over the group's 60 s: 1,800 chats).

Chats are kept per chat window (private, group) in the order of their last send, so the ones to
forget are always at the front: forgetting costs nothing per chat that stays.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import ClassVar

import attrs

from codemojex.telegram import Limits, Window, is_group_chat

__all__ = [
    "TELEGRAM_FLOOD",
    "FloodModel",
    "FloodRules",
    "Penalty",
    "Tracked",
    "most_in_span",
    "wait_for_slot",
]


def _at_least_one(_inst: object, attr: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        raise ValueError(f"{attr.name} must be a number >= 1, got {value!r}")


def _whole_seconds(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attr.name} must be an int >= 1, got {value!r}")


def _not_negative(_inst: object, attr: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{attr.name} must be a number >= 0, got {value!r}")


@attrs.frozen
class Penalty:
    """How Telegram punishes a scope (the bot, or one chat) that breaks a limit: it is refused
    until its wait is over, and a violation within ``forgive_s`` of the end of the scope's
    previous wait multiplies the wait by ``growth`` (at most ``max_s``). ``Penalty.NONE`` (growth
    1, nothing remembered) answers each call from the windows alone."""

    growth: float = attrs.field(default=2.0, validator=_at_least_one)
    max_s: int = attrs.field(default=300, validator=_whole_seconds)
    forgive_s: float = attrs.field(default=60.0, validator=_not_negative)

    NONE: ClassVar[Penalty]

    @property
    def enabled(self) -> bool:
        return self.growth > 1 or self.forgive_s > 0


Penalty.NONE = Penalty(growth=1.0, forgive_s=0.0)


@attrs.frozen
class FloodRules:
    """The stand-in's flood limits: the bot's window across all chats, a private chat's, a
    group's (basic groups, supergroups and channels: negative ids), and the penalty for repeated
    violations. Independent of the rate limiter's :class:`~codemojex.telegram.limits.Limits`, so a
    test can make Telegram stricter (or looser) than the limiter believes."""

    bot: Window = Window(30, 1000)
    private: Window = Window(3, 3000)
    group: Window = Window(20, 60_000)
    penalty: Penalty = Penalty()

    def for_chat(self, chat_id: int) -> Window:
        return self.group if is_group_chat(chat_id) else self.private

    def scaled(self, factor: float) -> FloodRules:
        """The same rules ``factor`` times faster (windows and ``forgive_s`` divided by it; a
        ``retry_after`` stays whole seconds, as Telegram's is)."""
        if factor <= 0:
            raise ValueError("factor must be positive")

        def f(w: Window) -> Window:
            return Window(w.limit, max(1, round(w.window_ms / factor)))

        penalty = attrs.evolve(self.penalty, forgive_s=self.penalty.forgive_s / factor)
        return FloodRules(f(self.bot), f(self.private), f(self.group), penalty)

    @classmethod
    def matching(cls, limits: Limits) -> FloodRules:
        """Exactly the windows of the limiter's ``limits`` and no penalty: a stand-in that agrees
        with the limiter (what the stand-in did before it had rules of its own)."""
        return cls(limits.global_, limits.private, limits.group, Penalty.NONE)


TELEGRAM_FLOOD = FloodRules()
"""Telegram's documented figures (see the module's docstring), with a growing penalty."""


@attrs.frozen
class _Strikes:
    count: int  # violations, each within forgive_s of the end of the previous wait
    until: float  # refused until then


@attrs.frozen
class Tracked:
    """What a :class:`FloodModel` keeps now (a snapshot from ``tracked()``)."""

    chats: int  # chats with a send inside their window
    sends: int  # send times kept: the bot's window's and every kept chat's
    penalised: int = 0  # scopes (the bot, chats) with a violation not yet forgiven


class FloodModel:
    """Telegram's windows over the sends delivered so far, and the penalties of the scopes (the
    bot, a chat) that broke them; ``now`` is seconds on one clock that never goes back (the
    stand-in's). Built from :class:`FloodRules`, or from a limiter's ``Limits`` (read as
    ``FloodRules.matching(limits)``: the same windows, no penalty)."""

    def __init__(self, rules: FloodRules | Limits) -> None:
        self.rules = rules if isinstance(rules, FloodRules) else FloodRules.matching(rules)
        self._bot: list[float] = []  # the bot's send times, oldest first
        # chat window -> chat -> its send times, oldest first; chats ordered by their last send.
        self._chats: dict[Window, collections.OrderedDict[int, list[float]]] = {}
        # scope (None: the bot; else a chat) -> its strikes, ordered by the latest violation.
        self._strikes: collections.OrderedDict[int | None, _Strikes] = collections.OrderedDict()

    def retry_after(self, chat_id: int, now: float) -> int | None:
        """Whole seconds to wait before sending to ``chat_id`` again; ``None`` if a message fits
        now (then :meth:`record` it when it is delivered). With a penalty, a scope still inside
        its wait gets what is left of it, and a scope that breaks a window again soon after its
        last wait gets a longer one."""
        self._forget(now)
        refused = max(self._refused_for(None, now), self._refused_for(chat_id, now))
        if refused > 0:
            return max(1, math.ceil(refused))
        window = self.rules.for_chat(chat_id)
        chats = self._chats.get(window)
        chat = chats.get(chat_id, []) if chats is not None else []
        bot_wait = wait_for_slot(self._bot, self.rules.bot, now)
        chat_wait = wait_for_slot(chat, window, now)
        wait = max(bot_wait, chat_wait)
        if wait <= 0:
            return None
        seconds = max(1, math.ceil(wait))
        penalty = self.rules.penalty
        if not penalty.enabled:
            return seconds
        scope = None if bot_wait >= chat_wait else chat_id
        strike = self._strikes.pop(scope, None)
        forgiven = strike is None or now - strike.until >= penalty.forgive_s
        count = 1 if forgiven or strike is None else strike.count + 1
        seconds = min(penalty.max_s, math.ceil(seconds * penalty.growth ** (count - 1)))
        self._strikes[scope] = _Strikes(count, now + seconds)  # the latest goes last
        return seconds

    def record(self, chat_id: int, now: float) -> None:
        """A message to ``chat_id`` was delivered at ``now``."""
        self._forget(now)
        self._bot.append(now)
        window = self.rules.for_chat(chat_id)
        chats = self._chats.setdefault(window, collections.OrderedDict())
        sends = chats.get(chat_id)
        if sends is None:
            chats[chat_id] = [now]
            return
        chats.move_to_end(chat_id)  # the latest sender goes last
        _drop_unseen(sends, window, now)
        sends.append(now)

    def tracked(self) -> Tracked:
        chats = sum(len(c) for c in self._chats.values())
        sends = len(self._bot) + sum(len(s) for c in self._chats.values() for s in c.values())
        return Tracked(chats, sends, len(self._strikes))

    def _refused_for(self, scope: int | None, now: float) -> float:
        strike = self._strikes.get(scope)
        return 0.0 if strike is None else max(0, _ms(strike.until) - _ms(now)) / 1000

    def _forget(self, now: float) -> None:
        _drop_unseen(self._bot, self.rules.bot, now)
        for window, chats in self._chats.items():
            while chats:
                chat_id, sends = next(iter(chats.items()))
                if _sees(window, sends[-1], now):
                    break  # this chat, and every one after it, sent within the window
                del chats[chat_id]
        # Strikes are kept while a scope is refused or not yet forgiven: each at most
        # max_s + forgive_s after its latest violation, ordered by it, so the oldest go first.
        forgive_s = self.rules.penalty.forgive_s
        while self._strikes:
            scope, strike = next(iter(self._strikes.items()))
            if now - strike.until < forgive_s or now < strike.until:
                break
            del self._strikes[scope]


def _drop_unseen(times: list[float], window: Window, now: float) -> None:
    """Drop from the front of ``times`` (ascending) the ones ``window`` no longer sees."""
    old = 0
    while old < len(times) and not _sees(window, times[old], now):
        old += 1
    del times[:old]


def _ms(t: float) -> int:
    """``t`` seconds on the stand-in's clock in whole milliseconds: the grid every comparison
    and subtraction of times is made on (see the module's notes)."""
    return round(t * 1000)


def _sees(window: Window, t: float, now: float) -> bool:
    """Whether a send at ``t`` still counts against ``window`` at ``now``."""
    return _ms(now) - _ms(t) < window.window_ms


def wait_for_slot(times: Sequence[float], window: Window, now: float) -> float:
    """Seconds until one more message fits ``window`` given earlier ``times`` (ascending; 0 if
    it fits now), a whole number of milliseconds (at least 1 when it does not fit). An earlier
    message at ``t`` still counts while ``now - t < window`` (in whole milliseconds)."""
    inside: list[float] = []
    for t in reversed(times):
        if not _sees(window, t, now):
            break
        inside.append(t)
    if len(inside) < window.limit:
        return 0.0
    inside.reverse()
    # The oldest len(inside) - limit + 1 must leave the window for one more to fit.
    frees_at_ms = _ms(inside[len(inside) - window.limit]) + window.window_ms
    return (frees_at_ms - _ms(now)) / 1000


def most_in_span(times: Sequence[float], span_s: float) -> int:
    """The most of ``times`` (ascending) inside any half-open span ``[t, t + span_s)``."""
    best = 0
    start = 0
    for end, t in enumerate(times):
        while t - times[start] >= span_s:
            start += 1
        best = max(best, end - start + 1)
    return best
