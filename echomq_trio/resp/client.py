"""``RespTransport``: the bus's ``Transport`` on trio streams, one pipelined connection.

Theory of operation:

* One connection (``_Link``) serves every task. A call queues its request with the codec, then
  flushes: the first caller to find no send under way sends everything queued, looping until the
  buffer is empty, so requests of concurrent callers go out together in one send while earlier
  replies are still on their way. One reader task parses what comes in and hands each reply to
  its caller, in the order the requests went (``codec.Codec``).
* A caller that is cancelled or times out leaves its waiter behind: the reader still reads its
  reply and drops it, so the stream stays in step for everyone else. The call may or may not
  have run on the server (the transport's contract). A send is shielded (with the request
  timeout as its deadline), so a cancellation never cuts a request in half; only the reader
  receives, and it is cancelled only when the link is closed.
* A link that fails (end of stream, a reset, bytes that are not RESP) fails every call in flight
  with ``ConnectionLost`` and is closed. The next call connects again; when a connection attempt
  fails, the calls of the next ``backoff`` seconds (50 ms doubling to 2 s) fail at once with
  ``ConnectionLost`` instead of hammering a server that is down.
* Every task runs in the nursery of ``open_resp``'s block: none outlives the transport.
  ``blocking()`` and ``subscribe()`` open connections of their own, closed when their block ends.

Connecting: TCP (``trio.SSLStream`` over it for ``rediss://``), then ``HELLO 3`` with the URL's
credentials (RESP3; a server without ``HELLO`` gets ``AUTH`` and RESP2), then ``SELECT`` of a
database other than 0. Scripts run by ``EVALSHA``; a server without the script (``NOSCRIPT``:
flushed, restarted) gets ``SCRIPT LOAD`` and the call again. Error replies map to the bus's
errors as ``wire`` maps them (``wire.server_error``). A standalone server only, for now: a
cluster URL raises ``ValueError``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from echomq_trio.errors import AuthenticationFailed, BusError, ConnectionLost, RequestTimedOut
from echomq_trio.lua import script_source
from echomq_trio.protocol import as_bytes, as_text
from echomq_trio.resp.codec import Codec, ProtocolError, ReplyError
from echomq_trio.transport import Message
from echomq_trio.wire import (
    DEFAULT_CONNECT_TIMEOUT_MS,
    ConnectionSpec,
    RefusalLog,
    _probe,
    parse_url,
    server_error,
)

__all__ = ["RespSubscription", "RespTransport", "open_resp"]

log = logging.getLogger("echomq_trio.resp")

RECEIVE_BYTES = 65536
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 2.0
_LOST = (
    "lost the connection to the server at {} (it stopped, restarted or closed the connection); "
    "reconnecting"
)


class _Waiter:
    """One request's reply, or the error that stands for it."""

    __slots__ = ("done", "error", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: Any = None
        self.error: BaseException | None = None


class _Link:
    """One connected stream, its codec, and the writer and reader tasks that serve it."""

    def __init__(self, stream: trio.abc.Stream, where: str) -> None:
        self.stream = stream
        self.where = where
        self.codec: Codec[_Waiter] = Codec()
        self.alive = True
        self.error: BaseException | None = None  # why it ended, if it failed
        self.scope = trio.CancelScope()
        self._sending = False  # a task is in ``flush``

    def send(self, args: Sequence[str | bytes]) -> _Waiter:
        """Queue one request (synchronous: atomic with respect to cancellation); ``flush``
        sends it, unless a flush under way takes it along."""
        waiter = _Waiter()
        self.codec.send(args, waiter)
        return waiter

    async def flush(self, timeout_s: float) -> None:
        """Send every request queued, unless another task is sending already (it sends ours
        too, before it stops). Shielded, so that no cancellation cuts a request in half, with a
        deadline: a send that cannot finish within ``timeout_s`` (a server that reads nothing)
        closes the link, failing every call in flight."""
        if self._sending:
            await trio.lowlevel.checkpoint()
            return
        self._sending = True
        try:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + timeout_s
                while data := self.codec.data_to_send():
                    await self.stream.send_all(data)
            if scope.cancelled_caught:
                self.close()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.error = self.error or exc
            self.close()
        finally:
            self._sending = False

    async def run(self) -> None:
        """Read until the link fails or is closed; then fail every call in flight."""
        try:
            with self.scope:
                await self._read()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.error = self.error or exc
        except ProtocolError as exc:
            log.warning("closing the connection to %s: %s", self.where, exc)
            self.error = self.error or exc
        finally:
            self.alive = False
            lost = ConnectionLost(_LOST.format(self.where))
            lost.__cause__ = self.error
            for waiter in self.codec.take_waiting():
                waiter.error = lost
                waiter.done.set()
            await trio.aclose_forcefully(self.stream)

    async def _read(self) -> None:
        codec = self.codec
        while True:
            data = await self.stream.receive_some(RECEIVE_BYTES)
            if not data:
                return  # the server closed the connection
            for waiter, reply in codec.receive_data(data):
                waiter.reply = reply
                waiter.done.set()
            if codec.pushes:
                codec.pushes.clear()  # no subscription here: nobody reads them

    def close(self) -> None:
        self.scope.cancel()


def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


async def _open_stream(spec: ConnectionSpec) -> trio.abc.Stream:
    host, port = spec.hosts[0]
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    if spec.tls:
        tls = trio.SSLStream(stream, _ssl_context(), server_hostname=host)
        try:
            await tls.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(tls)
            raise
        stream = tls
    return stream


async def _exchange(stream: trio.abc.Stream, codec: Codec[int], args: Sequence[str]) -> Any:
    """Send one request and read its reply, on a stream no task reads yet (the handshake)."""
    codec.send(args, 0)
    await stream.send_all(codec.data_to_send())
    while True:
        data = await stream.receive_some(RECEIVE_BYTES)
        if not data:
            raise trio.BrokenResourceError("the server closed the connection")
        got = codec.receive_data(data)
        if got:
            return got[0][1]


async def _handshake(stream: trio.abc.Stream, spec: ConnectionSpec) -> int:
    """``HELLO 3`` with the credentials (``AUTH`` and RESP2 where there is no ``HELLO``), then
    ``SELECT``; the protocol version agreed. Refused credentials raise ``AuthenticationFailed``."""
    codec: Codec[int] = Codec()
    hello = ["HELLO", "3"]
    if spec.password is not None:
        hello += ["AUTH", spec.username or "default", spec.password]
    reply = await _exchange(stream, codec, hello)
    protocol = 3
    if isinstance(reply, ReplyError) and "unknown command" in str(reply).lower():
        protocol = 2
        if spec.password is not None:
            auth = ["AUTH", spec.password]
            if spec.username:
                auth.insert(1, spec.username)
            reply = await _exchange(stream, codec, auth)
        else:
            reply = "OK"
    if isinstance(reply, ReplyError):
        _refused(spec, str(reply))
    if spec.db:
        reply = await _exchange(stream, codec, ["SELECT", str(spec.db)])
        if isinstance(reply, ReplyError):
            raise server_error(f"{reply} (SELECT {spec.db} on {spec.redacted()})")
    return protocol


def _refused(spec: ConnectionSpec, text: str) -> None:
    where = f"cannot connect to {spec.redacted()}"
    if "WRONGPASS" in text or "invalid password" in text or "invalid username-password" in text:
        raise AuthenticationFailed(f"{where}: authentication failed: wrong username or password")
    if "NOAUTH" in text:
        raise AuthenticationFailed(
            f"{where}: authentication failed: the server requires a password and the URL has none"
        )
    raise server_error(f"{where}: {text}")


async def _connect(spec: ConnectionSpec) -> trio.abc.Stream:
    """A stream to the server, handshake done, within the connect timeout; failures raise
    ``ConnectionLost`` (``AuthenticationFailed`` for refused credentials) naming the server."""
    stream: trio.abc.Stream | None = None
    try:
        with trio.fail_after(DEFAULT_CONNECT_TIMEOUT_MS / 1000):
            stream = await _open_stream(spec)
            await _handshake(stream, spec)
            return stream
    except BaseException as exc:
        if stream is not None:
            await trio.aclose_forcefully(stream)
        if isinstance(exc, BusError):
            raise
        if isinstance(exc, trio.TooSlowError):
            raise ConnectionLost(
                f"cannot connect to {spec.redacted()}: no answer within "
                f"{DEFAULT_CONNECT_TIMEOUT_MS} ms"
            ) from exc
        if isinstance(exc, OSError | trio.BrokenResourceError | ProtocolError):
            raise ConnectionLost(f"cannot connect to {spec.redacted()}: {exc}") from exc
        raise


class RespTransport:
    """A ``transport.Transport`` on one pipelined trio connection; get one from ``open_resp``."""

    def __init__(
        self,
        spec: ConnectionSpec,
        nursery: trio.Nursery,
        *,
        connect: Callable[[ConnectionSpec], Awaitable[trio.abc.Stream]] | None = None,
    ) -> None:
        self.spec = spec
        self._nursery = nursery
        # What opens a connection, handshake done (a test gives one end of a memory stream).
        self._connect = connect or _connect
        self._where = spec.redacted()
        self._link: _Link | None = None
        self._connecting = trio.Lock()
        self._backoff_s = 0.0
        self._retry_at = -math.inf
        self._timeout_s = spec.timeout_ms / 1000
        self._shas: dict[str, str] = {}
        self._refusals = RefusalLog(self._where)

    @property
    def cluster(self) -> bool:
        return False

    # --- connection ------------------------------------------------------------------------

    async def _live(self) -> _Link:
        link = self._link
        if link is not None and link.alive:
            return link
        async with self._connecting:
            link = self._link
            if link is not None and link.alive:
                return link
            if trio.current_time() < self._retry_at:
                raise ConnectionLost(_LOST.format(self._where))
            try:
                stream = await self._connect(self.spec)
            except AuthenticationFailed:
                raise
            except ConnectionLost:
                self._backoff_s = min(BACKOFF_MAX_S, max(BACKOFF_FIRST_S, self._backoff_s * 2))
                self._retry_at = trio.current_time() + self._backoff_s
                raise
            self._backoff_s = 0.0
            self._retry_at = -math.inf
            return self._adopt(stream)

    def _adopt(self, stream: trio.abc.Stream) -> _Link:
        """Serve the calls on ``stream`` (connected, handshake done) from now on."""
        link = self._link = _Link(stream, self._where)
        self._nursery.start_soon(link.run)
        return link

    async def _call(self, args: Sequence[str | bytes], timeout_s: float | None = None) -> Any:
        link = self._link
        if link is None or not link.alive:
            link = await self._live()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        waiter = link.send(args)
        await link.flush(self._timeout_s)
        with trio.move_on_after(self._timeout_s if timeout_s is None else timeout_s):
            await waiter.done.wait()
        if not waiter.done.is_set():
            raise RequestTimedOut(
                f"the server at {self._where} did not answer {as_text(args[0])} within "
                f"{self.spec.timeout_ms} ms (it may still have run it)"
            )
        if waiter.error is not None:
            raise waiter.error
        reply = waiter.reply
        if isinstance(reply, ReplyError):
            error = server_error(str(reply))
            self._refusals.note(error, reply)
            raise error
        return reply

    async def aclose(self) -> None:
        if self._link is not None:
            self._link.close()

    # --- the transport ---------------------------------------------------------------------

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        """Run the named script by ``EVALSHA``; on ``NOSCRIPT``, ``SCRIPT LOAD`` and again."""
        sha = self._shas.get(name)
        if sha is None:
            # Bounded by the scripts on disk: a name without one raises before it is added.
            sha = self._shas[name] = hashlib.sha1(script_source(name).encode()).hexdigest()
        call = ("EVALSHA", sha, str(len(keys)), *keys, *args)
        try:
            return await self._call(call)
        except BusError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        await self._call(("SCRIPT", "LOAD", script_source(name)))
        return await self._call(call)

    async def command(self, *args: str | bytes) -> Any:
        """Run one raw command."""
        if not args:
            raise ValueError("a command needs at least its name")
        return await self._call(args)

    async def scan(self, match: str, *, count: int = 1000) -> list[str]:
        found: set[str] = set()
        cursor: bytes | str = "0"
        while True:
            cursor, keys = await self._call(("SCAN", cursor, "MATCH", match, "COUNT", str(count)))
            found.update(as_text(k) for k in keys)
            if cursor in (b"0", "0"):
                return sorted(found)

    async def blpop(self, key: str, timeout_s: float) -> bytes | None:
        """Pop the head of ``key``, waiting up to ``timeout_s`` (this connection waits too)."""
        got = await self._call(("BLPOP", key, repr(float(timeout_s))), self._timeout_s + timeout_s)
        return None if got is None else as_bytes(got[1])

    async def wait_aof(
        self, key: str, numlocal: int, numreplicas: int, timeout_ms: int
    ) -> tuple[int, int]:
        args = ("WAITAOF", str(numlocal), str(numreplicas), str(timeout_ms))
        local, replicas = await self._call(args, self._timeout_s + timeout_ms / 1000)
        return int(local), int(replicas)

    async def server_time_ms(self) -> int:
        secs, micros = await self._call(("TIME",))
        return int(secs) * 1000 + int(micros) // 1000

    @asynccontextmanager
    async def blocking(self) -> AsyncIterator[RespTransport]:
        """A connection of its own to the same server, for blocking pops."""
        async with open_resp(self.spec) as other:
            yield other

    @asynccontextmanager
    async def subscribe(
        self, *, channels: Sequence[str] = (), patterns: Sequence[str] = ()
    ) -> AsyncIterator[RespSubscription]:
        """A connection of its own subscribed to ``channels`` and ``patterns``."""
        if not channels and not patterns:
            raise ValueError("subscribe to at least one channel or pattern")
        stream = await _connect(self.spec)
        try:
            sub = RespSubscription(stream, self._where)
            await sub._start(channels, patterns)
            yield sub
        finally:
            await trio.aclose_forcefully(stream)


class RespSubscription:
    """Messages of a subscription, in order (a ``transport.Subscription``). Receive them from one
    task; a cancelled ``receive`` loses nothing (what was read stays with the codec)."""

    def __init__(self, stream: trio.abc.Stream, where: str) -> None:
        self._stream = stream
        self._where = where
        self._codec: Codec[None] = Codec(subscriber=True)

    async def _start(self, channels: Sequence[str], patterns: Sequence[str]) -> None:
        if channels:
            self._codec.send(("SUBSCRIBE", *channels), None)
        if patterns:
            self._codec.send(("PSUBSCRIBE", *patterns), None)
        data = self._codec.data_to_send()
        self._codec.take_waiting()  # no reply pairs with them: every frame is a push
        await self._stream.send_all(data)

    async def receive(self) -> Message:
        pushes = self._codec.pushes
        while True:
            while pushes:
                frame = pushes.popleft()
                kind = as_text(frame[0]) if frame else ""
                if kind == "message":
                    return Message(as_text(frame[1]), as_bytes(frame[2]))
                if kind == "pmessage":
                    return Message(as_text(frame[2]), as_bytes(frame[3]), as_text(frame[1]))
            try:
                data = await self._stream.receive_some(RECEIVE_BYTES)
            except (trio.BrokenResourceError, OSError) as exc:
                raise ConnectionLost(_LOST.format(self._where)) from exc
            if not data:
                raise ConnectionLost(_LOST.format(self._where))
            try:
                self._codec.receive_data(data)
            except ProtocolError as exc:
                raise ConnectionLost(f"{_LOST.format(self._where)}: {exc}") from exc

    def __aiter__(self) -> RespSubscription:
        return self

    async def __anext__(self) -> Message:
        return await self.receive()


@asynccontextmanager
async def open_resp(target: str | ConnectionSpec) -> AsyncIterator[RespTransport]:
    """Connect to the server named by a URL (or a parsed spec); close every connection on exit.

    A server that cannot be reached raises ``ConnectionLost`` naming it and why; refused
    credentials raise ``AuthenticationFailed``; a cluster URL raises ``ValueError`` (this
    transport serves a standalone server only, for now)."""
    spec = parse_url(target) if isinstance(target, str) else target
    if spec.cluster:
        raise ValueError(
            f"transport 'trio' serves a standalone server only, for now; {spec.redacted()} is a "
            "cluster: use transport 'glide'"
        )
    await _probe(spec)
    stream = await _connect(spec)
    try:
        async with trio.open_nursery() as nursery:
            transport = RespTransport(spec, nursery)
            transport._adopt(stream)
            try:
                yield transport
            finally:
                await transport.aclose()
    except BaseExceptionGroup as group:
        # The nursery's own tasks never raise (a link's reader ends quietly): the error is the
        # block's own, and the caller gets it as the block raised it.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
