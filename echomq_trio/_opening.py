"""``open_bus``: connect to a server, or start the embedded one, and hand out the ``Bus`` for a
block; on a kept data directory, take back what its previous owner's bus held."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import trio

from echomq_trio._checks import DEFAULT_MAX_PAYLOAD_BYTES, check_max_payload_bytes
from echomq_trio.bus import Bus
from echomq_trio.durability import (
    Durability,
    DurableCalls,
    InMemory,
    OnDisk,
    Replicas,
    Waiting,
    check_durability,
)
from echomq_trio.errors import BusError, ServerError
from echomq_trio.jobs import take_back
from echomq_trio.queues import queue_names
from echomq_trio.resp import open_trio
from echomq_trio.server import start_server
from echomq_trio.storage import (
    StorageWatch,
    has_waitaof,
    read_storage,
    waitaof_syncs,
)
from echomq_trio.transport import ConnectionSpec, Transport
from echomq_trio.wire import open_wire, parse_url
from servicekit.datadir import DataDir, write_private

__all__ = ["HOLDER_FILE", "open_bus"]

log = logging.getLogger("echomq_trio.bus")


@asynccontextmanager
async def open_bus(
    url: str | None = None,
    *,
    data_dir: str | os.PathLike[str] | DataDir | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    durability: Durability = InMemory(),
    transport: str = "trio",
) -> AsyncIterator[Bus]:
    """Connect to ``url``, or with no URL start an embedded server and stop it on exit.

    ``data_dir`` (embedded server only) keeps the server's append-only file across runs; without
    it the data lives in a temporary directory. The directory is owned for the block (mode 0700,
    an exclusive lock): a second owner gets ``servicekit.datadir.InUse`` naming the holder's pid
    before anything is started; pass a ``DataDir`` you own already to share it with other parts of
    your program. A malformed URL raises ``ValueError`` before any connection is tried. If the
    embedded server keeps dying (see ``server.start_server``), the block ends with
    ``ServerDied``. ``max_payload_bytes`` (1 MiB by default, at most 512 MiB) is the largest
    payload the bus admits; a larger one raises ``ValueError`` before any I/O. ``durability``
    says when admissions and settlements return (``durability.InMemory``, the default;
    ``OnDisk``: once the server's append-only file holds them; ``Replicas(n, timeout_ms)``:
    once ``n`` replicas do; see ``echomq_trio.durability``, and ``Bus.with_durability`` for
    another per call).
    ``transport`` says what carries the calls: ``"trio"`` (``echomq_trio.resp``, the default:
    trio streams, one pipelined connection per server, or per primary of a cluster) or
    ``"glide"`` (``wire.Wire`` on valkey-glide).
    """
    connect = _TRANSPORTS.get(transport) if isinstance(transport, str) else None
    if connect is None:
        raise ValueError(f"transport must be one of {sorted(_TRANSPORTS)}, got {transport!r}")
    check_durability(durability)
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
            if _on_disk(durability):
                await _check_on_disk(bus, aof=(await read_storage(bus)).aof)
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
        if _on_disk(durability):
            await _check_on_disk(bus, aof=True)  # the embedded server keeps one
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


def _on_disk(durability: Durability) -> bool:
    """Whether ``durability`` needs the server's own append-only file."""
    return isinstance(durability, OnDisk) or (
        isinstance(durability, Replicas) and durability.on_disk
    )


async def _check_on_disk(bus: Bus, *, aof: bool) -> None:
    """``ServerError`` (one line) where a durability on disk cannot work: the server keeps no
    append-only file, or has no ``WAITAOF`` (Redis before 7.2); one warning where it keeps less
    than its word (a ``WAITAOF`` that answers before the sync: ``storage.waitaof_syncs``) and
    the bus does not sync the file itself (it does for its embedded server)."""
    name = type(bus.durability).__name__
    if not aof:
        raise ServerError(
            f"durability {name} on disk needs a server that keeps an append-only file, and "
            f"{bus.url} keeps none (set appendonly yes, or use InMemory)"
        )
    if not await has_waitaof(bus):
        raise ServerError(
            f"durability {name} on disk needs WAITAOF (Valkey, Redis 7.2 and later), and "
            f"{bus.url} has none (an older Redis): use InMemory or Replicas without on_disk"
        )
    if bus.syncs_file_itself:  # the embedded server's file: synced whatever WAITAOF does
        return
    try:
        bus.waitaof_syncs = await waitaof_syncs(bus)
    except BusError as exc:  # a write refused (an ACL, the memory ceiling): the bus runs as ever
        log.warning(
            "durability %s: could not ask the server at %s whether its WAITAOF waits for the "
            "sync of its append-only file: %s",
            name, bus.url, exc,
        )  # fmt: skip
        return
    if not bus.waitaof_syncs:
        log.warning(
            "durability %s: the server at %s answers WAITAOF once its append-only file is "
            "written, before the file is synced (redis/redis#13793, fixed in Redis 8.0), so a "
            "call returns once a killed server would keep its write, but a power cut may lose "
            "the last second or two of them (appendfsync always on the server syncs each one)",
            name, bus.url,
        )  # fmt: skip


@asynccontextmanager
async def _durable(wire: Transport, durability: Durability) -> AsyncIterator[DurableCalls | None]:
    """Two connections of their own for ``OnDisk``'s and ``Replicas``' calls (a ``WAITAOF`` or
    ``WAIT`` blocks its connection; see ``durability.DurableCalls``)."""
    if not isinstance(durability, Waiting):
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
        for queue in await queue_names(bus):
            if n := await take_back(bus, queue, previous):
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
