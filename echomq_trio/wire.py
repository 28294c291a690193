"""The one module that talks to the client library (valkey-glide); nothing else imports it.

``Wire`` is the ``transport.Transport`` the bus runs on. It turns a URL into a connected client
(standalone or cluster), runs the package's Lua scripts by EVALSHA (the client loads a script on
NOSCRIPT by itself), and maps the library's exceptions to ``echomq_trio.errors`` (a dropped
connection in words of our own, naming the server; the library's go to the debug log). A
blocking pop holds its connection, so callers that park open a second client with
``Wire.blocking()``.

URL forms: ``redis://[user:password@]host[:port][/db]``, ``rediss://`` for TLS, ``valkey://`` and
``valkeys://`` as synonyms; ``host1:port1,host2:port2`` seeds a cluster; query parameters
``cluster=true`` and ``timeout_ms=N`` (request timeout, default 5000).

Connecting starts with a pre-flight probe of every seed with trio (about a second at most): a
refused port, an unknown host or a ``rediss://`` URL aimed at a plain-text port fails at once
with a ``ConnectionLost`` saying which, rather than the client library's "timed out" after its
connection timeout. The probe only ever rules a seed out on a definite answer; a seed that does
not answer in time is left to the client library. A cluster fails only if every seed is ruled
out. Credentials the server refuses raise ``AuthenticationFailed``.

A write the server refuses for a while raises a ``WritesRefused`` (a ``ConnectionLost``: it
passes, so the consumer, the metronome and settlements wait and retry it): ``OutOfMemory`` when
its memory is at ``maxmemory`` (with ``noeviction``, nothing is evicted to make room),
``PersistenceFailed`` when it cannot write its append-only file (``MISCONF``: a full disk), and
``WritesRefused`` itself for a replica during a failover (``READONLY``) or too few replicas
(``NOREPLICAS``). Each is logged on ``echomq_trio.wire``: one warning at most every
``REFUSAL_REPORT_EVERY_S`` per connection, counting the writes refused since the last.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import attrs
import trio
from glide import (
    AdvancedGlideClientConfiguration,
    AdvancedGlideClusterClientConfiguration,
    ClusterScanCursor,
    GlideClient,
    GlideClientConfiguration,
    GlideClusterClient,
    GlideClusterClientConfiguration,
    Logger,
    LogLevel,
    NodeAddress,
    Script,
    ServerCredentials,
    SlotKeyRoute,
    SlotType,
)
from glide_shared.exceptions import ClosingError, GlideError, RequestError
from glide_shared.exceptions import ConnectionError as GlideConnectionError
from glide_shared.exceptions import TimeoutError as GlideTimeoutError

from echomq_trio._replies import as_bytes, as_text
from echomq_trio.errors import (
    AuthenticationFailed,
    BusError,
    ConnectionLost,
    OutOfMemory,
    PersistenceFailed,
    RequestTimedOut,
    ServerError,
    WritesRefused,
)
from echomq_trio.lua import script_source
from echomq_trio.transport import DEFAULT_TIMEOUT_MS, ConnectionSpec, Message

__all__ = [
    "ConnectionSpec",
    "GlideSubscription",
    "Message",
    "RefusalLog",
    "Wire",
    "login_refusal",
    "open_wire",
    "parse_url",
    "probe",
    "script_source",
    "server_error",
]

log = logging.getLogger("echomq_trio.wire")

DEFAULT_CONNECT_TIMEOUT_MS = 3000
PROBE_TIMEOUT_S = 1.0  # per step of the pre-flight probe: connect, TLS handshake, plain PING
_SCHEMES = {"redis": False, "valkey": False, "rediss": True, "valkeys": True}
_TRUE = {"1", "true", "yes", "on"}
# Server answers that mean "not now" (loading, failing over, busy): worth retrying like a
# dropped connection.
_TRANSIENT = ("LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "BUSY ")
# A write refused at maxmemory: "OOM command not allowed when used memory > 'maxmemory'", which
# the client library words "OOM: command ..." (and a script's error quotes inside its own).
_OUT_OF_MEMORY = re.compile(r"\bOOM\b")
# A write refused because the append-only file or a snapshot cannot be written: "MISCONF Errors
# writing to the AOF file: No space left on device" (a script's error quotes it inside its own).
_PERSISTENCE = re.compile(r"\bMISCONF\b")
# Other refusals the server lifts by itself: a replica during a failover ("READONLY You can't
# write against a read only replica"), too few replicas ("NOREPLICAS", min-replicas-to-write).
_REFUSED = re.compile(r"\b(READONLY|NOREPLICAS)\b")
REFUSAL_REPORT_EVERY_S = 10.0
_FALSE = {"0", "false", "no", "off"}


def parse_url(url: str) -> ConnectionSpec:
    """Parse a server URL; a malformed one raises ``ValueError`` naming what is wrong."""
    if not isinstance(url, str) or not url:
        raise ValueError(f"server URL must be a non-empty str, got {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ValueError(
            f"server URL scheme must be one of {sorted(_SCHEMES)}, got {parts.scheme!r} in "
            f"{_redact(url)!r}"
        )
    netloc = parts.netloc
    username = password = None
    if "@" in netloc:
        auth, netloc = netloc.rsplit("@", 1)
        user, colon, pw = auth.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if pw else None
        if not colon:
            # redis://secret@host is the common short form for a password alone.
            password, username = username, None
    if not netloc:
        raise ValueError(f"server URL has no host: {_redact(url)!r}")
    hosts = tuple(_host_port(hp, url) for hp in netloc.split(","))
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = set(query) - {"cluster", "timeout_ms", "db"}
    if unknown:
        raise ValueError(f"unknown server URL parameter(s) {sorted(unknown)} in {_redact(url)!r}")
    db_text = parts.path.strip("/") or query.get("db", "0")
    if not db_text.isdigit():
        raise ValueError(f"database number must be a non-negative integer, got {db_text!r}")
    cluster = _flag(query.get("cluster", "false"), "cluster") or len(hosts) > 1
    db = int(db_text)
    if cluster and db != 0:
        raise ValueError("a cluster has only database 0")
    timeout_text = query.get("timeout_ms", str(DEFAULT_TIMEOUT_MS))
    if not timeout_text.isdigit() or int(timeout_text) <= 0:
        raise ValueError(f"timeout_ms must be a positive integer, got {timeout_text!r}")
    return ConnectionSpec(
        hosts=hosts,
        tls=_SCHEMES[parts.scheme],
        username=username,
        password=password,
        db=db,
        cluster=cluster,
        timeout_ms=int(timeout_text),
    )


def _redact(url: str) -> str:
    # Whatever stands before the last "@" may hold a password, even one with "/" or "#" in it.
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return url


def _flag(text: str, name: str) -> bool:
    low = text.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"{name} must be true or false, got {text!r}")


def _host_port(text: str, url: str) -> tuple[str, int]:
    if text.startswith("[") and text.endswith("]"):  # an IPv6 address without a port
        return text[1:-1], 6379
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, "6379"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise ValueError(f"server URL has an empty host in {_redact(url)!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        shown = f" got {port}" if port.isdigit() else ""  # a non-number may be a stray secret
        raise ValueError(f"server URL port must be 1-65535,{shown} in {_redact(url)!r}")
    return host, int(port)


def _configure_logging() -> None:
    # The client's core logs to stderr unless told otherwise; keep it quiet unless asked.
    level = os.environ.get("ECHOMQ_GLIDE_LOG", "off").upper()
    Logger.init(getattr(LogLevel, level, LogLevel.OFF))


_REMEDY: dict[type[BusError], str] = {
    OutOfMemory: "out of memory: used memory is at its maxmemory and it evicts nothing; free "
    "memory or raise maxmemory",
    PersistenceFailed: "its disk: it cannot write its append-only file; free space where its "
    "data lives",
    WritesRefused: "a replica during a failover, or too few replicas: it passes by itself",
}
_LOST = (
    "lost the connection to the server at {} (it stopped, restarted or closed the connection); "
    "reconnecting"
)


def _translate(exc: GlideError, where: str) -> BusError:
    """The bus's error for the library's ``exc`` on the server at ``where`` (a redacted URL).
    A lost connection is told in our own words: the library's ("Failed to receive a response
    due to a fatal error - FatalReceiveError: channel closed") goes to the debug log only."""
    if isinstance(exc, GlideTimeoutError):
        return RequestTimedOut(str(exc))
    if isinstance(exc, ClosingError):
        return _lost(exc, f"the client for the server at {where} is closed")
    if isinstance(exc, GlideConnectionError):
        return _lost(exc, _LOST.format(where))
    if isinstance(exc, RequestError):
        text = str(exc)
        error = server_error(text)
        if type(error) is ServerError:
            low = text.lower()
            if "connection" in low or "broken pipe" in low:
                return _lost(exc, _LOST.format(where))
        return error
    return BusError(str(exc))


def server_error(text: str) -> BusError:
    """The bus's error for an error reply of the server (``text``, as the server or a client
    words it): a refused write (``WritesRefused`` and its kinds), a "not now" (``LOADING``,
    ``TRYAGAIN``...: ``ConnectionLost``), else ``ServerError``. Every transport maps by this."""
    if _OUT_OF_MEMORY.search(text):
        return OutOfMemory(f"the server is out of memory and refused a write: {text}")
    if _PERSISTENCE.search(text):
        return PersistenceFailed(
            f"the server cannot write its append-only file and refused a write: {text}"
        )
    if _REFUSED.search(text):
        return WritesRefused(f"the server refused a write for now: {text}")
    if any(c in text for c in _TRANSIENT):  # the server's own reply: it says why
        return ConnectionLost(text)
    return ServerError(text)


@attrs.define
class RefusalLog:
    """Tells of refused writes on ``echomq_trio.wire``: one warning at most every
    ``REFUSAL_REPORT_EVERY_S``, counting the writes refused since the last."""

    where: str
    refused: int = 0  # writes refused since the last report
    reported_at: float | None = None

    def note(self, error: BusError, said: object) -> None:
        if not isinstance(error, WritesRefused):
            return
        self.refused += 1
        now = trio.current_time()
        last = self.reported_at
        if last is None or now - last >= REFUSAL_REPORT_EVERY_S:
            log.warning(
                "the server at %s refuses writes: %d refused since the last report (%s): %s",
                self.where, self.refused, _REMEDY[type(error)], said,
            )  # fmt: skip
            self.refused = 0
            self.reported_at = now


def _lost(exc: GlideError, said: str) -> ConnectionLost:
    log.debug("%s; the client library said: %s", said, " ".join(str(exc).split()))
    return ConnectionLost(said)


class Wire:
    """A connected client with the package's scripts (a ``transport.Transport``); use
    ``open_wire`` to get one."""

    def __init__(self, spec: ConnectionSpec, client: GlideClient | GlideClusterClient) -> None:
        self.spec = spec
        self._client = client
        # Bounded by the scripts on disk: a name without one raises before it is added.
        self._scripts: dict[str, Script] = {}
        self._refusals = RefusalLog(spec.redacted())

    @property
    def cluster(self) -> bool:
        return self.spec.cluster

    def _failure(self, exc: GlideError) -> BusError:
        """The bus's error for the library's ``exc``; a refused write is logged (at most a line
        every ``REFUSAL_REPORT_EVERY_S``)."""
        error = _translate(exc, self.spec.redacted())
        self._refusals.note(error, exc)
        return error

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        """Run the named ``.lua`` script (EVALSHA, loading it on NOSCRIPT); see
        ``script_source`` for names.

        The client library's script call, not a raw ``EVALSHA`` through ``custom_command``:
        both cost the same, and the library's core loads a script the server lost (``SCRIPT
        FLUSH``, a restart) on the node that owns the keys' slot and retries, as
        tests/echomq_trio/test_wire.py shows."""
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = Script(script_source(name))  # type: ignore[no-untyped-call]
        try:
            # Any sequence will do (the library only iterates and measures them): no copies.
            return await self._client.invoke_script(script, keys=keys, args=args)  # type: ignore[arg-type]
        except GlideError as exc:
            raise self._failure(exc) from exc

    async def command(self, *args: str | bytes) -> Any:
        """Run one raw command (routed by its key on a cluster)."""
        try:
            return await self._client.custom_command(list(args))
        except GlideError as exc:
            raise self._failure(exc) from exc

    async def wait_aof(
        self, key: str, numlocal: int, numreplicas: int, timeout_ms: int
    ) -> tuple[int, int]:
        """``WAITAOF`` on the server holding ``key``'s slot (see ``Transport.wait_aof``)."""
        local, replicas = await self._on_primary_of(
            key, ["WAITAOF", str(numlocal), str(numreplicas), str(timeout_ms)]
        )
        return int(local), int(replicas)

    async def wait_replicas(self, key: str, numreplicas: int, timeout_ms: int) -> int:
        """``WAIT`` on the server holding ``key``'s slot (see ``Transport.wait_replicas``)."""
        return int(await self._on_primary_of(key, ["WAIT", str(numreplicas), str(timeout_ms)]))

    async def _on_primary_of(self, key: str, args: list[str | bytes]) -> Any:
        # A command about this client's writes (WAIT, WAITAOF) goes to the primary of ``key``'s
        # slot on a cluster: the server that took them.
        try:
            if isinstance(self._client, GlideClusterClient):
                route = SlotKeyRoute(SlotType.PRIMARY, key)
                return await self._client.custom_command(args, route=route)
            return await self._client.custom_command(args)
        except GlideError as exc:
            raise self._failure(exc) from exc

    async def scan(self, match: str, *, count: int = 1000) -> list[str]:
        """Every key matching the glob ``match``, on every primary of a cluster: SCAN a cursor
        step at a time, each step O(``count``) on the server, so no one call walks every key."""
        found: list[bytes] = []
        try:
            if isinstance(self._client, GlideClusterClient):
                cursor = ClusterScanCursor()  # type: ignore[no-untyped-call]
                while not cursor.is_finished():
                    cursor, keys = await self._client.scan(cursor, match=match, count=count)  # type: ignore[assignment]
                    found += keys
            else:
                position: bytes | str = "0"
                while True:
                    position, keys = await self._client.scan(position, match=match, count=count)  # type: ignore[assignment]
                    found += keys
                    if position in (b"0", "0"):
                        break
        except GlideError as exc:
            raise self._failure(exc) from exc
        return sorted({key.decode() for key in found})

    async def blpop(self, key: str, timeout_s: float) -> bytes | None:
        """Pop the head of a list, waiting up to ``timeout_s``; holds this client's connection.

        Cancelling it leaves the server side blocked until its timeout, so a client that parks
        is dedicated to parking (see ``blocking``).
        """
        try:
            got = await self._client.blpop([key], timeout_s)
        except GlideError as exc:
            raise self._failure(exc) from exc
        return None if got is None else got[1]

    @asynccontextmanager
    async def subscribe(
        self, *, channels: Sequence[str] = (), patterns: Sequence[str] = ()
    ) -> AsyncIterator[GlideSubscription]:
        """A client of its own subscribed to ``channels`` and ``patterns`` (pub/sub)."""
        if not channels and not patterns:
            raise ValueError("subscribe to at least one channel or pattern")
        cls = GlideClusterClientConfiguration if self.spec.cluster else GlideClientConfiguration
        modes: dict[Any, set[str]] = {}
        if channels:
            modes[cls.PubSubChannelModes.Exact] = set(channels)
        if patterns:
            modes[cls.PubSubChannelModes.Pattern] = set(patterns)
        subs = cls.PubSubSubscriptions(channels_and_patterns=modes, callback=None, context=None)
        try:
            client = await _connect(self.spec, subs)
        except GlideError as exc:
            raise _connect_failure(self.spec, exc) from exc
        try:
            yield GlideSubscription(client, self.spec.redacted())
        finally:
            await _close(client)

    async def server_time_ms(self) -> int:
        secs, micros = await self.command("TIME")
        return int(secs) * 1000 + int(micros) // 1000

    @asynccontextmanager
    async def blocking(self) -> AsyncIterator[Wire]:
        """A second client to the same server, for blocking pops."""
        async with open_wire(self.spec) as other:
            yield other

    async def aclose(self) -> None:
        """Close the client; shielded for at most two seconds so it runs during cancellation."""
        await _close(self._client)


async def _close(client: GlideClient | GlideClusterClient) -> None:
    # Closing a broken client is no error.
    with (
        trio.CancelScope(shield=True, deadline=trio.current_time() + 2),
        contextlib.suppress(GlideError),
    ):
        await client.close()


class GlideSubscription:
    """Messages of a subscription, in order (a ``transport.Subscription``). Receive them from one
    long-lived task: cancelling ``receive`` loses the message that was on its way (the client
    library keeps the cancelled waiter), so cancel only to stop for good."""

    def __init__(self, client: GlideClient | GlideClusterClient, where: str) -> None:
        self._client = client
        self._where = where

    async def receive(self) -> Message:
        try:
            msg = await self._client.get_pubsub_message()
        except GlideError as exc:
            raise _translate(exc, self._where) from exc
        pattern = msg.pattern
        return Message(
            channel=as_text(msg.channel),
            data=as_bytes(msg.message),
            pattern=None if pattern is None else as_text(pattern),
        )

    def __aiter__(self) -> GlideSubscription:
        return self

    async def __anext__(self) -> Message:
        return await self.receive()


async def _connect(
    spec: ConnectionSpec, subscriptions: Any = None
) -> GlideClient | GlideClusterClient:
    addresses = [NodeAddress(h, p) for h, p in spec.hosts]
    creds = (
        ServerCredentials(password=spec.password, username=spec.username)
        if spec.password is not None
        else None
    )
    if spec.cluster:
        return await GlideClusterClient.create(
            GlideClusterClientConfiguration(
                addresses,
                use_tls=spec.tls,
                credentials=creds,
                request_timeout=spec.timeout_ms,
                pubsub_subscriptions=subscriptions,
                advanced_config=AdvancedGlideClusterClientConfiguration(
                    connection_timeout=DEFAULT_CONNECT_TIMEOUT_MS
                ),
            )
        )
    return await GlideClient.create(
        GlideClientConfiguration(
            addresses,
            use_tls=spec.tls,
            credentials=creds,
            request_timeout=spec.timeout_ms,
            database_id=spec.db or None,
            pubsub_subscriptions=subscriptions,
            advanced_config=AdvancedGlideClientConfiguration(
                connection_timeout=DEFAULT_CONNECT_TIMEOUT_MS
            ),
        )
    )


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _leaves(exc: BaseException) -> list[BaseException]:
    # trio's open_tcp_stream raises one OSError whose cause groups each address's failure.
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup):
        return list(cause.exceptions)
    return [exc]


def _probe_tls_context() -> ssl.SSLContext:
    # Used only to learn whether a port speaks TLS at all; nothing is sent over it, so there is
    # nothing to protect and the certificate is not checked here (the client library checks it).
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def _speaks_plain_resp(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a plain-text PING in RESP (``+PONG`` or ``-NOAUTH ...``)."""
    with trio.move_on_after(PROBE_TIMEOUT_S):
        try:
            async with await trio.open_tcp_stream(host, port) as stream:
                await stream.send_all(b"PING\r\n")
                return (await stream.receive_some(1))[:1] in (b"+", b"-")
        except (OSError, trio.BrokenResourceError):
            return False
    return False


async def _probe_seed(host: str, port: int, tls: bool) -> str | None:
    """Why ``host:port`` certainly cannot serve this connection, or ``None`` if it may."""
    addr = _address(host, port)
    stream: trio.SocketStream | None = None
    try:
        with trio.move_on_after(PROBE_TIMEOUT_S):
            stream = await trio.open_tcp_stream(host, port)
    except socket.gaierror as exc:
        return f"cannot resolve host {host!r} ({exc.strerror})"
    except OSError as exc:
        leaves = _leaves(exc)
        if all(isinstance(e, ConnectionRefusedError) for e in leaves):
            return f"connection refused by {addr}: is the server running?"
        reasons = sorted({getattr(e, "strerror", None) or str(e) for e in leaves})
        return f"cannot reach {addr}: {', '.join(reasons)}"
    if stream is None:
        return None  # no answer within the probe's time: let the client library try
    if not tls:
        await trio.aclose_forcefully(stream)
        return None
    tls_stream = trio.SSLStream(stream, _probe_tls_context(), server_hostname=host)
    try:
        with trio.move_on_after(PROBE_TIMEOUT_S):
            await tls_stream.do_handshake()
            return None
    except trio.BrokenResourceError:
        pass  # the handshake failed: see below whether this is a plain-text server
    finally:
        await trio.aclose_forcefully(tls_stream)
    if await _speaks_plain_resp(host, port):
        return f"{addr} does not speak TLS: use redis:// (not rediss://) for a plain-text server"
    return None


async def probe(spec: ConnectionSpec) -> None:
    """Raise ``ConnectionLost`` saying why, when no seed of ``spec`` can serve a connection
    (every transport probes before it connects: see the module's docstring)."""
    problems: list[str | None] = [None] * len(spec.hosts)

    async def one(i: int, host: str, port: int) -> None:
        problems[i] = await _probe_seed(host, port, spec.tls)

    async with trio.open_nursery() as nursery:
        for i, (host, port) in enumerate(spec.hosts):
            nursery.start_soon(one, i, host, port)
    if all(problems):
        raise ConnectionLost(
            f"cannot connect to {spec.redacted()}: {'; '.join(map(str, problems))}"
        )


def login_refusal(spec: ConnectionSpec, text: str) -> AuthenticationFailed | None:
    """A server's answer to a connection's login (``text``), if it refused the credentials, as
    one line naming the server; ``None`` for any other answer. Every transport's."""
    where = f"cannot connect to {spec.redacted()}"
    if "WRONGPASS" in text or "invalid password" in text or "invalid username-password" in text:
        return AuthenticationFailed(f"{where}: authentication failed: wrong username or password")
    if "NOAUTH" in text:
        return AuthenticationFailed(
            f"{where}: authentication failed: the server requires a password and the URL has none"
        )
    return None


def _connect_failure(spec: ConnectionSpec, exc: GlideError) -> ConnectionLost:
    """The client library's failure to connect, as one line naming the server."""
    text = " ".join(str(exc).split())
    refused = login_refusal(spec, text)
    return refused or ConnectionLost(f"cannot connect to {spec.redacted()}: {text}")


@asynccontextmanager
async def open_wire(target: str | ConnectionSpec) -> AsyncIterator[Wire]:
    """Connect to the server named by a URL (or a parsed spec); close on exit.

    A server that cannot be reached raises ``ConnectionLost`` in one line naming the address and
    why (refused, unknown host, no TLS on a ``rediss://`` port; the password is never shown);
    refused credentials raise its subclass ``AuthenticationFailed``.
    """
    spec = parse_url(target) if isinstance(target, str) else target
    _configure_logging()
    await probe(spec)
    try:
        client = await _connect(spec)
    except GlideError as exc:
        raise _connect_failure(spec, exc) from exc
    wire = Wire(spec, client)
    try:
        yield wire
    finally:
        await wire.aclose()
