"""``Transport``: what the bus needs from a connection to its server, as a protocol, and the
``ConnectionSpec`` that says where a transport connects.

``echomq_trio.resp`` (the bus's own, on trio streams) is the transport ``open_bus`` gives by
default, ``wire.Wire`` (valkey-glide) the one it gives with ``transport="glide"``;
``testing.FaultyTransport`` wraps any transport to fail or cancel chosen calls.
``Bus.transport`` is a ``Transport``: the transitions (``jobs``, ``lanes``, ``repeat``,
``events``), the ``Consumer``, the ``Metronome`` and the application talk to one, never to the
client library.

Contract of every implementation:

* Failures raise ``echomq_trio.errors.BusError`` subclasses only: ``ConnectionLost`` (retrying
  later may work), ``RequestTimedOut`` (the request may still have run), ``ServerError`` (the
  server refused it).
* Every call is a checkpoint and may be cancelled; a call cancelled while on its way may or may
  not have run on the server. Callers that must see the answer shield the call, with a deadline.
* ``blocking()`` and ``subscribe()`` open a client of their own (a blocking pop or a
  subscription holds its connection); both are closed when their block ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import attrs

__all__ = ["DEFAULT_TIMEOUT_MS", "ConnectionSpec", "Message", "Subscription", "Transport"]

DEFAULT_TIMEOUT_MS = 5000  # a request's, unless the URL says otherwise (``timeout_ms``)


@attrs.frozen
class ConnectionSpec:
    """Where and how to connect; built by ``wire.parse_url`` from a server URL."""

    hosts: tuple[tuple[str, int], ...]
    tls: bool = False
    username: str | None = None
    password: str | None = None
    db: int = 0
    cluster: bool = False
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    def redacted(self) -> str:
        """The URL without its password, for messages and logs."""
        scheme = "rediss" if self.tls else "redis"
        hosts = ",".join(f"{h}:{p}" for h, p in self.hosts)
        auth = f"{self.username or ''}:***@" if self.password else ""
        return f"{scheme}://{auth}{hosts}/{self.db}" + ("?cluster=true" if self.cluster else "")


@attrs.frozen
class Message:
    """One pub/sub message: its ``channel``, its ``data``, and the ``pattern`` it matched."""

    channel: str
    data: bytes
    pattern: str | None = None


class Subscription(Protocol):
    """Messages of a subscription, in order (``async for message in subscription``)."""

    async def receive(self) -> Message: ...

    def __aiter__(self) -> Subscription: ...

    async def __anext__(self) -> Message: ...


class Transport(Protocol):
    """A connection to one server or cluster that runs the package's scripts and raw commands."""

    @property
    def spec(self) -> ConnectionSpec:
        """Where it connects, and its request timeout (``spec.timeout_ms``)."""
        ...

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        """Run the named Lua script (see ``wire.script_source`` for names) on ``keys`` with
        ``args``; the script's reply as the client decodes it."""
        ...

    async def command(self, *args: str | bytes) -> Any:
        """Run one raw command (routed by its key on a cluster)."""
        ...

    async def scan(self, match: str, *, count: int = 1000) -> list[str]:
        """Every key matching the glob ``match`` (on every primary of a cluster), sorted, read a
        SCAN cursor step of about ``count`` keys at a time: no one call walks every key."""
        ...

    async def blpop(self, key: str, timeout_s: float) -> bytes | None:
        """Pop the head of list ``key``, waiting up to ``timeout_s``; ``None`` if none came.
        It holds the connection while it waits: call it on a ``blocking()`` transport."""
        ...

    def blocking(self) -> AbstractAsyncContextManager[Transport]:
        """A transport of its own to the same server, for blocking pops."""
        ...

    def subscribe(
        self, *, channels: Sequence[str] = (), patterns: Sequence[str] = ()
    ) -> AbstractAsyncContextManager[Subscription]:
        """A client of its own subscribed to ``channels`` and ``patterns`` (pub/sub)."""
        ...

    async def server_time_ms(self) -> int:
        """The server's clock, in Unix ms."""
        ...

    async def wait_aof(
        self, key: str, numlocal: int, numreplicas: int, timeout_ms: int
    ) -> tuple[int, int]:
        """``WAITAOF numlocal numreplicas timeout_ms`` on the server (on a cluster: the primary
        of ``key``'s slot): wait until this client's writes so far are synced to the append-only
        file locally and on ``numreplicas`` replicas; how many local (0 or 1) and replica files
        hold them. It blocks the connection while it waits: call it on a connection of its own
        (``blocking()``)."""
        ...

    async def wait_replicas(self, key: str, numreplicas: int, timeout_ms: int) -> int:
        """``WAIT numreplicas timeout_ms`` on the server (on a cluster: the primary of ``key``'s
        slot): wait until ``numreplicas`` replicas have acknowledged this client's writes so
        far, or ``timeout_ms`` passes; how many have. It blocks the connection while it waits:
        call it on a connection of its own (``blocking()``)."""
        ...
