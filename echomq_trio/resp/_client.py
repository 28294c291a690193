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
* Every task runs in the nursery of ``open_resp``'s block: none outlives the transport. A
  link's tasks are shielded from a cancellation that passes through the block (a shutdown), so
  cleanup that calls the server under a shield with a deadline (a consumer handing back the jobs
  it holds) still has its connection; the block's end closes them. ``blocking()`` and
  ``subscribe()`` open connections of their own, closed when their block ends.

Connecting: TCP (``trio.SSLStream`` over it for ``rediss://``), then ``HELLO 3`` with the URL's
credentials (RESP3; a server without ``HELLO`` gets ``AUTH`` and RESP2), then ``SELECT`` of a
database other than 0.

Scripts: the bus's run by ``FCALL`` of its function library (``echomq_trio._library``: the
scripts' helpers are made once, when it loads, not on every call). A server without the library
(``Function not found``: a new server, or ``FUNCTION FLUSH``) gets ``FUNCTION LOAD`` and the call
again; a server that runs no functions (before Redis 7.0, or an ACL that refuses them) gets
``EVALSHA`` from then on, and so, for a second at a time, does a server that refuses the load as
a write (the memory ceiling, a failed disk). An application's scripts always run by ``EVALSHA``;
a server without the script (``NOSCRIPT``: flushed, restarted) gets ``SCRIPT LOAD`` and the call
again. Error replies map to the bus's errors as ``wire`` maps them (``wire.server_error``). A
standalone server only, for now: a cluster URL raises ``ValueError``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import outcome
import trio

from echomq_trio._library import library
from echomq_trio._replies import as_bytes, as_text
from echomq_trio.errors import (
    AuthenticationFailed,
    BusError,
    ConnectionLost,
    RequestTimedOut,
    WritesRefused,
)
from echomq_trio.lua import script_source
from echomq_trio.resp._codec import SHAPED, Codec, ProtocolError, ReplyError, shape
from echomq_trio.transport import Message
from echomq_trio.wire import (
    DEFAULT_CONNECT_TIMEOUT_MS,
    ConnectionSpec,
    RefusalLog,
    login_refusal,
    parse_url,
    probe,
    server_error,
)

__all__ = ["RespSubscription", "RespTransport", "open_resp"]

log = logging.getLogger("echomq_trio.resp")

RECEIVE_BYTES = 65536
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 2.0
SUBSCRIPTION_BUFFER = 1024  # messages a subscription holds for a reader that is behind
LIBRARY_RETRY_S = 1.0  # after a load the server refused as a write: EVALSHA for this long
READ_FIRST_S = 0.001  # the reader's turn before calls past their deadline are timed out
# FCALL's answers that mean "no function here": load the library, or fall back to EVALSHA.
_NO_FUNCTION = ("ERR Function not found", "ERR unknown command", "NOPERM")
_LOST = (
    "lost the connection to the server at {} (it stopped, restarted or closed the connection); "
    "reconnecting"
)


class _Waiter:
    """One request's answer: ``outcome`` once known (a reply, or the error standing for it), and
    the caller's task while it is parked waiting for it."""

    __slots__ = ("deadline", "outcome", "task")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.outcome: outcome.Outcome[Any] | None = None
        self.task: trio.lowlevel.Task | None = None

    def resolve(self, answer: outcome.Outcome[Any]) -> None:
        """Settle it (once: a later answer, such as a reply after a timeout, is dropped) and
        wake its caller if it is parked."""
        if self.outcome is not None:
            return
        self.outcome = answer
        task = self.task
        if task is not None:
            self.task = None
            trio.lowlevel.reschedule(task, answer)

    async def wait(self) -> Any:
        """The answer: parks until it is known. Cancelling it abandons the answer (the reply is
        still read, and dropped)."""
        if self.outcome is None:
            self.task = trio.lowlevel.current_task()

            def abort(_: object) -> trio.lowlevel.Abort:
                self.task = None
                self.outcome = _ABANDONED
                return trio.lowlevel.Abort.SUCCEEDED

            return await trio.lowlevel.wait_task_rescheduled(abort)
        await trio.lowlevel.checkpoint()
        return self.outcome.unwrap()


_ABANDONED: outcome.Outcome[Any] = outcome.Value(None)


class _StreamIO:
    """Any ``trio.abc.Stream`` (TLS, a test's memory stream): every send by the writer task."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream

    def try_send(self, data: bytes) -> int:
        return 0

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive(self) -> bytes | bytearray:
        return await self.stream.receive_some(RECEIVE_BYTES)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


class _SocketIO:
    """A plain TCP socket, non-blocking, driven directly: a request goes out in one ``send``
    system call by the caller itself (no await, so no cancellation can cut it), the writer task
    takes over only when the kernel's buffer is full; a read is one ``recv`` after
    ``wait_readable``. (``trio.SocketStream`` costs a trip through the scheduler per send.)"""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def try_send(self, data: bytes | memoryview) -> int:
        try:
            return self.sock.send(data)
        except BlockingIOError:
            return 0

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            await trio.lowlevel.wait_writable(self.sock)
            view = view[self.try_send(view) :]

    async def receive(self) -> bytes:
        while True:
            await trio.lowlevel.wait_readable(self.sock)
            try:
                return self.sock.recv(RECEIVE_BYTES)
            except BlockingIOError:
                continue

    async def aclose(self) -> None:
        trio.lowlevel.notify_closing(self.sock)
        self.sock.close()
        await trio.lowlevel.checkpoint()


def _io_of(stream: trio.abc.Stream) -> _StreamIO | _SocketIO:
    """A plain TCP stream's socket, taken over; any other stream as it is."""
    if isinstance(stream, trio.SocketStream):
        fd = stream.socket.detach()
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        return _SocketIO(sock)
    return _StreamIO(stream)


class _Link:
    """One connection, its codec, and the tasks that serve it: the reader, the writer (for what
    the kernel did not take at once) and the watch (request timeouts)."""

    def __init__(self, stream: trio.abc.Stream, where: str, timeout_s: float) -> None:
        self.io = _io_of(stream)
        self.where = where
        self.timeout_s = timeout_s
        self.codec: Codec[_Waiter] = Codec()
        self.alive = True
        self.error: BaseException | None = None  # why it ended, if it failed
        # Shielded: a cancellation passing through the transport's block (a shutdown) must not
        # take the connection from the calls its cleanup makes under shields of their own (a
        # consumer's release of what it holds); the link ends when it fails or is closed, and
        # ``open_resp`` closes it when its block ends, so it never outlives the block.
        self.scope = trio.CancelScope(shield=True)
        self._writing = False  # the writer task holds bytes to send: new ones queue behind
        self._wake_writer = trio.Event()

    def send(self, args: Sequence[str | bytes], timeout_s: float) -> _Waiter:
        """Send one request, or queue it behind those the writer task is sending. Synchronous:
        atomic with respect to cancellation (a request is sent whole or queued whole)."""
        waiter = _Waiter(trio.current_time() + timeout_s)
        codec = self.codec
        codec.send(args, waiter)
        if self._writing:
            return waiter
        data = codec.data_to_send()
        try:
            sent = self.io.try_send(data)
        except OSError as exc:
            self.error = self.error or exc
            sent = len(data)  # the link fails: its reader ends and fails every waiter
            self.close()
        if sent < len(data):
            codec.unsend(data[sent:])
            self._writing = True
            self._wake_writer.set()
        return waiter

    async def run(self) -> None:
        """Serve the link until it fails or is closed; then fail every call in flight."""
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._guard, self._write, nursery)
                    nursery.start_soon(self._guard, self._watch, nursery)
                    await self._guard(self._read, nursery)
        finally:
            self.alive = False
            for waiter in self.codec.take_waiting():
                lost = ConnectionLost(_LOST.format(self.where))  # one each: each is raised
                lost.__cause__ = self.error
                waiter.resolve(outcome.Error(lost))
            await self.io.aclose()

    async def _guard(self, part: Callable[[], Awaitable[None]], nursery: trio.Nursery) -> None:
        """Run one part; when any ends, for whatever reason, all end (and the link with them)."""
        try:
            await part()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.error = self.error or exc
        except ProtocolError as exc:
            log.warning("closing the connection to %s: %s", self.where, exc)
            self.error = self.error or exc
        finally:
            nursery.cancel_scope.cancel()

    async def _read(self) -> None:
        codec = self.codec
        io = self.io
        while True:
            data = await io.receive()
            if not data:
                return  # the server closed the connection
            for waiter, reply in codec.receive_data(data):
                waiter.resolve(outcome.Value(reply))
            if codec.pushes:
                codec.pushes.clear()  # no subscription here: nobody reads them

    async def _write(self) -> None:
        codec = self.codec
        while True:
            await self._wake_writer.wait()
            self._wake_writer = trio.Event()
            while data := codec.data_to_send():
                await self.io.send(data)
            self._writing = False

    async def _watch(self) -> None:
        """Time out the calls past their deadlines, checking a tenth of the timeout apart (at
        most 100 ms): a wake-up now and then instead of a timer per call. A reply already
        here counts: the reader has its turn first (``READ_FIRST_S``, then a checkpoint, so it
        has run once since the socket was last polled), so a process that stalled past a
        deadline (stopped, swapped out, its VM held) while the server answered takes the
        answer instead of calling it a timeout."""
        tick = min(0.1, self.timeout_s / 10)
        while True:
            await trio.sleep(tick)
            now = trio.current_time()
            overdue = [w for w in self.codec.waiting() if w.outcome is None and w.deadline <= now]
            if not overdue:
                continue
            # One turn is one read of up to RECEIVE_BYTES: after a long stop with more than
            # that waiting, the calls behind it may still time out (they are told they may
            # have run, which is true).
            await trio.sleep(READ_FIRST_S)
            await trio.lowlevel.checkpoint()
            for waiter in overdue:
                waiter.resolve(outcome.Error(_TimedOut()))  # no-op for one answered since

    def close(self) -> None:
        self.scope.cancel()


class _TimedOut(Exception):
    """A waiter's deadline passed (the caller words the ``RequestTimedOut``)."""


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
    # No HELLO: Redis answers "unknown command"; Valkey, asked with a password, refuses any
    # command before AUTH (NOAUTH), so HELLO never ran: authenticate and speak RESP2.
    no_hello = isinstance(reply, ReplyError) and (
        "unknown command" in str(reply).lower()
        or (spec.password is not None and str(reply).startswith("NOAUTH"))
    )
    if no_hello:
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
    raise login_refusal(spec, text) or server_error(f"cannot connect to {spec.redacted()}: {text}")


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
        self._functions = True  # the bus's scripts by FCALL of its library, until refused
        self._loading = trio.Lock()
        self._loads = 0  # libraries this transport loaded
        self._library_retry_at: float | None = None  # EVALSHA until then: a load was refused
        self._refusals = RefusalLog(self._where)
        self._closed = False

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
            if self._closed:
                raise ConnectionLost(f"the connection to {self._where} is closed")
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
        link = self._link = _Link(stream, self._where, self._timeout_s)
        self._nursery.start_soon(link.run)
        return link

    async def _call(
        self, args: Sequence[str | bytes], timeout_s: float | None = None, *, asking: bool = False
    ) -> Any:
        """Send ``args`` and return the reply; with ``asking``, right behind an ``ASKING`` on
        the same connection (nothing can come between: both are queued in one step)."""
        link = self._link
        if link is None or not link.alive:
            link = await self._live()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        if asking:
            link.send(("ASKING",), timeout_s)  # its "OK" is read and dropped
        waiter = link.send(args, timeout_s)
        try:
            reply = await waiter.wait()
        except _TimedOut:
            raise RequestTimedOut(
                f"the server at {self._where} did not answer {as_text(args[0])} within "
                f"{round(timeout_s * 1000)} ms "
                "(it may still have run it)"
            ) from None
        if isinstance(reply, ReplyError):
            error = server_error(str(reply))
            self._refusals.note(error, reply)
            raise error
        return reply

    async def aclose(self) -> None:
        """Close the connection: calls in flight raise ``ConnectionLost``, and so do later ones."""
        self._closed = True
        if self._link is not None:
            self._link.close()

    # --- the transport ---------------------------------------------------------------------

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        """Run the named script: a bus script by ``FCALL`` (the library loaded on ``Function
        not found``), else by ``EVALSHA`` (on ``NOSCRIPT``, ``SCRIPT LOAD`` and again)."""
        return await self._script(name, keys, args)

    async def _script(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[str | bytes],
        *,
        asking: bool = False,
    ) -> Any:
        function = library().functions.get(name) if self._functions else None
        if function is not None and (
            self._library_retry_at is None or trio.current_time() >= self._library_retry_at
        ):
            call = ("FCALL", function, str(len(keys)), *keys, *args)
            try:
                return await self._call(call, asking=asking)
            except BusError as exc:
                if not str(exc).startswith(_NO_FUNCTION):
                    raise
                missing = str(exc)
            if await self._load_library(missing):
                return await self._call(call, asking=asking)
        sha = self._shas.get(name)
        if sha is None:
            # Bounded by the scripts on disk: a name without one raises before it is added.
            sha = self._shas[name] = hashlib.sha1(script_source(name).encode()).hexdigest()
        call = ("EVALSHA", sha, str(len(keys)), *keys, *args)
        try:
            return await self._call(call, asking=asking)
        except BusError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        await self._call(("SCRIPT", "LOAD", script_source(name)))
        return await self._call(call, asking=asking)

    async def _load_library(self, missing: str) -> bool:
        """Load the bus's library (``FUNCTION LOAD``) after ``missing`` (the server's answer to
        an ``FCALL``), once for concurrent callers. ``False``: run this call by ``EVALSHA``; for
        the next ``LIBRARY_RETRY_S`` when the server refused the load as a write, for good (said
        once) when it runs no functions (before Redis 7.0, or an ACL that refuses them)."""
        if missing.startswith("ERR Function not found"):
            seen = self._loads
            async with self._loading:
                if self._loads != seen:
                    return True  # loaded by another caller meanwhile
                try:
                    # REPLACE: another client may have loaded it since (its name is its text's)
                    await self._call(("FUNCTION", "LOAD", "REPLACE", library().source))
                except WritesRefused:
                    # A load is a write: at the memory ceiling or with a failed disk the scripts
                    # run by EVALSHA (a read still answers) until the library can be loaded.
                    self._library_retry_at = trio.current_time() + LIBRARY_RETRY_S
                    return False
                except BusError as exc:
                    if not str(exc).startswith(_NO_FUNCTION):
                        raise
                    missing = str(exc)
                else:
                    self._loads += 1
                    return True
        if self._functions:
            self._functions = False
            log.info("the server at %s runs the bus's scripts by EVALSHA: %s", self._where, missing)
        return False

    async def command(self, *args: str | bytes) -> Any:
        """Run one raw command (a few replies shaped as glide shapes them: ``codec.shape``)."""
        if not args:
            raise ValueError("a command needs at least its name")
        return await self._command(args)

    async def _command(self, args: Sequence[str | bytes], *, asking: bool = False) -> Any:
        reply = await self._call(args, asking=asking)
        head = args[0]
        name = (head if isinstance(head, str) else head.decode(errors="replace")).upper()
        return shape(name, args, reply) if name in SHAPED else reply

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

    async def wait_replicas(self, key: str, numreplicas: int, timeout_ms: int) -> int:
        args = ("WAIT", str(numreplicas), str(timeout_ms))
        return int(await self._call(args, self._timeout_s + timeout_ms / 1000))

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
        """A connection of its own subscribed to ``channels`` and ``patterns``, subscribed when
        this returns; it connects and subscribes again by itself when the connection is lost
        (see ``RespSubscription``)."""
        async with RespSubscription.open(self.spec, channels, patterns, self._connect) as sub:
            yield sub


class _Lost(Exception):
    """The subscriber's connection is gone (the reader connects again)."""


class RespSubscription:
    """Messages of a subscription, in order (a ``transport.Subscription``), on a connection of
    its own that a reader task of the ``subscribe`` block serves: it hands each message over a
    memory channel of ``SUBSCRIPTION_BUFFER`` (a reader that falls that far behind holds the
    connection back, and the server's output buffer takes the rest), so a cancelled ``receive``
    loses nothing.

    A lost connection (the server restarted, a failover, a reset) is connected and subscribed
    again by the reader itself, at once and then after ``BACKOFF_FIRST_S`` doubling to
    ``BACKOFF_MAX_S`` while the server is away, as glide's subscriptions do: what was
    published meanwhile is lost (pub/sub keeps nothing), so a reader that must not miss a change
    reads the state again after a gap (``reconnects`` counts them). Refused credentials end the
    block with ``AuthenticationFailed``."""

    def __init__(
        self,
        spec: ConnectionSpec,
        channels: Sequence[str],
        patterns: Sequence[str],
        connect: Callable[[ConnectionSpec], Awaitable[trio.abc.Stream]] = _connect,
    ) -> None:
        if not channels and not patterns:
            raise ValueError("subscribe to at least one channel or pattern")
        self._spec = spec
        self._where = spec.redacted()
        self._channels = tuple(channels)
        self._patterns = tuple(patterns)
        self._connect = connect
        self._stream: trio.abc.Stream | None = None
        self._codec: Codec[None] = Codec(subscriber=True)
        self._send, self._messages = trio.open_memory_channel[Message](SUBSCRIPTION_BUFFER)
        self.reconnects = 0

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        spec: ConnectionSpec,
        channels: Sequence[str],
        patterns: Sequence[str],
        connect: Callable[[ConnectionSpec], Awaitable[trio.abc.Stream]] = _connect,
    ) -> AsyncIterator[RespSubscription]:
        """Subscribe (``ConnectionLost`` if the server cannot be reached), serve it for the
        block, close it at the end."""
        sub = cls(spec, channels, patterns, connect)
        await sub._open()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sub._serve)
                try:
                    yield sub
                finally:
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The reader ends only by this cancellation (or refused credentials): the error is
            # the block's own, and the caller gets it as the block raised it.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        finally:
            await sub._close()

    async def _open(self) -> None:
        """Connect and subscribe, and wait until the server confirms every subscription."""
        stream = await self._connect(self._spec)
        codec: Codec[None] = Codec(subscriber=True)
        if self._channels:
            codec.send(("SUBSCRIBE", *self._channels), None)
        if self._patterns:
            codec.send(("PSUBSCRIBE", *self._patterns), None)
        data = codec.data_to_send()
        codec.take_waiting()  # no reply pairs with them: every frame is a push
        confirmed, wanted, early = 0, len(self._channels) + len(self._patterns), []
        try:
            with trio.fail_after(DEFAULT_CONNECT_TIMEOUT_MS / 1000):
                await stream.send_all(data)
                while confirmed < wanted:
                    chunk = await stream.receive_some(RECEIVE_BYTES)
                    if not chunk:
                        raise trio.BrokenResourceError("closed while subscribing")
                    codec.receive_data(chunk)
                    while codec.pushes:
                        frame = codec.pushes.popleft()
                        if frame and as_text(frame[0]) in ("subscribe", "psubscribe"):
                            confirmed += 1
                        else:
                            early.append(frame)  # a message right behind its confirmation
        except (trio.BrokenResourceError, trio.TooSlowError, OSError, ProtocolError) as exc:
            await trio.aclose_forcefully(stream)
            raise ConnectionLost(f"cannot subscribe at {self._where}: {exc!r}") from exc
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        codec.pushes.extend(early)
        self._stream, self._codec = stream, codec

    async def _serve(self) -> None:
        """Read messages and hand them over; connect and subscribe again when lost."""
        delay = BACKOFF_FIRST_S
        while True:
            try:
                await self._pump()
            except _Lost as lost:
                log.warning("subscription to %s: %s; subscribing again", self._where, lost)
            await self._close()
            while True:
                try:
                    await self._open()
                except ConnectionLost:
                    await trio.sleep(delay)
                    delay = min(BACKOFF_MAX_S, delay * 2)
                    continue
                break
            delay = BACKOFF_FIRST_S
            self.reconnects += 1
            log.info("subscription to %s: subscribed again", self._where)

    async def _pump(self) -> None:
        stream = self._stream
        assert stream is not None
        pushes = self._codec.pushes
        while True:
            while pushes:
                frame = pushes.popleft()
                kind = as_text(frame[0]) if frame else ""
                if kind == "message":
                    await self._send.send(Message(as_text(frame[1]), as_bytes(frame[2])))
                elif kind == "pmessage":
                    await self._send.send(
                        Message(as_text(frame[2]), as_bytes(frame[3]), as_text(frame[1]))
                    )
            try:
                data = await stream.receive_some(RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise _Lost(f"lost the connection ({exc!r})") from exc
            if not data:
                raise _Lost("the server closed the connection")
            try:
                self._codec.receive_data(data)
            except ProtocolError as exc:
                raise _Lost(f"not RESP: {exc}") from exc

    async def _close(self) -> None:
        if self._stream is not None:
            await trio.aclose_forcefully(self._stream)
            self._stream = None

    async def receive(self) -> Message:
        return await self._messages.receive()

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
    await probe(spec)
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
