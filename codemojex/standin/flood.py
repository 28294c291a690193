"""Telegram's flood limits as the Bot API stand-in enforces them (pure): the sends each window
can still see, how long until one more message fits, and the most sends in any span.

A send counts against a window while ``now - t < window``; once it is older it can never count
again (the clock only moves forward), so the model forgets it. What it keeps is bounded by the
limits, never by how long it runs:

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

import attrs

from codemojex.notify.limits import Limits, Window

__all__ = ["FloodModel", "Tracked", "most_in_span", "wait_for_slot"]


@attrs.frozen
class Tracked:
    """What a :class:`FloodModel` keeps now (a snapshot from ``tracked()``)."""

    chats: int  # chats with a send inside their window
    sends: int  # send times kept: the bot's window's and every kept chat's


class FloodModel:
    """Telegram's windows over the sends delivered so far; ``now`` is seconds on one clock that
    never goes back (the stand-in's)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._bot: list[float] = []  # the bot's send times, oldest first
        # chat window -> chat -> its send times, oldest first; chats ordered by their last send.
        self._chats: dict[Window, collections.OrderedDict[int, list[float]]] = {}

    def retry_after(self, chat_id: int, now: float) -> int | None:
        """Whole seconds until a message to ``chat_id`` fits every window; ``None`` if it fits
        now (then :meth:`record` it when it is delivered)."""
        self._forget(now)
        window = self.limits.for_chat(chat_id)
        chats = self._chats.get(window)
        chat = chats.get(chat_id, []) if chats is not None else []
        wait = max(wait_for_slot(self._bot, self.limits.global_, now),
                   wait_for_slot(chat, window, now))  # fmt: skip
        if wait <= 0:
            return None
        return max(1, math.ceil(wait))

    def record(self, chat_id: int, now: float) -> None:
        """A message to ``chat_id`` was delivered at ``now``."""
        self._forget(now)
        self._bot.append(now)
        window = self.limits.for_chat(chat_id)
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
        return Tracked(chats, sends)

    def _forget(self, now: float) -> None:
        _drop_unseen(self._bot, self.limits.global_, now)
        for window, chats in self._chats.items():
            while chats:
                chat_id, sends = next(iter(chats.items()))
                if now - sends[-1] < window.window_s:
                    break  # this chat, and every one after it, sent within the window
                del chats[chat_id]


def _drop_unseen(times: list[float], window: Window, now: float) -> None:
    """Drop from the front of ``times`` (ascending) the ones ``window`` no longer sees."""
    old = 0
    while old < len(times) and now - times[old] >= window.window_s:
        old += 1
    del times[:old]


def wait_for_slot(times: Sequence[float], window: Window, now: float) -> float:
    """Seconds until one more message fits ``window`` given earlier ``times`` (ascending; 0 if
    it fits now). An earlier message at ``t`` still counts while ``now - t < window``."""
    inside: list[float] = []
    for t in reversed(times):
        if now - t >= window.window_s:
            break
        inside.append(t)
    if len(inside) < window.limit:
        return 0.0
    inside.reverse()
    # The oldest len(inside) - limit + 1 must leave the window for one more to fit.
    frees_at = inside[len(inside) - window.limit] + window.window_s
    return max(frees_at - now, 1e-9)


def most_in_span(times: Sequence[float], span_s: float) -> int:
    """The most of ``times`` (ascending) inside any half-open span ``[t, t + span_s)``."""
    best = 0
    start = 0
    for end, t in enumerate(times):
        while t - times[start] >= span_s:
            start += 1
        best = max(best, end - start + 1)
    return best
