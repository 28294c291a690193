"""Telegram's sending limits as windows (pure): at most ``limit`` messages in any sliding window
of ``window_ms``. The rate limiter spends them and the Bot API stand-in enforces them.

A window of N per W gives a burst of N and a long-run rate of N/W, and, unlike a plain token
bucket (which lets a full bucket and its refill land in one second: twice the rate), it never
lets more than N into any window of W, which is what Telegram punishes.
"""

from __future__ import annotations

import attrs

from codemojex.telegram.chats import is_group_chat

__all__ = ["Limits", "Window"]


def _positive(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attr.name} must be a positive int, got {value!r}")


@attrs.frozen
class Window:
    limit: int = attrs.field(validator=_positive)
    window_ms: int = attrs.field(validator=_positive)

    @property
    def window_s(self) -> float:
        return self.window_ms / 1000

    @property
    def per_second(self) -> float:
        return self.limit * 1000 / self.window_ms

    def __str__(self) -> str:
        return f"{self.limit}/{self.window_ms}"

    @classmethod
    def parse(cls, text: str, what: str = "a window") -> Window:
        """A window written ``LIMIT/WINDOW_MS`` (``30/1000``), as ``str`` writes it;
        ``ValueError`` naming ``what`` for anything else."""
        limit, slash, ms = text.partition("/")
        try:
            if not slash:
                raise ValueError("no '/'")
            return cls(int(limit), int(ms))
        except ValueError:
            raise ValueError(
                f"{what} must look like LIMIT/WINDOW_MS with positive integers (e.g. 30/1000), "
                f"got {text!r}"
            ) from None


@attrs.frozen
class Limits:
    """Defaults: the bot 30/s (burst 30), a private chat 1/s with a burst of 3, a group 20 per
    minute."""

    global_: Window = Window(30, 1000)
    private: Window = Window(3, 3000)
    group: Window = Window(20, 60_000)

    def for_chat(self, chat_id: int) -> Window:
        return self.group if is_group_chat(chat_id) else self.private

    def scaled(self, factor: float) -> Limits:
        """The same limits ``factor`` times faster (windows divided by it), for fast tests."""
        if factor <= 0:
            raise ValueError("factor must be positive")

        def f(w: Window) -> Window:
            return Window(w.limit, max(1, round(w.window_ms / factor)))

        return Limits(f(self.global_), f(self.private), f(self.group))
