"""When a call of the bus returns: once the server holds its write in memory, once its
append-only file does, or once its replicas do.

By default (``InMemory``) a call returns when the server has the write in memory. The server
writes its append-only file before it answers (``write(2)``, every event-loop turn), and syncs it
to the disk every second (``appendfsync everysec``) in the background, so a server process
killed normally loses nothing it answered. But while the last second's sync is still running (a slow
disk; or the first sync of a new server, which holds the bus's 146 KB function library), Redis
and Valkey hold their writes for up to 2 s and answer them all the same: a server killed then
loses what it answered meanwhile. A power cut may lose the last second or two, and a server that
cannot write the file (a full disk) keeps what it answered in memory only until it can: killed
meanwhile, it loses that.

``OnDisk`` makes admissions (``enqueue`` and its kin, ``lanes.enqueue``, ``repeat.register``)
and, unless ``settlements=False``, settlements (``ack``, ``retry``, ``defer``) return only once
the server's append-only file holds the write, synced: ``WAITAOF 1 0`` (Valkey, Redis 7.2 and
later). A write that is not on disk within ``timeout_ms`` raises ``NotDurable`` (a
``PersistenceFailed``): it happened in memory, so calling again is safe (an admission answers
``DUPLICATE``, a settlement ``GONE`` or ``STALE``) and returns once it is on disk. Valkey (9.1.2)
and Redis 7.4 answer ``WAITAOF`` once the file is written, before its sync: for its embedded
server the bus then syncs the file itself (``DurableCalls.sync_file``, ``storage.file_sync``);
through a URL a call returns once a killed server would keep its write, not a power cut
(``storage.waitaof_syncs`` tells such a server apart; ``open_bus`` warns of it once).

How it runs (``Committer``, ``DurableCalls``): durable calls go on connections of their own,
and their waits are committed in groups: the first caller that needs its write on disk makes a
small write of its own (``sync_mark``, which also names the server process) and sends one
``WAITAOF``, which covers every write the server took before that one (the server counts
writes by its replication offset), so a second of calls costs about one sync, not one each; a
failed commit, or a server process that is not the one before, fails every write answered so
far rather than declare one on disk that may not be. ``WAITAOF`` blocks its connection until
the sync (up to a second with ``everysec``), which is why the bus's other calls do not share
it, and why a durable call sent meanwhile takes the other of two. Each call waits for the
server's next sync: up to a second with ``everysec``, whatever the load (where ``WAITAOF``
waits for the sync: not on Valkey, above), then, with ``sync_file``, for one ``fdatasync`` from
this process. The cost is measured
in the docs (``docs/guide/durability.md``, and ``docs/benchmarks/``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from echomq_trio._replies import as_text
from echomq_trio.errors import BusError, ConnectionLost, PersistenceFailed
from echomq_trio.protocol import Call
from echomq_trio.transport import Transport

__all__ = [
    "ADMISSIONS",
    "SETTLEMENTS",
    "Committer",
    "Durability",
    "DurableCalls",
    "FileSync",
    "InMemory",
    "NotDurable",
    "NotReplicated",
    "OnDisk",
    "Replicas",
    "Waiting",
    "check_durability",
]

# The scripts whose writes ``OnDisk`` waits for.
ADMISSIONS = frozenset({"enqueue", "lane_enqueue", "schedule", "debounce", "register"})
SETTLEMENTS = frozenset({"ack", "retry", "defer"})


class NotDurable(PersistenceFailed):
    """The write happened in memory, but the server's append-only file did not hold it within
    the durability's ``timeout_ms`` (its disk is full or slow). Calling again is safe and
    returns once it is on disk."""


class NotReplicated(NotDurable):
    """The write happened on the primary (a job enqueued is pending there, an acked job is gone
    from there), but only ``replicas`` of the ``wanted`` replicas acknowledged it within the
    durability's ``timeout_ms`` (``on_disk``: ``replicas`` of them, and the primary's own file
    if ``local``, had it on disk): a failover now may lose it. Calling again is safe (an
    admission answers ``DUPLICATE``, a settlement ``GONE`` or ``STALE``) and returns once the
    replicas have it; or the caller decides otherwise, knowing the primary has it."""

    def __init__(
        self, message: str, *, replicas: int = 0, wanted: int = 0, local: bool = True
    ) -> None:
        super().__init__(message)
        self.replicas = replicas
        self.wanted = wanted
        self.local = local


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


@attrs.frozen
class InMemory:
    """Return once the server holds the write in memory (the default; see the module)."""

    def waits_for(self, script: str) -> bool:
        return False


@attrs.frozen
class OnDisk:
    """Return admissions (and settlements, unless ``settlements`` is false) once the server's
    append-only file holds them; ``NotDurable`` after ``timeout_ms``, which should be well over
    the server's second between syncs (``appendfsync everysec``)."""

    timeout_ms: int = attrs.field(default=5_000)
    settlements: bool = True

    @timeout_ms.validator
    def _check(self, _: object, value: int) -> None:
        _positive("timeout_ms", value)

    def waits_for(self, script: str) -> bool:
        return script in ADMISSIONS or (self.settlements and script in SETTLEMENTS)


@attrs.frozen
class Replicas:
    """Return admissions (and settlements, unless ``settlements`` is false) once ``n`` replicas
    of the primary that took them acknowledge them (``WAIT n timeout_ms``); with ``on_disk``,
    once the primary's append-only file and those of ``n`` replicas hold them (``WAITAOF 1 n
    timeout_ms``: every one of them must keep a file). ``NotReplicated`` after ``timeout_ms``
    (the write is on the primary; see the module). ``Replicas(1, 100)``: one replica, 100 ms."""

    n: int = attrs.field()
    timeout_ms: int = attrs.field(default=1_000)
    on_disk: bool = False
    settlements: bool = True

    @n.validator
    def _check_n(self, _: object, value: int) -> None:
        _positive("n (the replicas to wait for)", value)

    @timeout_ms.validator
    def _check_timeout(self, _: object, value: int) -> None:
        _positive("timeout_ms", value)

    def waits_for(self, script: str) -> bool:
        return script in ADMISSIONS or (self.settlements and script in SETTLEMENTS)

    def describe(self, replicas: int, local: bool) -> str:
        held = "on their disks" if self.on_disk else "acknowledged it"
        text = f"{replicas} of {self.n} replica(s) {held} within {self.timeout_ms} ms"
        return text if local else text + ", and the primary's own file did not hold it"


Durability = InMemory | OnDisk | Replicas
# Syncs the server's append-only file to the disk from this process (an embedded server whose
# WAITAOF answers before its sync: open_bus sets it); ``NotDurable`` when it cannot.
FileSync = Callable[[], Awaitable[None]]
Waiting = OnDisk | Replicas  # the durabilities that wait (``DurableCalls`` runs their calls)


def check_durability(durability: object) -> None:
    """``TypeError`` for anything but a ``Durability`` (before any I/O)."""
    if not isinstance(durability, Durability):
        raise TypeError(
            f"durability must be InMemory(), OnDisk(...) or Replicas(n, timeout_ms), got "
            f"{durability!r}"
        )


class Committer:
    """Group commit of the writes made to one server (one slot's primary on a cluster):
    ``await committed()`` after a write has answered returns once the server's append-only file
    holds it (``OnDisk``), or its replicas do (``Replicas``). The first waiter leads: on
    ``wire`` it runs ``sync_mark`` (a small write of its own in the queue's meta, ``prefix``,
    answering the server process's id), then sends ``WAITAOF`` (or ``WAIT``), which waits for
    that write and so for every write the server took before it, on any connection; with
    ``sync_file`` (``OnDisk`` on an embedded server), a sync of the file from this process
    follows, since a ``WAITAOF`` that answers before the server's own sync (Valkey) covers only
    the file's writing. The others wait for it; those whose writes answered after it was sent
    lead the next. Nothing answered
    is ever declared on disk (or replicated) that may not be:

    * a lead that fails (the file or the replicas do not take the write in time, the server
      refuses writes, the connection drops) fails every write answered so far, at once;
    * a lead that finds another server process than the one before (``noted()`` notes it before
      the first write) fails every write answered so far: the process that answered them may
      have died with them."""

    def __init__(
        self,
        wire: Transport,
        meta: str,
        prefix: str,
        durability: Waiting,
        sync_file: FileSync | None = None,
    ) -> None:
        self.wire = wire
        self.meta = meta
        self.prefix = prefix
        self.durability = durability
        self.sync_file = sync_file
        self._answered = 0  # writes answered so far (numbered 1, 2, ...)
        self._synced = 0  # writes up to this number are on disk
        self._failed = 0  # writes up to this number failed with ``_failure``
        self._failure: BaseException | None = None
        self._leading: trio.Event | None = None  # set when the current lead ends
        self._server: str | None = None  # the server process the last lead found
        self._noting: trio.Event | None = None  # set when the first note of it ends

    @property
    def leading(self) -> bool:
        """A ``WAITAOF`` of this committer holds its connection now."""
        return self._leading is not None

    async def _mark(self) -> str:
        return as_text(await self.wire.script("sync_mark", [self.meta], [self.prefix]))

    async def noted(self) -> None:
        """Note the server process before the first write (once; callers meanwhile wait)."""
        while self._server is None:
            if self._noting is not None:
                await self._noting.wait()
                continue
            done = self._noting = trio.Event()
            try:
                self._server = await self._mark()
            finally:
                self._noting = None
                done.set()

    async def committed(self) -> None:
        """Call once per write answered; returns once it is on disk (see the class).
        ``NotDurable`` when it may not be (its cause chained): call again to wait for it.
        Cancelled, the write stays where it is (in memory, and on disk when the server gets to
        it)."""
        self._answered += 1
        mine = self._answered
        while self._synced < mine:
            if mine <= self._failed:
                raise self._shortfall() from self._failure
            if self._leading is not None:
                await self._leading.wait()
                continue
            done = self._leading = trio.Event()
            covers = self._answered
            try:
                server = await self._mark()
                if self._server is not None and server != self._server:
                    self._server = server
                    raise ConnectionLost("the server restarted since these writes answered")
                self._server = server
                await self._wait()
            except BusError as exc:
                self._failed, self._failure = max(self._failed, self._answered), exc
                continue  # raises for this write, as for every one answered so far
            finally:
                self._leading = None
                done.set()
            self._synced = max(self._synced, covers)

    async def _wait(self) -> None:
        """One wait for every write the server took so far; ``NotDurable`` (``NotReplicated``)
        when they are not where the durability wants them in time."""
        d = self.durability
        if isinstance(d, OnDisk):
            local, _ = await self.wire.wait_aof(self.meta, 1, 0, d.timeout_ms)
            if local < 1:
                raise NotDurable(f"not synced within {d.timeout_ms} ms")
            if self.sync_file is not None:  # the file is written: this syncs it
                with trio.move_on_after(d.timeout_ms / 1000) as waited:
                    await self.sync_file()
                if waited.cancelled_caught:
                    raise NotDurable(f"the append-only file not synced within {d.timeout_ms} ms")
            return
        if d.on_disk:
            local, replicas = await self.wire.wait_aof(self.meta, 1, d.n, d.timeout_ms)
        else:
            local, replicas = 1, await self.wire.wait_replicas(self.meta, d.n, d.timeout_ms)
        if replicas < d.n or local < 1:
            raise NotReplicated(
                d.describe(replicas, bool(local)), replicas=replicas, wanted=d.n, local=bool(local)
            )

    def _shortfall(self) -> NotDurable:
        """The error for a write the last failed lead covered (each waiter its own copy)."""
        failure, d = self._failure, self.durability
        if isinstance(d, OnDisk):
            return NotDurable(
                f"the write may not be on the server's disk ({failure}); it may be in memory: "
                "call again to wait for it"
            )
        got = failure.replicas if isinstance(failure, NotReplicated) else 0
        local = failure.local if isinstance(failure, NotReplicated) else False
        return NotReplicated(
            f"the write is on the primary but may not be on {d.n} replica(s) ({failure}): call "
            "again to wait for it",
            replicas=got, wanted=d.n, local=local,
        )  # fmt: skip


class DurableCalls:
    """The calls an ``OnDisk`` or ``Replicas`` durability waits for, run on ``wires``
    (connections of their own: a ``WAITAOF`` or ``WAIT`` blocks its connection until it is
    answered, so a call sent meanwhile goes on another, and waits for the next wait rather
    than the one after) and committed in groups:
    one ``Committer`` per connection for a single server, per connection and key hash tag (a
    queue's ``{q}``, so its slot's primary) on a cluster."""

    def __init__(
        self,
        wires: Sequence[Transport],
        durability: Waiting,
        *,
        sync_file: FileSync | None = None,
    ) -> None:
        if not wires:
            raise ValueError("DurableCalls needs at least one connection")
        self.wires = tuple(wires)
        self.durability = durability
        # Set before the first call (a Bus of an embedded server does): an OnDisk wait ends with it.
        self.sync_file = sync_file
        self._committers: dict[tuple[int, str], Committer] = {}

    def _committer(self, i: int, tag: str, prefix: str) -> Committer:
        c = self._committers.get((i, tag))
        if c is None:
            c = self._committers[i, tag] = Committer(self.wires[i], prefix + "meta", prefix,
                                                     self.durability, self.sync_file)  # fmt: skip
        return c

    async def run(self, call: Call[Any]) -> Any:
        """Run ``call`` and return its raw reply once the server's append-only file (or its
        replicas, as the durability says) holds it."""
        key = call.keys[0]
        prefix = key[: key.index("}:") + 2]  # the queue's: its meta is in the same slot
        tag = key[key.find("{") : key.find("}") + 1] if self.wires[0].spec.cluster else ""
        choices = [self._committer(i, tag, prefix) for i in range(len(self.wires))]
        committer = next((c for c in choices if not c.leading), choices[0])
        await committer.noted()
        reply = await committer.wire.script(call.script, call.keys, call.args)
        await committer.committed()
        return reply
