"""``Archiver``: folds the notification queue's audit stream into the local archive, off the hot
path, and replicates committed rows off-box in numbered, create-only segments, compacted into
larger objects under numbered manifests as they accumulate.

Theory of operation:

* Two tasks with separate concerns. The ``Folder`` (stream → SQLite → acknowledge → trim) needs
  only the server and the local disk. The ``Replicator`` (epoch, reconcile, segments) needs the
  replica. A replica that is down never stops folding, and a folding problem never stops
  replication. The archiver runs both and ties them together in two places: a new, empty
  database does not fold until the replicator has reconciled (it may have to start from the
  replica; the records wait in the server's stream meanwhile, nothing is trimmed before it is
  folded), and a fenced archiver stops reading the stream.
* The archive is one process's: ``run`` takes an exclusive lock on ``<db>.lock`` first
  (``servicekit.datadir.hold``; a second archiver gets ``InUse``), so two archivers never fold
  into one database. ``run`` reports started once the local side is ready (lock, database, the
  stream's consumer group); the replica is reached in the background.
* Cancellation (a clean stop) drains: the folder keeps folding what the workers stopping
  alongside settle, so after a clean stop the archive has a row for every settled notice. Then
  the replicator writes what is committed but not yet replicated as a final segment (shielded,
  at most ``final_segment_s``), so after a clean stop the replica is complete too; a replica that
  is down then is said in one line, and the rows follow at the next start.
"""

from __future__ import annotations

import os
import socket
from functools import partial
from pathlib import Path

import attrs
import trio

from codemojex.audit.archive import ArchiveStore
from codemojex.audit.compaction import DEFAULT_COMPACT_ROWS, DEFAULT_COMPACT_SEGMENTS
from codemojex.audit.folder import DEFAULT_FORGET_IDLE_MS, Folder, FolderStats
from codemojex.audit.replica import Replica
from codemojex.audit.replicator import DEFAULT_REPLICA_RETRY, Replicator, ReplicatorStats
from codemojex.notify.notifier import NOTIFY_QUEUE
from echomq_trio import Bus
from echomq_trio.backoff import Policy
from servicekit.datadir import OwnerLock, hold, private_dir

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_COMPACT_ROWS",
    "DEFAULT_COMPACT_SEGMENTS",
    "DEFAULT_FINAL_SEGMENT_S",
    "DEFAULT_FORGET_IDLE_MS",
    "DEFAULT_MIN_IDLE_MS",
    "DEFAULT_SEGMENT_EVERY_S",
    "DEFAULT_SEGMENT_ROWS",
    "Archiver",
    "ArchiverStats",
]

DEFAULT_BATCH = 500  # stream entries per read
DEFAULT_SEGMENT_ROWS = 1000  # rows that make a segment at once
DEFAULT_SEGMENT_EVERY_S = 5.0  # seconds before fewer rows make a segment
DEFAULT_MIN_IDLE_MS = 30_000  # a crashed archiver's entries are taken over after this
DEFAULT_FINAL_SEGMENT_S = 10.0  # a clean stop gives the final segment this long


@attrs.frozen
class ArchiverStats:
    """A snapshot of both halves: ``folder`` (rows archived, entries acknowledged, whether it
    folds) and ``replicator`` (epoch, segments, fenced, the replica's outages)."""

    folder: FolderStats
    replicator: ReplicatorStats


class Archiver:
    """Run with ``nursery.start(archiver.run)``; cancel to stop (restartable at any point)."""

    def __init__(
        self,
        bus: Bus,
        db_path: str | Path,
        replica: Replica,
        *,
        queue: str = NOTIFY_QUEUE,
        consumer: str | None = None,
        batch: int = DEFAULT_BATCH,
        segment_rows: int = DEFAULT_SEGMENT_ROWS,
        segment_every_s: float = DEFAULT_SEGMENT_EVERY_S,
        compact_segments: int = DEFAULT_COMPACT_SEGMENTS,
        compact_rows: int = DEFAULT_COMPACT_ROWS,
        min_idle_ms: int = DEFAULT_MIN_IDLE_MS,
        forget_idle_ms: int = DEFAULT_FORGET_IDLE_MS,
        poll_s: float = 0.2,
        replica_retry: Policy = DEFAULT_REPLICA_RETRY,
        drain_quiet_s: float = 0.5,
        drain_max_s: float = 5.0,
        final_segment_s: float = DEFAULT_FINAL_SEGMENT_S,
    ) -> None:
        self.bus = bus
        self.store = ArchiveStore(db_path)
        self.replica = replica
        self.queue = queue
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.final_segment_s = final_segment_s
        self.replicator = Replicator(self.store, replica, holder=self.consumer,
                                     segment_rows=segment_rows, segment_every_s=segment_every_s,
                                     poll_s=poll_s, retry=replica_retry,
                                     compact_segments=compact_segments,
                                     compact_rows=compact_rows)  # fmt: skip
        self.folder = Folder(bus, self.store, queue=queue, consumer=self.consumer, batch=batch,
                             min_idle_ms=min_idle_ms, forget_idle_ms=forget_idle_ms,
                             poll_s=poll_s, drain_quiet_s=drain_quiet_s, drain_max_s=drain_max_s,
                             may_read=self._may_read)  # fmt: skip

    def statistics(self) -> ArchiverStats:
        return ArchiverStats(self.folder.statistics(), self.replicator.statistics())

    def _may_read(self) -> bool:
        return self.replicator.statistics().fenced is None  # fenced: leave it to the holder

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fold and replicate until cancelled, then drain (see the module docstring).

        Started once the local side is ready: the database locked and open, the stream's group in
        place. Raises ``servicekit.datadir.InUse`` (before anything else) if another archiver
        holds the database."""
        lock = self._hold()
        self.replicator.reset()
        self.folder.reset()
        try:
            await self.folder.prepare()
            await self.store.open()
            new_db = await self.store.max_seq() == 0
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(self.replicator.run, new_db=new_db))
                task_status.started()
                if new_db:
                    await self.replicator.reconciled.wait()  # it may start from the replica
                try:
                    await self.folder.run()
                except trio.Cancelled:
                    # A clean stop: the folder has drained; what it committed goes off-box now.
                    await self.replicator.final_segment(self.final_segment_s)
                    raise
        finally:
            await self.store.aclose()
            lock.release()

    async def replicate(self, *, force: bool = False) -> int:
        """Write the next segment if one is due (``force``: whatever rows wait); returns its
        number, 0 when none was written (see ``Replicator.replicate``)."""
        return await self.replicator.replicate(force=force)

    async def compact(self, *, force: bool = False) -> int:
        """Compact the replica if it is due (``force``: whatever segments follow its newest
        manifest); returns the number of the manifest written, 0 when none was (see
        ``Replicator.compact``)."""
        return await self.replicator.compact(force=force)

    def _hold(self) -> OwnerLock:
        path = self.store.path
        if not path.parent.exists():
            private_dir(path.parent)
        return hold(Path(f"{path}.lock"), f"archive {path}")
