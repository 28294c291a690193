"""``Latest``: a one-slot mailbox that keeps only the newest value (pure trio).

The live feed gives each viewer one: a slow viewer gets the latest board when it is ready for
it, never a growing backlog, and putting never blocks the sender (so it never slows others).
"""

from __future__ import annotations

from typing import Generic, TypeVar

import trio

__all__ = ["Latest"]

T = TypeVar("T")


class Latest(Generic[T]):
    def __init__(self) -> None:
        self._value: T | None = None
        self._has = False
        self._event = trio.Event()

    def put(self, value: T) -> bool:
        """Store ``value``, replacing one not yet taken; never blocks. True when it replaced
        one."""
        replacing = self._has
        self._value = value
        self._has = True
        self._event.set()
        return replacing

    async def get(self) -> T:
        """Wait for a value and take it."""
        while not self._has:
            await self._event.wait()
        self._has = False
        self._event = trio.Event()
        value = self._value
        self._value = None
        return value  # type: ignore[return-value]
