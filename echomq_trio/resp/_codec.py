"""The RESP protocol without I/O (after h11): requests in, bytes out; bytes in, replies out.

``Codec`` holds one connection's protocol state and nothing else: no socket, no clock, no task.
``send(args, waiter)`` appends the request's bytes to the outgoing buffer and ``waiter`` to the
queue of requests awaiting replies, in one synchronous step; ``data_to_send()`` takes every byte
queued so far (the requests of every caller since the last write, sent together); and
``receive_data(data)`` parses what came in and returns each complete reply paired with its
request's waiter, in order.

Theory of operation:

* Replies come back in the order the requests went out (RESP pipelining), so the waiters form a
  FIFO: the n-th reply belongs to the n-th request sent. ``send`` appends the bytes and the waiter
  together, so the two orders are one order, whoever calls it.
* A waiter whose caller has given up (cancelled, timed out) stays in the queue: its reply is still
  parsed and paired with it, and the caller above drops it. Nothing a caller does can take a
  waiter out of the middle of the queue, so no reply is ever paired with the wrong request.
* Push frames (RESP3 ``>``: pub/sub messages, invalidations) answer no request: they never take a
  waiter. They are returned apart (``pushes``) for a subscription to read, and dropped elsewhere.
* Replies are parsed by ``hiredis`` (C). It cannot tell a simple string from a bulk string, so
  both are ``bytes``, except that a whole reply of ``+OK`` is the ``str`` ``"OK"`` as the other
  transport gives it (a bulk string ``OK`` at the top level reads as ``"OK"`` too). RESP3 sets
  come as lists, doubles as floats, booleans as bools, maps as dicts, big numbers as bytes.
  An error reply is an ``hiredis.ReplyError`` value (not raised): the caller maps it.
* RESP3 attribute frames (``|``), which servers send only to a client that asks for them
  (``DEBUG PROTOCOL attrib``), are not supported: hiredis returns one as if it were a reply.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import hiredis

__all__ = ["Codec", "ProtocolError", "ReplyError", "encode", "shape"]

W = TypeVar("W")
ReplyError = hiredis.ReplyError


class ProtocolError(Exception):
    """The bytes from the server are not RESP, or a reply came that no request asked for: the
    connection is out of step and must be closed."""


# Typed loosely: the stub says a 1-tuple, the function takes any length.
_pack: Callable[[tuple[str | bytes, ...]], bytes] = hiredis.pack_command  # type: ignore[assignment]

_MORE = object()  # hiredis's "not enough data yet" (``False`` is a RESP3 boolean)


def encode(args: Sequence[str | bytes]) -> bytes:
    """One request as RESP bytes (an array of bulk strings)."""
    return _pack(tuple(args))


class Codec(Generic[W]):
    """One connection's RESP state: the requests awaiting replies, bytes to send, bytes read."""

    __slots__ = ("_out", "_reader", "_subscriber", "_waiting", "pushes")

    def __init__(self, *, subscriber: bool = False) -> None:
        # A subscriber's connection answers with messages, not replies: every frame read is a
        # push (RESP2 sends them as arrays, and one confirmation per channel subscribed).
        self._subscriber = subscriber
        self._reader = hiredis.Reader(notEnoughData=_MORE)
        self._out: list[bytes] = []
        self._waiting: deque[W] = deque()
        self.pushes: deque[list[Any]] = deque()  # push frames read, oldest first

    @property
    def in_flight(self) -> int:
        """Requests sent or queued whose replies have not come yet."""
        return len(self._waiting)

    def send(self, args: Sequence[str | bytes], waiter: W) -> None:
        """Queue one request; its reply will be paired with ``waiter``."""
        self._out.append(_pack(tuple(args)))
        self._waiting.append(waiter)

    def data_to_send(self) -> bytes:
        """Every byte queued since the last call (``b""`` when none)."""
        if not self._out:
            return b""
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out.clear()
        return data

    def receive_data(self, data: bytes | bytearray) -> list[tuple[W, Any]]:
        """Parse ``data`` (any split of the stream); every complete reply with its waiter, in
        order. Raises ``ProtocolError`` for bytes that are not RESP or a reply nobody asked for."""
        reader = self._reader
        try:
            reader.feed(data)  # type: ignore[arg-type]  # any buffer will do
            done: list[tuple[W, Any]] = []
            while (reply := reader.gets()) is not _MORE:
                if self._subscriber or type(reply) is hiredis.PushNotification:
                    self.pushes.append(list(reply))
                    continue
                if not self._waiting:
                    raise ProtocolError(f"the server sent a reply no request asked for: {reply!r}")
                if reply == b"OK":
                    reply = "OK"
                done.append((self._waiting.popleft(), reply))
            return done
        except hiredis.ProtocolError as exc:
            raise ProtocolError(f"the server's bytes are not RESP: {exc}") from exc

    def unsend(self, data: bytes) -> None:
        """Put back ``data`` (the tail of what ``data_to_send`` gave that could not be sent yet)
        at the head of the outgoing bytes."""
        self._out.insert(0, data)

    def waiting(self) -> Iterator[W]:
        """The waiters awaiting replies, oldest first."""
        return iter(self._waiting)

    def take_waiting(self) -> list[W]:
        """Every waiter still awaiting a reply, oldest first, removed (the connection is gone)."""
        waiting = list(self._waiting)
        self._waiting.clear()
        self._out.clear()
        return waiting


# Raw commands whose replies the other transport (glide) shapes, shaped alike here so that no
# caller learns which transport it has (tests/echomq_trio/resp/test_client.py compares them).
_WITH_SCORES = frozenset(["ZRANGE", "ZUNION", "ZINTER", "ZDIFF"])  # with WITHSCORES: a dict
_POPS = frozenset(("ZPOPMIN", "ZPOPMAX"))
_SETS = frozenset(["SMEMBERS", "SINTER", "SUNION", "SDIFF"])
_FLOATS = frozenset(("INCRBYFLOAT", "HINCRBYFLOAT"))
_BOOLS = frozenset(
    [
        "SISMEMBER",
        "HEXISTS",
        "EXPIRE",
        "PEXPIRE",
        "EXPIREAT",
        "PEXPIREAT",
        "PERSIST",
        "MSETNX",
        "HSETNX",
        "SMOVE",
        "RENAMENX",
        "COPY",
    ]
)
_RANGES = frozenset(("XRANGE", "XREVRANGE"))
_READS = frozenset(("XREAD", "XREADGROUP"))
SHAPED = _WITH_SCORES | _POPS | _SETS | _FLOATS | _BOOLS | _RANGES | _READS  # upper case


def _pairs(flat: Sequence[Any]) -> list[list[Any]]:
    return [[k, v] for k, v in zip(flat[::2], flat[1::2], strict=True)]


def _entries(entries: Any) -> Any:
    """A stream's entries ``[[id, [f, v, ...]], ...]`` as ``{id: [[f, v], ...]}``."""
    if not isinstance(entries, list):
        return entries
    return {e[0]: None if e[1] is None else _pairs(e[1]) for e in entries}


def shape(name: str, args: Sequence[str | bytes], reply: Any) -> Any:
    """``reply`` to the raw command ``name`` (upper case; one of ``SHAPED``) with ``args``, in
    the shape glide gives it: ``ZRANGE``/``ZUNION``/``ZINTER``/``ZDIFF`` ``WITHSCORES`` and
    ``ZPOPMIN``/``ZPOPMAX`` as a dict of member to score (in the server's order, from RESP3's
    pairs or RESP2's flat list); a set command's reply as a set; ``INCRBYFLOAT`` as a float; a
    yes-or-no command (``EXPIRE``, ``HSETNX``...) as a bool; stream entries as
    ``{id: [[field, value], ...]}`` (``XREAD``: per stream)."""
    if name in _BOOLS:
        return bool(reply) if isinstance(reply, int) else reply
    if name in _FLOATS:
        return float(reply) if isinstance(reply, bytes) else reply
    if name in _RANGES:
        return _entries(reply)
    if name in _READS:
        if isinstance(reply, list):  # RESP2: [[stream, entries], ...]
            reply = {stream: entries for stream, entries in reply}
        if isinstance(reply, dict):
            return {stream: _entries(entries) for stream, entries in reply.items()}
        return reply
    if not isinstance(reply, list):
        return reply
    if name in _SETS:
        return set(reply)
    if name in _WITH_SCORES and not any(
        (a.upper() if isinstance(a, str) else a.decode(errors="replace").upper()) == "WITHSCORES"
        for a in args
    ):
        return reply
    if reply and all(isinstance(pair, list) for pair in reply):  # RESP3: [[member, score], ...]
        return {member: float(score) for member, score in reply}
    return {member: float(score) for member, score in zip(reply[::2], reply[1::2], strict=True)}
