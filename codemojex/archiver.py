"""``Archiver``: folds the notification queue's audit stream into the local archive, off the hot
path, and replicates committed rows off-box in numbered, create-only segments.

Theory of operation:

* Read the audit stream with a consumer group (``archiver``): first this consumer's own
  unacknowledged entries (after a crash and restart), then entries a crashed peer left idle for
  ``min_idle_ms`` (``XAUTOCLAIM``), then new ones. Fold a batch into SQLite and commit, then
  acknowledge, then trim the stream below what is committed (never by a blind cap). A crash
  between commit and acknowledge replays the batch; inserts are idempotent by notice id.
* At start, claim an epoch: create ``epochs/<n+1>`` in the replica, create-only. A writer whose
  epoch is no longer the newest is fenced: it stops replicating and says so.
* Cut committed rows into segments ``segments/<n>.jsonl`` (a header line, then one row per line),
  when ``segment_rows`` rows are waiting or ``segment_every_s`` has passed. Each number is
  written exactly once: if it exists (S3's 412), another writer owns it, and this one is fenced.
  A 409 is retried. ``restore`` rebuilds a database from the segments, in order.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from codemojex.archive import ArchiveDB, ArchiveStore, AuditRow, fold
from codemojex.notifier import NOTIFY_QUEUE
from codemojex.replica import NameTaken, Replica, ReplicaBusy
from echomq_trio import Bus, BusError, events, jobs

__all__ = ["Archiver", "ArchiverStats", "restore", "segment_name"]

log = logging.getLogger("codemojex.archiver")

T = TypeVar("T")
GROUP = "archiver"
AUDIT = "audit"


def segment_name(n: int) -> str:
    return f"segments/{n:020d}.jsonl"


def epoch_name(n: int) -> str:
    return f"epochs/{n:020d}"


def _number(name: str) -> int:
    return int(Path(name).name.split(".")[0])


@attrs.define
class ArchiverStats:
    archived: int = 0  # rows inserted (new)
    acknowledged: int = 0  # stream entries committed and acked
    segments: int = 0  # segments this archiver wrote
    epoch: int = 0
    fenced: str | None = None
    replica_errors: int = 0


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
        batch: int = 500,
        segment_rows: int = 1000,
        segment_every_s: float = 5.0,
        min_idle_ms: int = 30_000,
        poll_s: float = 0.2,
    ) -> None:
        self.bus = bus
        self.store = ArchiveStore(db_path)
        self.replica = replica
        self.queue = queue
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.batch = batch
        self.segment_rows = segment_rows
        self.segment_every_s = segment_every_s
        self.min_idle_ms = min_idle_ms
        self.poll_s = poll_s
        self.stats = ArchiverStats()
        self._limiter = trio.CapacityLimiter(1)  # replica calls, one at a time
        self._last_cut = 0.0
        self._next_epoch_check = 0.0
        self._replicating = trio.Lock()  # one segment at a time, whoever asks

    async def _replica(self, fn: Callable[..., T], *args: Any) -> T:
        # A replica call stuck on the network must not hold up a shutdown: on cancellation the
        # thread is left to finish alone. That is safe: writes are create-only, and a segment
        # that lands after we stopped is found by ``_reconcile`` at the next start.
        return await trio.to_thread.run_sync(
            fn, *args, limiter=self._limiter, abandon_on_cancel=True
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await jobs.set_audit(self.bus, self.queue)
        await events.create_group(self.bus, self.queue, GROUP, "0", stream=AUDIT)
        await self.store.open()
        try:
            await self._claim_epoch()
            await self._reconcile()
            self._last_cut = trio.current_time()
            task_status.started()
            await self._fold(await self._read(pending=True))  # what a crash left us
            next_autoclaim = trio.current_time()
            while True:
                try:
                    if self.stats.fenced is None and trio.current_time() >= next_autoclaim:
                        next_autoclaim = trio.current_time() + self.min_idle_ms / 2000
                        await self._fold(await events.autoclaim(
                            self.bus, self.queue, GROUP, self.consumer, self.min_idle_ms,
                            self.batch, stream=AUDIT))  # fmt: skip
                    if self.stats.fenced is None:
                        got = await self._fold(await self._read())
                    else:
                        got = 0  # fenced: leave the stream to the archiver that holds the epoch
                    await self.replicate()
                except BusError as exc:
                    log.warning("archiver: server trouble: %s", exc)
                    got = 0
                if got == 0:
                    await trio.sleep(self.poll_s)
        finally:
            await self.store.aclose()

    async def _read(self, *, pending: bool = False) -> list[events.Event]:
        return await events.read_group(self.bus, self.queue, GROUP, self.consumer, self.batch,
                                       pending=pending, stream=AUDIT)  # fmt: skip

    async def _fold(self, entries: Sequence[events.Event]) -> int:
        if not entries:
            return 0
        rows = fold([{"id": e.subject, **e.fields} for e in entries])
        self.stats.archived += await self.store.insert(rows)  # committed (synchronous=FULL)
        ids = [e.stream_id for e in entries]
        self.stats.acknowledged += await events.ack(self.bus, self.queue, GROUP, ids, stream=AUDIT)
        await self._trim()
        return len(entries)

    async def _trim(self) -> None:
        # Only below what every reader of the group has committed: one atomic script.
        key = self.bus.keys(self.queue).prefix + AUDIT
        await self.bus.wire.script("codemojex/audit_trim", [key], [GROUP])

    async def _claim_epoch(self) -> None:
        for _ in range(20):
            names = await self._replica(self.replica.names, "epochs/")
            n = max((_number(x) for x in names), default=0) + 1
            body = json.dumps({"epoch": n, "archiver": self.consumer}).encode()
            try:
                await self._replica(self.replica.put_new, epoch_name(n), body)
            except NameTaken:
                continue  # someone claimed n at the same moment: take the next
            self.stats.epoch = n
            log.info("archiver %s holds epoch %d of %s", self.consumer, n, self.replica.describe())
            return
        raise RuntimeError("could not claim an epoch in the replica")

    async def _reconcile(self) -> None:
        names = await self._replica(self.replica.names, "segments/")
        last = max((_number(x) for x in names), default=0)
        if last and await self.store.max_seq() == 0:
            # A new database beside an existing replica (a new host, a lost disk): start from
            # the replica, so row numbers and segments line up again.
            await self.store.aclose()
            rows = await self._replica(restore, self.replica, self.store.path)
            await self.store.open()
            log.info("archiver restored %d rows from %s", rows, self.replica.describe())
        # A segment written just before a crash may not be in our meta yet: trust the replica.
        mine = int(await self.store.get_meta("segment", "0") or 0)
        if last > mine:
            raw = await self._replica(self.replica.get, segment_name(last))
            header = json.loads(raw.split(b"\n", 1)[0])
            await self.store.set_meta({"segment": str(last),
                                       "replicated_seq": str(header["last_seq"])})  # fmt: skip

    def _fence(self, why: str) -> None:
        if self.stats.fenced is None:
            self.stats.fenced = why
            log.warning("archiver %s is fenced and stops replicating: %s", self.consumer, why)

    async def replicate(self, *, force: bool = False) -> int:
        """Write the next segment if one is due; returns its number (0: none written).

        The replica being unreachable is logged and tried again later: archiving goes on (it is
        off the hot path, and must not stop the service)."""
        async with self._replicating:
            try:
                return await self._replicate(force)
            except (NameTaken, ReplicaBusy):
                raise
            except Exception as exc:  # the replica's own errors: OSError, boto's, ...
                self.stats.replica_errors += 1
                log.warning("archiver: replica %s failed: %s: %s", self.replica.describe(),
                            type(exc).__name__, exc)  # fmt: skip
                return 0

    async def _replicate(self, force: bool) -> int:
        if self.stats.fenced is not None:
            return 0
        upto = int(await self.store.get_meta("replicated_seq", "0") or 0)
        rows = await self.store.rows_after(upto, self.segment_rows)
        due = len(rows) >= self.segment_rows or (
            trio.current_time() - self._last_cut >= self.segment_every_s
        )
        # Look for a newer epoch before each segment, and at least once per segment interval
        # even with nothing to write, so a stale archiver learns it is fenced either way.
        if (rows and (due or force)) or trio.current_time() >= self._next_epoch_check:
            self._next_epoch_check = trio.current_time() + self.segment_every_s
            names = await self._replica(self.replica.names, "epochs/")
            newest = max((_number(x) for x in names), default=0)
            if newest > self.stats.epoch:
                self._fence(f"a newer archiver holds epoch {newest} (this one holds "
                            f"{self.stats.epoch})")  # fmt: skip
                return 0
        if not rows or not (due or force):
            return 0
        n = int(await self.store.get_meta("segment", "0") or 0) + 1
        header = {"segment": n, "epoch": self.stats.epoch, "first_seq": rows[0][0],
                  "last_seq": rows[-1][0], "rows": len(rows)}  # fmt: skip
        lines = [json.dumps(header)] + [json.dumps({"seq": s, **r.as_dict()}) for s, r in rows]
        data = ("\n".join(lines) + "\n").encode()
        for attempt in range(5):
            try:
                await self._replica(self.replica.put_new, segment_name(n), data)
                break
            except NameTaken:
                self._fence(f"segment {n} is owned by another writer")
                return 0
            except ReplicaBusy:
                await trio.sleep(0.1 * 2**attempt)
        else:
            return 0
        await self.store.set_meta({"segment": str(n), "replicated_seq": str(rows[-1][0])})
        self.stats.segments += 1
        self._last_cut = trio.current_time()
        return n


def restore(replica: Replica, db_path: str | Path) -> int:
    """Rebuild the database at ``db_path`` from the replica's segments, in order (blocking).
    Returns the rows restored."""
    db = ArchiveDB(db_path)
    try:
        total = 0
        last = 0
        for name in sorted(replica.names("segments/"), key=_number):
            lines = replica.get(name).decode().splitlines()
            rows = [json.loads(line) for line in lines[1:] if line.strip()]
            seqs = [r.pop("seq") for r in rows]
            total += db.insert([AuditRow(**r) for r in rows], seqs)
            last = _number(name)
            db.set_meta({"segment": str(last), "replicated_seq": str(max(seqs, default=0))})
        return total
    finally:
        db.close()
