"""Testing aids: ``FaultyTransport`` fails or cancels chosen calls to a real server.

Wrap the bus's transport and plan faults on it; the calls go to the real server, except that at
the n-th call a predicate matches, the transport raises a chosen ``BusError`` or cancels a scope,
before the call is sent or after the server has run it (the answer lost)::

    faulty = FaultyTransport(bus.transport)
    lost = faulty.fail(scripts("ack"), ConnectionLost("injected"), nth=2, after=True)
    consumer = Consumer(Bus(faulty), queue, handler)
    ...
    assert lost.fired  # a test that cannot fail is a defect: check the fault happened

Calls are counted when they start, in the order tasks make them, across the transport and every
``blocking()`` transport it opens (they share the plan). ``calls`` lists every call seen.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

import attrs
import trio
import trio.testing

from echomq_trio.errors import BusError
from echomq_trio.transport import ConnectionSpec, Subscription, Transport

__all__ = [
    "Cancel",
    "Fault",
    "FaultyTransport",
    "Raise",
    "SeenCall",
    "any_call",
    "commands",
    "scripts",
]

T = TypeVar("T")
Op = Literal[
    "script", "command", "blpop", "scan", "server_time_ms", "subscribe", "wait_aof", "wait_replicas"
]


@attrs.frozen
class SeenCall:
    """One call made through the transport. ``name`` is the script's name, the command's name in
    upper case (``"TIME"`` for ``server_time_ms``, ``"BLPOP"``, ``"SCAN"``, ``"SUBSCRIBE"``,
    ``"WAITAOF"``, ``"WAIT"``); ``keys`` and ``args`` are as given (a command's arguments after
    its name; a subscription's channels and patterns; a scan's pattern and count; ``WAITAOF``'s
    and ``WAIT``'s key and counts)."""

    op: Op
    name: str
    keys: tuple[str, ...] = ()
    args: tuple[str | bytes, ...] = ()


def scripts(*names: str) -> Callable[[SeenCall], bool]:
    """Matches calls of the named scripts (any script when no name is given)."""
    return lambda call: call.op == "script" and (not names or call.name in names)


def commands(*names: str) -> Callable[[SeenCall], bool]:
    """Matches raw commands by name, any case (any command when no name is given)."""
    wanted = {n.upper() for n in names}
    return lambda call: call.op == "command" and (not wanted or call.name in wanted)


def any_call(call: SeenCall) -> bool:
    """Matches every call."""
    return True


@attrs.frozen
class Raise:
    """Raise (a copy of) ``error``: before the call is sent, or with ``after`` once the server
    has run it and answered (the answer is lost, as when a connection drops mid-reply)."""

    error: BusError
    after: bool = False


@attrs.frozen
class Cancel:
    """Cancel ``scope`` before the call is sent, or with ``after`` once the server has run it,
    and let every other task run until all are blocked, as if the call were slow: whatever
    reacts to the cancellation has reacted before the call goes on. A caller inside ``scope`` is
    cancelled at that await; a shielded caller is not, and its call goes on (the cancellation
    reaches it at its next unshielded await)."""

    scope: trio.CancelScope
    after: bool = False


@attrs.define(eq=False)
class Fault:
    """A planned fault: ``action`` at the ``nth`` matching call (counted from 1), and at the
    ``times - 1`` matching calls after it."""

    matches: Callable[[SeenCall], bool]
    action: Raise | Cancel
    nth: int = 1
    times: int = 1
    seen: int = attrs.field(default=0, init=False)  # matching calls so far
    hits: list[SeenCall] = attrs.field(factory=list, init=False)  # the calls it acted on, in order

    @property
    def fired(self) -> bool:
        return bool(self.hits)

    def _take(self, call: SeenCall) -> bool:
        if not self.matches(call):
            return False
        self.seen += 1
        if self.nth <= self.seen < self.nth + self.times:
            self.hits.append(call)
            return True
        return False


@attrs.define(eq=False)
class _Plan:
    faults: list[Fault] = attrs.Factory(list)
    # Every call, for the wrapper's life: a test aid, made for one test, never for a service.
    calls: list[SeenCall] = attrs.Factory(list)


class FaultyTransport:
    """A ``Transport`` that forwards every call to ``inner`` and injects the planned faults."""

    def __init__(self, inner: Transport, *, _plan: _Plan | None = None) -> None:
        self.inner = inner
        self._plan = _plan or _Plan()

    @property
    def spec(self) -> ConnectionSpec:
        return self.inner.spec

    @property
    def calls(self) -> list[SeenCall]:
        """Every call seen so far, faulty or not, in the order they started."""
        return self._plan.calls

    @property
    def faults(self) -> list[Fault]:
        return self._plan.faults

    def inject(self, fault: Fault) -> Fault:
        """Add ``fault`` to the plan; returns it (check ``fault.fired`` afterwards)."""
        if not isinstance(fault.nth, int) or fault.nth < 1:
            raise ValueError(f"nth must be an int >= 1, got {fault.nth!r}")
        if not isinstance(fault.times, int) or fault.times < 1:
            raise ValueError(f"times must be an int >= 1, got {fault.times!r}")
        self._plan.faults.append(fault)
        return fault

    def fail(
        self,
        matches: Callable[[SeenCall], bool],
        error: BusError,
        *,
        nth: int = 1,
        after: bool = False,
        times: int = 1,
    ) -> Fault:
        """At the ``nth`` matching call (and ``times - 1`` more), raise ``error``: before the
        call is sent, or with ``after`` once the server has run it."""
        return self.inject(Fault(matches, Raise(error, after), nth, times))

    def cancel(
        self,
        matches: Callable[[SeenCall], bool],
        scope: trio.CancelScope,
        *,
        nth: int = 1,
        after: bool = False,
    ) -> Fault:
        """At the ``nth`` matching call, cancel ``scope`` at that await: before the call is
        sent, or with ``after`` once the server has run it."""
        return self.inject(Fault(matches, Cancel(scope, after), nth))

    # --- the transport ---------------------------------------------------------------------

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        call = SeenCall("script", name, tuple(keys), tuple(args))
        return await self._run(call, lambda: self.inner.script(name, keys, args))

    async def command(self, *args: str | bytes) -> Any:
        head = args[0] if args else ""
        name = (head.decode(errors="replace") if isinstance(head, bytes) else head).upper()
        call = SeenCall("command", name, (), tuple(args[1:]))
        return await self._run(call, lambda: self.inner.command(*args))

    async def blpop(self, key: str, timeout_s: float) -> bytes | None:
        call = SeenCall("blpop", "BLPOP", (key,), (str(timeout_s),))
        return await self._run(call, lambda: self.inner.blpop(key, timeout_s))

    async def scan(self, match: str, *, count: int = 1000) -> list[str]:
        call = SeenCall("scan", "SCAN", (), (match, str(count)))
        return await self._run(call, lambda: self.inner.scan(match, count=count))

    async def server_time_ms(self) -> int:
        return await self._run(SeenCall("server_time_ms", "TIME"), self.inner.server_time_ms)

    async def wait_aof(
        self, key: str, numlocal: int, numreplicas: int, timeout_ms: int
    ) -> tuple[int, int]:
        call = SeenCall("wait_aof", "WAITAOF", (key,), (str(numlocal), str(numreplicas)))
        return await self._run(
            call, lambda: self.inner.wait_aof(key, numlocal, numreplicas, timeout_ms)
        )

    async def wait_replicas(self, key: str, numreplicas: int, timeout_ms: int) -> int:
        call = SeenCall("wait_replicas", "WAIT", (key,), (str(numreplicas),))
        return await self._run(call, lambda: self.inner.wait_replicas(key, numreplicas, timeout_ms))

    @asynccontextmanager
    async def blocking(self) -> AsyncIterator[Transport]:
        """The inner transport's ``blocking()``, wrapped: its calls count in this plan."""
        async with self.inner.blocking() as other:
            yield FaultyTransport(other, _plan=self._plan)

    @asynccontextmanager
    async def subscribe(
        self, *, channels: Sequence[str] = (), patterns: Sequence[str] = ()
    ) -> AsyncIterator[Subscription]:
        """The inner transport's subscription; a fault acts as it is opened: before, or with
        ``after`` once it is open (a raised error closes it again on its way out)."""
        call = SeenCall("subscribe", "SUBSCRIBE", (*channels, *patterns))
        due = self._due(call)
        await self._act(due, after=False)
        async with self.inner.subscribe(channels=channels, patterns=patterns) as sub:
            await self._act(due, after=True)
            yield sub

    # --- injection -------------------------------------------------------------------------

    def _due(self, call: SeenCall) -> list[Fault]:
        self._plan.calls.append(call)
        return [f for f in self._plan.faults if f._take(call)]

    async def _run(self, call: SeenCall, send: Callable[[], Awaitable[T]]) -> T:
        due = self._due(call)
        await self._act(due, after=False)
        answer = await send()
        await self._act(due, after=True)
        return answer

    @staticmethod
    async def _act(due: list[Fault], *, after: bool) -> None:
        for fault in due:
            action = fault.action
            if action.after != after:
                continue
            if isinstance(action, Raise):
                raise copy.copy(action.error)
            action.scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            await trio.lowlevel.checkpoint()
