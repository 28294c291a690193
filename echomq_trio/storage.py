"""Whether the server can write its data, and, for the embedded server, where that data lives.

A server that cannot write its append-only file (a full disk, a file system gone read-only)
refuses every write (``MISCONF``, raised as ``PersistenceFailed``) and keeps in memory what the
file could not take yet; it tries the file again every second and takes writes again once that
succeeds. Nothing is lost while it runs; so the bus waits rather than exits (the consumer, the
metronome and settlements retry a ``WritesRefused``), and the embedded server is left running.

``read_storage(bus)`` reads the state: one ``INFO persistence`` (``aof_last_write_status``,
``rdb_last_bgsave_status``) and, when the bus owns an embedded server, the file system of its
data directory (``Disk``: its mount point, type, free space). ``StorageWatch`` (``open_bus``
runs one beside the embedded server, as ``Bus.storage``) reads it every second and logs one
WARNING line when the server starts refusing writes, naming the data directory, its file
system and its free space, and one line when writes are taken again; ``statistics()`` is what
the summary line, the metrics and the dashboard show.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Protocol

import attrs
import trio

from echomq_trio._replies import as_text
from echomq_trio.durability import FileSync, NotDurable
from echomq_trio.errors import BusError
from echomq_trio.keys import WAITAOF_PROBE_KEY
from echomq_trio.memory import size_text
from echomq_trio.server import APPEND_ONLY_DIR, EmbeddedServer
from echomq_trio.transport import Transport

__all__ = [
    "Disk",
    "Storage",
    "StorageWatch",
    "disk_of",
    "file_sync",
    "fsync_append_only_file",
    "has_waitaof",
    "read_storage",
    "storage_note",
    "waitaof_syncs",
]

log = logging.getLogger("echomq_trio.storage")


class _Served(Protocol):
    """What this module reads of a ``Bus``: its ``transport`` and its embedded ``server`` (the bus's
    module imports this one, so ``Bus`` is not named here)."""

    @property
    def transport(self) -> Transport: ...

    @property
    def server(self) -> EmbeddedServer | None: ...


WATCH_EVERY_S = 1.0  # the server retries its file every second


@attrs.frozen
class Disk:
    """The file system a directory is on, and its room, as ``statvfs`` tells it."""

    path: str
    mount: str  # the file system's mount point ('' when /proc/self/mountinfo is not readable)
    fstype: str
    free_bytes: int  # free to an unprivileged writer
    size_bytes: int

    def describe(self) -> str:
        """``'codemojex-data (file system /data, ext4): 0 B free of 20 MiB'``."""
        where = f"{self.mount}, {self.fstype}" if self.mount else "file system unknown"
        return (
            f"{self.path} (file system {where}): {size_text(self.free_bytes)} free of "
            f"{size_text(self.size_bytes)}"
        )


@attrs.frozen
class Storage:
    """``writable``: the server's last write of its append-only file (and snapshot) succeeded;
    ``disk``: where an embedded server's data lives (``None`` for a server given by URL);
    ``aof``: it keeps an append-only file at all (``appendonly yes``; ``durability.OnDisk``
    needs one)."""

    writable: bool
    disk: Disk | None = None
    aof: bool = True  # it keeps an append-only file (every primary of a cluster)


def _mount_of(path: str) -> tuple[str, str]:
    """The mount point and type of the file system holding ``path`` (the longest mount point
    that is a prefix of it), from ``/proc/self/mountinfo``; ``('', '')`` without it."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return "", ""
    best = ("", "")
    for line in lines:
        fields = line.split()
        try:
            mount = fields[4].encode().decode("unicode_escape")  # \040 for a space
            fstype = fields[fields.index("-") + 1]
        except (IndexError, ValueError):
            continue
        inside = path == mount or path.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best[0]):
            best = (mount, fstype)
    return best


def disk_of(path: str | os.PathLike[str]) -> Disk:
    """The file system ``path`` is on (``OSError`` when it cannot be read)."""
    real = os.path.realpath(path)
    st = os.statvfs(real)
    mount, fstype = _mount_of(real)
    return Disk(str(path), mount, fstype, st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)


def _info_fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip()] = value.strip()
    return out


async def has_waitaof(bus: _Served) -> bool:
    """Whether the server has ``WAITAOF`` (Valkey, Redis 7.2 and later; not Redis 7.0), which
    ``durability.OnDisk`` and ``Replicas(on_disk=True)`` wait with: one ``COMMAND INFO``.
    ``BusError`` when the server cannot be read."""
    reply = await bus.transport.command("COMMAND", "INFO", "WAITAOF")
    return reply not in ([None], [], None)


def _leaves(reply: object) -> list[object]:
    """Every leaf of a reply: the items of lists, the keys and values of maps, however nested."""
    if isinstance(reply, dict):
        return [leaf for k, v in reply.items() for leaf in (*_leaves(k), *_leaves(v))]
    if isinstance(reply, list | tuple):
        return [leaf for item in reply for leaf in _leaves(item)]
    return [reply]


def _by_node(reply: object) -> bool:
    """Whether a reply is a cluster's map by node (its values replies of their own), not one
    server's map (``CONFIG GET`` in RESP3: names to values)."""
    return (
        isinstance(reply, dict)
        and bool(reply)
        and all(isinstance(v, dict | list | tuple) for v in reply.values())
    )


def _syncs_every_write(config_get: object) -> bool:
    """Whether a ``CONFIG GET appendfsync`` reply (a list, a map, or a cluster's map by node)
    says ``always`` (on every node)."""
    if _by_node(config_get):
        assert isinstance(config_get, dict)
        return all(_syncs_every_write(one) for one in config_get.values())
    return "always" in {as_text(leaf) for leaf in _leaves(config_get)}


def _may_answer_early(info_server: object) -> bool:
    """Whether a server, by its ``INFO server`` (a text, or a cluster's texts by node), may be
    one whose ``WAITAOF`` answers before the sync: Valkey (no version yet known to be fixed),
    or Redis 7.4 (redis/redis#13793, fixed in 8.0; Redis 7.2 never had it)."""
    texts = info_server.values() if isinstance(info_server, dict) else [info_server]
    for text in texts:
        fields = _info_fields(as_text(text))
        if fields.get("server_name") == "valkey":
            return True
        if fields.get("redis_version", "").startswith("7.4."):
            return True
    return False


PROBE_ROUNDS = 3  # the probe's verdict is the majority of this many rounds
WAITAOF_PROBE_MS = 200  # far less than the second between two syncs with appendfsync everysec


async def waitaof_syncs(bus: _Served) -> bool:
    """Whether the server's ``WAITAOF`` answers only once its append-only file is synced to the
    disk, as ``durability.OnDisk`` needs (meaningful where ``has_waitaof``). Valkey (9.1.2 here)
    and Redis 7.4 answer it once the file is written, before the sync (redis/redis#13793, fixed
    in Redis 8.0): there ``OnDisk`` returns once a killed server would keep the write, and a
    power cut may still lose the last second or two.

    Only those servers are asked (by ``INFO server``; Redis 7.2 and 8 are taken at their
    word): on a connection of its own, a write of ``keys.WAITAOF_PROBE_KEY`` and a ``WAITAOF``
    that waits for the sync after it; then, at once, another write and a ``WAITAOF`` of
    ``WAITAOF_PROBE_MS``. With ``appendfsync everysec`` the next sync is a second after the
    last, so an answer within the 200 ms did not wait for one. The verdict is the majority of
    ``PROBE_ROUNDS`` rounds (a few ms where it answers early; a second or so a round where it
    waits), since a sync that takes long, or writes the server holds behind one, can make one
    round say either. A server that syncs every write before it answers (``appendfsync
    always``, read where ``CONFIG GET`` is allowed) keeps its word however fast it answers.
    ``BusError`` when the server cannot be read or refuses the probe's write."""
    wire = bus.transport
    if not _may_answer_early(await wire.command("INFO", "server")):
        return True
    with contextlib.suppress(BusError):  # CONFIG may be refused (a managed server)
        if _syncs_every_write(await wire.command("CONFIG", "GET", "appendfsync")):
            return True
    return await _waits_for_sync(wire)


async def _waits_for_sync(wire: Transport) -> bool:
    """The probe of ``waitaof_syncs`` itself, whatever the server."""
    waited = early = 0
    async with wire.blocking() as own:  # a WAITAOF waits for this connection's writes
        while max(waited, early) <= PROBE_ROUNDS // 2:
            await own.command("SET", WAITAOF_PROBE_KEY, "synced", "PX", "60000")
            local, _ = await own.wait_aof(WAITAOF_PROBE_KEY, 1, 0, 2_000)
            if local < 1:  # no sync within 2 s: no answer before one, at least
                waited += 1
                continue
            await own.command("SET", WAITAOF_PROBE_KEY, "next", "PX", "60000")
            local, _ = await own.wait_aof(WAITAOF_PROBE_KEY, 1, 0, WAITAOF_PROBE_MS)
            if local < 1:
                waited += 1
            else:
                early += 1
    return waited > early


def fsync_append_only_file(data_dir: Path) -> int:
    """Sync to the disk the append-only file of the server whose data directory is
    ``data_dir``: every incr file in its ``appendonlydir`` (the one the server appends to, and
    the one before it while a rewrite runs), by ``fdatasync`` on a descriptor of this process,
    which syncs what the server wrote. Blocking: run it in a thread. How many files it synced;
    ``OSError`` when there is none. (A descriptor of its own sees the errors of write-back from
    its opening on: one the server's own sync met before is the server's to report.)"""
    folder = data_dir / APPEND_ONLY_DIR
    synced = 0
    for path in sorted(folder.glob("*.incr.aof")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # a file a rewrite's end just removed: its writes are in the base
            continue
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
        synced += 1
    if not synced:
        raise FileNotFoundError(f"no append-only file to sync in {folder}")
    return synced


def file_sync(data_dir: Path) -> FileSync:
    """An ``OnDisk`` wait's last step for an embedded server (``DurableCalls.sync_file``; the
    bus sets it): sync its append-only file from this process (``fsync_append_only_file``, in
    a thread, one at a time), so a call returns once the file is synced even where the server
    answers ``WAITAOF`` once it is only written (Valkey; where ``WAITAOF`` waits for the sync,
    the file is clean and the sync costs little). ``NotDurable`` when it cannot."""
    limiter = trio.CapacityLimiter(1)

    async def sync() -> None:
        try:
            # Cancelled (the wait's timeout_ms), the call returns and the thread ends its
            # fdatasync on its own; the limiter keeps the next one waiting until then.
            await trio.to_thread.run_sync(
                fsync_append_only_file, data_dir, limiter=limiter, abandon_on_cancel=True
            )
        except OSError as exc:
            raise NotDurable(f"could not sync the append-only file in {data_dir}: {exc}") from exc

    return sync


async def read_storage(bus: _Served) -> Storage:
    """The server's ability to write its data (one ``INFO persistence``; on a cluster, every
    primary must be writing) and, for an embedded server, its data directory's file system.
    ``BusError`` when the server cannot be read."""
    raw = await bus.transport.command("INFO", "persistence")
    texts = raw.values() if isinstance(raw, dict) else [raw]
    writable, aof = True, True
    for text in texts:
        fields = _info_fields(text.decode() if isinstance(text, bytes) else str(text))
        failed = ("aof_last_write_status", "rdb_last_bgsave_status")
        writable = writable and all(fields.get(name, "ok") == "ok" for name in failed)
        aof = aof and fields.get("aof_enabled") == "1"
    disk = None
    if bus.server is not None:
        try:
            disk = await trio.to_thread.run_sync(disk_of, bus.server.data_dir)
        except OSError:
            disk = None
    return Storage(writable, disk, aof)


def storage_note(storage: Storage) -> str:
    """What a person should read when the server refuses writes, one line; '' while it
    writes."""
    if storage.writable:
        return ""
    where = f": {storage.disk.describe()}" if storage.disk else ""
    return f"WRITES REFUSED, the server cannot write its append-only file{where}"


@attrs.frozen
class StorageStats:
    """What the watch saw last: the state, and since when (trio clock) it has refused."""

    storage: Storage
    refusing_since: float | None = None
    outages: int = 0  # spells of refused writes so far


class StorageWatch:
    """Reads ``read_storage`` every ``every_s`` and logs each change (see the module's
    docstring). Run with ``nursery.start(watch.run)``."""

    def __init__(self, bus: _Served, *, every_s: float = WATCH_EVERY_S) -> None:
        self.bus = bus
        self.every_s = every_s
        self._stats = StorageStats(Storage(True))

    def statistics(self) -> StorageStats:
        return self._stats

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            with contextlib.suppress(BusError):  # the server restarting: its supervisor says so
                await self.check()
            await trio.sleep(self.every_s)

    async def check(self) -> StorageStats:
        """Read once, log a change, and answer the new statistics."""
        now = trio.current_time()
        storage = await read_storage(self.bus)
        was = self._stats
        if not storage.writable and was.refusing_since is None:
            self._stats = StorageStats(storage, now, was.outages + 1)
            log.warning(
                "the server refuses writes: it cannot write its append-only file in %s. It "
                "keeps what it has in memory and tries again every second; claiming, enqueueing "
                "and settling wait and go on by themselves once it can write. Free space there.",
                storage.disk.describe() if storage.disk else "its data directory",
            )
        elif storage.writable and was.refusing_since is not None:
            self._stats = StorageStats(storage, None, was.outages)
            log.warning(
                "the server writes its append-only file again, after %.0f s of refused writes%s",
                now - was.refusing_since,
                f" ({storage.disk.describe()})" if storage.disk else "",
            )
        else:
            self._stats = attrs.evolve(was, storage=storage)
        return self._stats
