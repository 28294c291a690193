"""``Bus``: the handle every bus call takes. It owns the server connection, and the embedded
server when there is one (``echomq_trio._opening.open_bus`` makes it)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from functools import lru_cache
from typing import TypeVar

import attrs
import trio

from echomq_trio._checks import DEFAULT_MAX_PAYLOAD_BYTES
from echomq_trio._gather import Gatherer
from echomq_trio._not_now import delay_s, not_now
from echomq_trio.clock import StepLog
from echomq_trio.durability import (
    Durability,
    DurableCalls,
    InMemory,
    NotDurable,
    OnDisk,
    Waiting,
    check_durability,
)
from echomq_trio.errors import ConnectionLost
from echomq_trio.keys import QueueKeys, queue_keys
from echomq_trio.protocol import Call
from echomq_trio.server import EmbeddedServer
from echomq_trio.storage import StorageWatch, file_sync
from echomq_trio.transport import Subscription, Transport

__all__ = ["Bus", "CommandArg", "Reply", "new_holder"]

log = logging.getLogger("echomq_trio.bus")
T = TypeVar("T")

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

    ``transport`` is any ``Transport``: ``open_bus`` gives the bus's own, ``echomq_trio.resp`` (or
    with ``transport="glide"`` valkey-glide's ``wire.Wire``); a test may wrap it
    (``Bus(testing.FaultyTransport(bus.transport))``) to fail or cancel chosen calls."""

    transport: Transport
    server: EmbeddedServer | None = None
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES  # larger payloads raise before any I/O
    # When calls return: once the server holds the write in memory, (OnDisk) once its
    # append-only file does, or (Replicas) once its replicas do (echomq_trio.durability);
    # ``open_bus`` gives their waits connections of their own (``durable``), else they share
    # ``transport``.
    durability: Durability = InMemory()
    durable: DurableCalls | None = attrs.field(default=None, kw_only=True)
    # This bus's id in the rows of the jobs it claims: a restart that knows this bus is gone
    # takes them back at once (``jobs.take_back``; ``open_bus`` on a data directory does).
    holder: str = attrs.field(factory=new_holder, kw_only=True)
    # Per queue, the single enqueues being coalesced (echomq_trio._gather); an idle queue's
    # entry is dropped, so this holds only the queues with enqueues in flight.
    _gatherers: dict[str, Gatherer] = attrs.field(factory=dict, init=False, repr=False)
    _gather_wait_s: float | None = attrs.field(default=None, init=False, repr=False)
    # The steps of the server clock this bus's metronomes have logged (each queue records a
    # step on its own; the process tells of it once).
    steps: StepLog = attrs.field(factory=StepLog, init=False, repr=False)
    # With an embedded server: whether it can write its data, and where (``open_bus`` runs it).
    storage: StorageWatch | None = attrs.field(default=None, init=False, repr=False)
    # Whether the server's WAITAOF waits for its file's sync (``storage.waitaof_syncs``), as
    # ``open_bus`` found when opened with a durability on disk; ``None``: not asked, or no answer.
    waitaof_syncs: bool | None = attrs.field(default=None, init=False, repr=False)
    # The views of this bus with another durability (``with_durability``), one per durability.
    _views: dict[Durability, Bus] = attrs.field(factory=dict, init=False, repr=False)

    def gatherer(self, queue: str) -> Gatherer:
        """The ``gather.Gatherer`` of ``queue``'s single enqueues (``jobs.enqueue`` uses it)."""
        g = self._gatherers.get(queue)
        if g is None:
            wait_s = self._gather_wait_s
            if wait_s is None:
                # A batch's call may wait for the disk or the replicas too (OnDisk, Replicas),
                # and be tried again while the server says "not now" (echomq_trio._not_now): up
                # to its timeout and the request timeout more.
                wait_ms = 2 * self.transport.spec.timeout_ms
                if isinstance(self.durability, Waiting):
                    wait_ms += self.durability.timeout_ms
                wait_s = self._gather_wait_s = wait_ms / 1000 + 1
            g = self._gatherers[queue] = Gatherer(wait_s)
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
        if isinstance(self.durability, Waiting) and self.durable is None:
            self.durable = DurableCalls((self.transport,), self.durability)
        # An OnDisk wait on the embedded server ends with a sync of its file from this process
        # (its WAITAOF may answer before the server's own sync: storage.waitaof_syncs).
        if (isinstance(self.durability, OnDisk) and self.server is not None
                and self.durable is not None and self.durable.sync_file is None):  # fmt: skip
            self.durable.sync_file = file_sync(self.server.data_dir)

    def with_durability(self, durability: Durability) -> Bus:
        """This bus with its calls returning as ``durability`` says: a durability per call,
        ``await jobs.enqueue(bus.with_durability(Replicas(1, 100)), queue, payload)``. It shares
        everything else with this bus (connections, holder, embedded server); one per
        durability, kept, so waits of many calls are committed together. Its waits go on this
        bus's connections for waits when it has them (opened with ``OnDisk`` or ``Replicas``),
        else on its shared connection, which a wait then holds up (up to its ``timeout_ms``
        while replicas lag): open the bus with the durability most of its calls want."""
        check_durability(durability)
        if durability == self.durability:
            return self
        view = self._views.get(durability)
        if view is None:
            wires = (self.transport,) if self.durable is None else self.durable.wires
            durable = DurableCalls(wires, durability) if isinstance(durability, Waiting) else None
            view = Bus(self.transport, self.server, self.max_payload_bytes, durability,
                       durable=durable, holder=self.holder)  # fmt: skip
            view.steps, view.storage = self.steps, self.storage
            view.waitaof_syncs = self.waitaof_syncs
            self._views[durability] = view
        return view

    @property
    def syncs_file_itself(self) -> bool:
        """Whether an ``OnDisk`` wait of this bus ends with a sync of the server's append-only
        file from this process (a bus of an embedded server does, whose ``WAITAOF`` may answer
        before its own sync: ``storage.waitaof_syncs``)."""
        return (
            isinstance(self.durability, OnDisk)
            and self.durable is not None
            and self.durable.sync_file is not None
        )

    async def run(self, call: Call[T]) -> T:
        """Run one script call built by ``protocol`` and return its result, decoded by the call
        (``protocol.Call.decode``: a ``ValueError`` for a reply not of the script's shape); with
        an ``OnDisk`` or ``Replicas`` durability, an admission or settlement returns once the
        server's append-only file (or its replicas) holds it (``durability.NotDurable``,
        ``NotReplicated`` after its timeout). A refusal that passes by itself and left nothing
        done (``NOREPLICAS``, ``LOADING``...: ``echomq_trio._not_now``) is tried again with
        backoff until the request timeout."""
        try:  # free while nothing is raised: the default path costs what it did
            if self.durable is not None and self.durability.waits_for(call.script):
                return call.decode(await self.durable.run(call))
            return call.decode(await self.transport.script(call.script, call.keys, call.args))
        except ConnectionLost as exc:
            if isinstance(exc, NotDurable) or not not_now(exc):
                raise
            refused = exc
        return await self._again(call, refused)

    async def _again(self, call: Call[T], refused: ConnectionLost) -> T:
        """Run ``call`` again after a refusal that passes (``_not_now``), with backoff, until it
        runs or the request timeout has passed since the first refusal."""
        deadline = trio.current_time() + self.transport.spec.timeout_ms / 1000
        refusals = 1
        while True:
            await trio.sleep(delay_s(refusals))
            try:
                if self.durable is not None and self.durability.waits_for(call.script):
                    return call.decode(await self.durable.run(call))
                return call.decode(await self.transport.script(call.script, call.keys, call.args))
            except ConnectionLost as exc:
                if isinstance(exc, NotDurable) or not not_now(exc):
                    raise
                if trio.current_time() >= deadline:
                    raise exc from refused
            refusals += 1

    async def command(self, *args: CommandArg) -> Reply:
        """Run one raw command on the bus's connection (routed by its key on a cluster), e.g.
        ``await bus.command("HSET", key, "n", 1)``; ints and floats are sent as their decimal
        text (a bool or another type raises ``TypeError``). Failures raise ``BusError``
        subclasses, as every call of the bus does. Use ``bus.keys(q).app(name)`` for a key in a
        queue's slot. A cancelled call may or may not have run on the server."""
        reply: Reply = await self.transport.command(*map(_command_arg, args))
        return reply

    def subscribe(
        self, *, channels: Sequence[str] = (), patterns: Sequence[str] = ()
    ) -> AbstractAsyncContextManager[Subscription]:
        """A client of its own subscribed to ``channels`` and ``patterns`` (pub/sub), for
        ``async with``: each message is one ``PUBLISH`` (``message.data`` is bytes)."""
        return self.transport.subscribe(channels=channels, patterns=patterns)

    @property
    def url(self) -> str:
        """The URL of the server, password redacted."""
        return self.transport.spec.redacted()
