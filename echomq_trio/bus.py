"""``open_bus``: the handle every bus call takes. It owns the server connection, and the
embedded server when no URL is given."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import attrs
import trio

from echomq_trio.checks import DEFAULT_MAX_PAYLOAD_BYTES, check_max_payload_bytes
from echomq_trio.clock import StepLog
from echomq_trio.datadir import DataDir, write_private
from echomq_trio.durability import Durability, DurableCalls, InMemory, OnDisk
from echomq_trio.errors import ServerError
from echomq_trio.gather import Gatherer
from echomq_trio.keys import QueueKeys, queue_keys
from echomq_trio.protocol import Call
from echomq_trio.resp import open_trio
from echomq_trio.server import EmbeddedServer, start_server
from echomq_trio.storage import StorageWatch, read_storage
from echomq_trio.transport import Transport
from echomq_trio.wire import ConnectionSpec, open_wire, parse_url

__all__ = ["Bus", "CommandArg", "Reply", "new_holder", "open_bus"]

log = logging.getLogger("echomq_trio.bus")

CommandArg = str | bytes | int | float
# What a raw command answers, as the client decodes it (RESP3): bulk strings as bytes, simple
# strings as str, integers, doubles, nil as None, arrays as lists, maps as dicts, sets as sets.
Reply = (
    bytes | str | int | float | bool | None | list["Reply"] | dict["Reply", "Reply"] | set["Reply"]
)


def new_holder() -> str:
    """A fresh holder id for a ``Bus``: 16 hex digits, unguessable enough never to repeat."""
    return secrets.token_hex(8)


@lru_cache(maxsize=1024)  # bounded: the key sets of the 1024 queues used last
def _keys(queue: str) -> QueueKeys:
    return queue_keys(queue)


def _command_arg(arg: CommandArg) -> str | bytes:
    if isinstance(arg, str | bytes):
        return arg
    if isinstance(arg, bool) or not isinstance(arg, int | float):
        raise TypeError(f"a command argument must be str, bytes, int or float, got {arg!r}")
    return repr(arg)


@attrs.define(eq=False)
class Bus:
    """A connection to one server (or cluster). Cheap to share between tasks.

    ``wire`` is any ``Transport``: ``open_bus`` gives the client library's ``wire.Wire`` (or
    with ``transport="trio"`` the bus's own, ``echomq_trio.resp``); a test may wrap it
    (``Bus(testing.FaultyTransport(bus.wire))``) to fail or cancel chosen calls."""

    wire: Transport
    server: EmbeddedServer | None = None
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES  # larger payloads raise before any I/O
    # When calls return: once the server holds the write in memory, or (OnDisk) once its
    # append-only file does (echomq_trio.durability); ``open_bus`` gives OnDisk's calls a
    # connection of their own (``durable``), else they share ``wire``.
    durability: Durability = InMemory()
    durable: DurableCalls | None = attrs.field(default=None, kw_only=True)
    # This bus's id in the rows of the jobs it claims: a restart that knows this bus is gone
    # takes them back at once (``jobs.take_back``; ``open_bus`` on a data directory does).
    holder: str = attrs.field(factory=new_holder, kw_only=True)
    # Per queue, the single enqueues being coalesced (echomq_trio.gather); an idle queue's
    # entry is dropped, so this holds only the queues with enqueues in flight.
    _gatherers: dict[str, Gatherer] = attrs.field(factory=dict, init=False, repr=False)
    # The steps of the server clock this bus's metronomes have logged (each queue records a
    # step on its own; the process tells of it once).
    steps: StepLog = attrs.field(factory=StepLog, init=False, repr=False)
    # With an embedded server: whether it can write its data, and where (``open_bus`` runs it).
    storage: StorageWatch | None = attrs.field(default=None, init=False, repr=False)

    def gatherer(self, queue: str) -> Gatherer:
        """The ``gather.Gatherer`` of ``queue``'s single enqueues (``jobs.enqueue`` uses it)."""
        g = self._gatherers.get(queue)
        if g is None:
            # A batch's call may wait for the disk too (OnDisk): up to its timeout more.
            wait_ms = self.wire.spec.timeout_ms
            if isinstance(self.durability, OnDisk):
                wait_ms += self.durability.timeout_ms
            g = self._gatherers[queue] = Gatherer(wait_ms / 1000 + 1)
        return g

    def release_gatherer(self, queue: str, g: Gatherer) -> None:
        """Forget ``queue``'s gatherer once it is idle."""
        if g.idle and self._gatherers.get(queue) is g:
            del self._gatherers[queue]

    def keys(self, queue: str) -> QueueKeys:
        """The keys of ``queue`` (every key of its schema, and ``app(name)`` for an
        application's own); raises ``ValueError`` for a name that cannot be a hash tag."""
        return _keys(queue)

    def __attrs_post_init__(self) -> None:
        if isinstance(self.durability, OnDisk) and self.durable is None:
            self.durable = DurableCalls((self.wire,), self.durability)

    async def run(self, call: Call) -> Any:
        """Run one script call built by ``protocol`` and return the server's raw reply; with an
        ``OnDisk`` durability, an admission or settlement returns once the server's append-only
        file holds it (``durability.NotDurable`` after its timeout)."""
        if self.durable is not None and self.durability.waits_for(call.script):
            return await self.durable.run(call)
        return await self.wire.script(call.script, call.keys, call.args)

    async def command(self, *args: CommandArg) -> Reply:
        """Run one raw command on the bus's connection (routed by its key on a cluster), e.g.
        ``await bus.command("HSET", key, "n", 1)``; ints and floats are sent as their decimal
        text (a bool or another type raises ``TypeError``). Failures raise ``BusError``
        subclasses, as every call of the bus does. Use ``bus.keys(q).app(name)`` for a key in a
        queue's slot. A cancelled call may or may not have run on the server."""
        reply: Reply = await self.wire.command(*map(_command_arg, args))
        return reply

    @property
    def url(self) -> str:
        """The URL of the server, password redacted."""
        return self.wire.spec.redacted()


@asynccontextmanager
async def open_bus(
    url: str | None = None,
    *,
    data_dir: str | os.PathLike[str] | DataDir | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    durability: Durability = InMemory(),
    transport: str = "glide",
) -> AsyncIterator[Bus]:
    """Connect to ``url``, or with no URL start an embedded server and stop it on exit.

    ``data_dir`` (embedded server only) keeps the server's append-only file across runs; without
    it the data lives in a temporary directory. The directory is owned for the block (mode 0700,
    an exclusive lock): a second owner gets ``echomq_trio.datadir.InUse`` naming the holder's pid
    before anything is started; pass a ``DataDir`` you own already to share it with other parts of
    your program. A malformed URL raises ``ValueError`` before any connection is tried. If the
    embedded server keeps dying (see ``server.start_server``), the block ends with
    ``ServerDied``. ``max_payload_bytes`` (1 MiB by default, at most 512 MiB) is the largest
    payload the bus admits; a larger one raises ``ValueError`` before any I/O. ``durability``
    says when admissions and settlements return (``durability.InMemory``, the default, or
    ``OnDisk``: once the server's append-only file holds them; see ``echomq_trio.durability``).
    ``transport`` says what carries the calls: ``"glide"`` (``wire.Wire`` on valkey-glide, the
    default) or ``"trio"`` (``echomq_trio.resp``: trio streams, one pipelined connection per
    server, or per primary of a cluster).
    """
    connect = _TRANSPORTS.get(transport) if isinstance(transport, str) else None
    if connect is None:
        raise ValueError(f"transport must be one of {sorted(_TRANSPORTS)}, got {transport!r}")
    if not isinstance(durability, InMemory | OnDisk):
        raise TypeError(f"durability must be InMemory() or OnDisk(...), got {durability!r}")
    check_max_payload_bytes(max_payload_bytes)
    if url == "":
        raise ValueError(
            "open_bus got an empty URL: give a server URL (redis://host:6379), or no URL at all "
            "to start an embedded server"
        )
    if url is not None:
        if data_dir is not None:
            raise ValueError("data_dir applies only to the embedded server (url=None)")
        spec = parse_url(url)
        async with connect(spec) as wire, _durable(wire, durability) as durable:
            bus = Bus(wire, max_payload_bytes=max_payload_bytes, durability=durability,
                      durable=durable)  # fmt: skip
            if durable is not None and not (await read_storage(bus)).aof:
                raise ServerError(
                    f"durability OnDisk needs a server that keeps an append-only file, and "
                    f"{bus.url} keeps none (set appendonly yes, or use InMemory)"
                )
            yield bus
        return
    async with (
        start_server(data_dir) as server,
        connect(server.url) as wire,
        _durable(wire, durability) as durable,
        trio.open_nursery() as nursery,
    ):
        where = "a temporary directory, removed on exit" if data_dir is None else "kept"
        log.info(
            "open_bus: no URL given, so it started an embedded server (pid %s, port %d); its "
            "data lives in %s (%s)",
            server.pid, server.port, server.data_dir, where,
        )  # fmt: skip
        bus = Bus(wire, server, max_payload_bytes, durability, durable=durable)
        if data_dir is not None:
            await _take_back_from_predecessor(bus, server.data_dir)
        bus.storage = StorageWatch(bus)
        await nursery.start(bus.storage.run)
        try:
            yield bus
        finally:
            nursery.cancel_scope.cancel()


_TRANSPORTS: dict[str, Callable[[str | ConnectionSpec], AbstractAsyncContextManager[Transport]]]
_TRANSPORTS = {"glide": open_wire, "trio": open_trio}


@asynccontextmanager
async def _durable(wire: Transport, durability: Durability) -> AsyncIterator[DurableCalls | None]:
    """Two connections of their own for ``OnDisk``'s calls (a ``WAITAOF`` blocks its
    connection; see ``durability.DurableCalls``)."""
    if not isinstance(durability, OnDisk):
        yield None
        return
    async with wire.blocking() as one, wire.blocking() as two:
        yield DurableCalls((one, two), durability)


HOLDER_FILE = "holder"  # in a data directory: the holder id of its owner's bus


async def _take_back_from_predecessor(bus: Bus, data_dir: Path) -> None:
    """The owner of ``data_dir`` before this one (its ``holder`` file) is gone: the directory's
    lock is ours. Take back every job its bus leased, on every queue, so none waits out its
    lease; then record this bus as the holder. One line says what came back."""
    path = data_dir / HOLDER_FILE
    try:
        previous = path.read_text().strip() or None
    except FileNotFoundError:
        previous = None
    taken: dict[str, int] = {}
    if previous is not None and previous != bus.holder:
        from echomq_trio import jobs, queues

        for queue in await queues.queue_names(bus):
            if n := await jobs.take_back(bus, queue, previous):
                taken[queue] = n
    try:
        write_private(path, bus.holder + "\n")
    except OSError as exc:  # a full disk: the next start waits out the leases instead
        log.warning("could not record this bus as the holder of %s: %s", path, exc)
    if taken:
        log.warning(
            "took back %d job(s) the previous owner of %s held when it ended (%s): they run "
            "again now instead of when their leases expire",
            sum(taken.values()), data_dir, ", ".join(f"{q}: {n}" for q, n in sorted(taken.items())),
        )  # fmt: skip
