"""``Archiver``: folds the notification queue's audit stream into the local archive, off the hot
path, and replicates committed rows off-box in numbered, create-only segments.

Theory of operation:

* Two tasks with separate concerns. *Folding* (stream → SQLite → acknowledge → trim) needs only
  the server and the local disk. *Replication* (epoch, reconcile, segments) needs the replica.
  A replica that is down never stops folding, and a folding problem never stops replication.
* The archive is one process's: ``run`` takes an exclusive lock on ``<db>.lock`` first
  (``echomq_trio.datadir.hold``; a second archiver gets ``InUse``), so two archivers never fold
  into one database. ``run`` reports started once the local side is ready (lock, database, the
  stream's consumer group); the replica is reached in the background.
* Folding reads the audit stream with a consumer group (``archiver``): first this consumer's own
  unacknowledged entries (after a crash and restart), then entries a crashed peer left idle for
  ``min_idle_ms`` (``XAUTOCLAIM``), then new ones. Fold a batch into SQLite and commit, then
  acknowledge, then trim the stream below what is committed (never by a blind cap). A crash
  between commit and acknowledge replays the batch; inserts are idempotent by notice id.
* A new, empty database beside a replica that has segments (a new host, a lost disk) starts from
  the replica (``restore``), so row numbers and segments line up. So an empty database does not
  fold until the replica has been asked; while the replica cannot be reached the records wait
  in the server's stream (nothing is trimmed before it is folded).
* Replication first claims an epoch: create ``epochs/<n+1>`` in the replica, create-only. A writer
  whose epoch is no longer the newest is fenced: it stops replicating (and reading) and says so.
  Then it reconciles (a segment written just before a crash may be missing from the local
  bookkeeping: the replica is trusted), and only then cuts committed rows into segments
  ``segments/<n>.jsonl`` (a header line, then one row per line), when ``segment_rows`` rows are
  waiting or ``segment_every_s`` has passed. Each number is written exactly once: if it exists
  (S3's 412) and is not this epoch's own earlier attempt (whose answer was lost), another writer
  owns it, and this one is fenced. A 409 is retried. ``restore`` rebuilds a database from the
  segments, in order.
* A replica that is unreachable or refuses (connection errors, refused credentials, any boto or
  OS error) is retried with capped exponential backoff and full jitter (``replica_retry``); one
  line is logged when it goes down and one when it is back, and ``stats`` shows the outage.
  When it is back, every segment still missing is written, in order.
* Cancellation (a clean stop) drains: before it ends, folding goes on while the workers that
  stop alongside settle their last notices, until the stream has been quiet for
  ``drain_quiet_s`` with no job held, at most ``drain_max_s`` (a shield with that deadline). So
  after a clean stop the archive has a row for every settled notice. A crash leaves the records
  in the stream for the next start.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from codemojex.audit.archive import ArchiveDB, ArchiveStore, AuditRow, fold
from codemojex.audit.replica import NameTaken, Replica, ReplicaBusy
from codemojex.notify.notifier import NOTIFY_QUEUE
from echomq_trio import Bus, BusError, events, jobs
from echomq_trio.backoff import Exponential, Jitter, Policy, delay_ms
from echomq_trio.datadir import OwnerLock, hold, private_dir

__all__ = ["DEFAULT_REPLICA_RETRY", "Archiver", "ArchiverStats", "restore", "segment_name"]

log = logging.getLogger("codemojex.audit.archiver")

T = TypeVar("T")
GROUP = "archiver"
AUDIT = "audit"
DEFAULT_REPLICA_RETRY: Policy = Jitter(Exponential(500, 30_000))


def segment_name(n: int) -> str:
    return f"segments/{n:020d}.jsonl"


def epoch_name(n: int) -> str:
    return f"epochs/{n:020d}"


def _number(name: str) -> int:
    return int(Path(name).name.split(".")[0])


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


@attrs.define
class ArchiverStats:
    archived: int = 0  # rows inserted (new)
    acknowledged: int = 0  # stream entries committed and acked
    segments: int = 0  # segments this archiver wrote
    epoch: int = 0  # 0 until claimed
    fenced: str | None = None
    folding: bool = False  # False while a new database waits for the replica
    replicating: bool = False  # the epoch is held and the archive reconciled with the replica
    replica_down_since: float | None = None  # Unix time the current outage began
    replica_error: str | None = None  # the latest failure, one line
    replica_errors: int = 0  # failed replica calls, all outages


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
        replica_retry: Policy = DEFAULT_REPLICA_RETRY,
        drain_quiet_s: float = 0.5,
        drain_max_s: float = 5.0,
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
        self.replica_retry = replica_retry
        self.drain_quiet_s = drain_quiet_s
        self.drain_max_s = drain_max_s
        self.stats = ArchiverStats()
        self._limiter = trio.CapacityLimiter(1)  # replica calls, one at a time
        self._last_cut = 0.0
        self._next_epoch_check = 0.0
        self._replicating = trio.Lock()  # one segment at a time, whoever asks
        self._may_fold = trio.Event()  # a new database: set once the replica has been asked
        self._new_db = False
        self._failures = 0  # consecutive failed replica calls
        self._server_down = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fold and replicate until cancelled, then drain (see the module docstring).

        Started once the local side is ready: the database locked and open, the stream's group in
        place. Raises ``echomq_trio.datadir.InUse`` (before anything else) if another archiver
        holds the database."""
        lock = self._hold()
        # A new run is a new start: a new epoch, the replica asked again.
        self.stats.epoch, self.stats.fenced = 0, None
        self.stats.folding = self.stats.replicating = False
        self._may_fold, self._failures, self._next_epoch_check = trio.Event(), 0, 0.0
        try:
            await jobs.set_audit(self.bus, self.queue)
            await events.create_group(self.bus, self.queue, GROUP, "0", stream=AUDIT)
            await self.store.open()
            self._new_db = await self.store.max_seq() == 0
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._replication)
                task_status.started()
                await self._folding()
        finally:
            await self.store.aclose()
            lock.release()

    def _hold(self) -> OwnerLock:
        path = self.store.path
        if not path.parent.exists():
            private_dir(path.parent)
        return hold(Path(f"{path}.lock"), f"archive {path}")

    # --- folding: stream -> SQLite -> ack -> trim ---------------------------------------------

    async def _folding(self) -> None:
        if self._new_db:
            await self._may_fold.wait()  # a new database may have to start from the replica
        self.stats.folding = True
        try:
            await self._fold_forever()
        except trio.Cancelled:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + self.drain_max_s):
                await self._drain()
            raise

    async def _fold_forever(self) -> None:
        own_pending = True  # first what a crash left us
        next_autoclaim = trio.current_time()
        while True:
            got = 0
            try:
                if self.stats.fenced is None:  # fenced: leave the stream to the epoch's holder
                    if own_pending:
                        got = await self._fold(await self._read(pending=True))
                        own_pending = got >= self.batch
                    if trio.current_time() >= next_autoclaim:
                        next_autoclaim = trio.current_time() + self.min_idle_ms / 2000
                        got += await self._fold(await events.autoclaim(
                            self.bus, self.queue, GROUP, self.consumer, self.min_idle_ms,
                            self.batch, stream=AUDIT))  # fmt: skip
                    got += await self._fold(await self._read())
                self._server_ok()
            except BusError as exc:
                self._server_failed(exc)
                got = 0
            if got == 0:
                await trio.sleep(self.poll_s)

    async def _drain(self) -> None:
        # Fold what the stream gets while the workers stop (their last acks append records), until
        # it has been quiet for ``drain_quiet_s`` and no job is held; the caller's deadline bounds
        # it. A batch cut short by that deadline stays pending for the next start.
        if self.stats.fenced is not None:
            return
        step = min(self.poll_s, 0.05)
        try:
            while await self._fold(await self._read(pending=True)) >= self.batch:
                pass
            quiet_since = trio.current_time()
            while True:
                if await self._fold(await self._read()):
                    quiet_since = trio.current_time()
                    continue
                quiet = trio.current_time() - quiet_since >= self.drain_quiet_s
                if quiet and (await jobs.counts(self.bus, self.queue)).active == 0:
                    return
                await trio.sleep(step)
        except BusError as exc:
            log.warning("archiver: stopped draining the audit stream: %s", _one_line(exc))

    def _server_failed(self, exc: BusError) -> None:
        if not self._server_down:
            self._server_down = True
            log.warning("archiver: server trouble, retrying every %.1f s: %s", self.poll_s,
                        _one_line(exc))  # fmt: skip

    def _server_ok(self) -> None:
        if self._server_down:
            self._server_down = False
            log.warning("archiver: the server answers again; folding goes on")

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
        await self.bus.wire.script("codemojex.audit/audit_trim", [key], [GROUP])

    # --- replication: epoch, reconcile, segments ----------------------------------------------

    async def _replica(self, fn: Callable[..., T], *args: Any) -> T:
        # A replica call stuck on the network must not hold up a shutdown: on cancellation the
        # thread is left to finish alone. That is safe: writes are create-only, and a segment
        # that lands after we stopped is found by ``_reconcile`` at the next start.
        try:
            result = await trio.to_thread.run_sync(
                fn, *args, limiter=self._limiter, abandon_on_cancel=True
            )
        except (NameTaken, ReplicaBusy):
            self._replica_ok()  # an answer all the same: the replica is there
            raise
        self._replica_ok()
        return result

    def _replica_failed(self, exc: Exception) -> None:
        self._failures += 1
        self.stats.replica_errors += 1
        self.stats.replica_error = _one_line(exc)
        if self.stats.replica_down_since is None:
            self.stats.replica_down_since = time.time()
            if self._new_db and not self._may_fold.is_set():
                meanwhile = (
                    "a new archive waits for it before folding (the records wait in the stream)"
                )
            else:
                meanwhile = "archiving goes on locally; segments follow when it is back"
            log.warning("archiver: replica %s is failing (%s); %s; retrying with backoff",
                        self.replica.describe(), self.stats.replica_error, meanwhile)  # fmt: skip

    def _replica_ok(self) -> None:
        self._failures = 0
        if self.stats.replica_down_since is not None:
            down_s = time.time() - self.stats.replica_down_since
            self.stats.replica_down_since = None
            # At the level of the line it ends, so whoever saw one sees the other.
            log.warning("archiver: replica %s is back after %.1f s", self.replica.describe(),
                        down_s)  # fmt: skip

    async def _backoff(self) -> None:
        await trio.sleep(delay_ms(self.replica_retry, max(self._failures, 1)) / 1000)

    async def _replication(self) -> None:
        while not self.stats.replicating:
            try:
                if self.stats.epoch == 0:
                    await self._claim_epoch()
                await self._reconcile()
            except Exception as exc:  # the replica's own errors: OSError, boto's, ...
                self._replica_failed(exc)
                await self._backoff()
                continue
            self._last_cut = trio.current_time()
            self.stats.replicating = True
        self._may_fold.set()
        while self.stats.fenced is None:
            wrote = await self.replicate()
            if self._failures:
                await self._backoff()
            elif not wrote:
                await trio.sleep(self.poll_s)
            else:
                await trio.lowlevel.checkpoint()  # a backlog: the next segment at once

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
        if last and self._new_db and await self.store.max_seq() == 0:
            # A new database beside an existing replica (a new host, a lost disk): start from
            # the replica, so row numbers and segments line up again. ``restore`` is one
            # transaction: a replica lost half way leaves the database empty, to try again.
            await self.store.aclose()
            try:
                rows = await self._replica(restore, self.replica, self.store.path)
            finally:
                await self.store.open()
            log.info("archiver restored %d rows from %s", rows, self.replica.describe())
        # A segment written just before a crash may not be in our meta yet: trust the replica.
        mine = int(await self.store.get_meta("segment", "0") or 0)
        if last > mine:
            raw = await self._replica(self.replica.get, segment_name(last))
            header = json.loads(raw.split(b"\n", 1)[0])
            await self.store.set_meta({"segment": str(last),
                                       "replicated_seq": str(header["last_seq"])})  # fmt: skip
        elif mine > last:
            log.warning("archiver: replica %s has segments up to %d but this archive wrote up to "
                        "%d: the replica lost segments, or it is not this archive's replica",
                        self.replica.describe(), last, mine)  # fmt: skip

    def _fence(self, why: str) -> None:
        if self.stats.fenced is None:
            self.stats.fenced = why
            log.warning("archiver %s is fenced and stops replicating: %s", self.consumer, why)

    async def replicate(self, *, force: bool = False) -> int:
        """Write the next segment if one is due; returns its number (0: none written).

        Nothing is written before the epoch is claimed and the archive reconciled. A replica
        failure is counted in ``stats`` (logged once per outage) and returns 0: replication
        tries again later, archiving goes on (it is off the hot path, and must not stop the
        service)."""
        async with self._replicating:
            if not self.stats.replicating:
                return 0
            try:
                return await self._replicate(force)
            except Exception as exc:  # the replica's own errors: OSError, boto's, ...
                self._replica_failed(exc)
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
                taken = await self._replica(self.replica.get, segment_name(n))
                if _epoch_of(taken) != self.stats.epoch:
                    self._fence(f"segment {n} is owned by another writer")
                    return 0
                # This epoch's own earlier attempt landed though its answer was lost (the
                # replica went away mid-call): it is ours, and it is what the replica holds.
                header = json.loads(taken.split(b"\n", 1)[0])
                break
            except ReplicaBusy:
                await trio.sleep(0.1 * 2**attempt)
        else:
            return 0
        await self.store.set_meta({"segment": str(n), "replicated_seq": str(header["last_seq"])})
        self.stats.segments += 1
        self._last_cut = trio.current_time()
        return n


def _epoch_of(segment: bytes) -> int | None:
    try:
        epoch = json.loads(segment.split(b"\n", 1)[0]).get("epoch")
    except (ValueError, AttributeError):
        return None
    return epoch if isinstance(epoch, int) else None


def restore(replica: Replica, db_path: str | Path) -> int:
    """Rebuild the database at ``db_path`` from the replica's segments, in order (blocking), in
    one transaction: a failure part way leaves the database as it was. Returns the rows
    restored."""
    db = ArchiveDB(db_path)
    try:
        total = 0
        replicated = 0
        with db.transaction() as cur:
            for name in sorted(replica.names("segments/"), key=_number):
                lines = replica.get(name).decode().splitlines()
                rows = [json.loads(line) for line in lines[1:] if line.strip()]
                seqs = [r.pop("seq") for r in rows]
                total += db.insert_in(cur, [AuditRow(**r) for r in rows], seqs)
                replicated = max(replicated, *seqs)
                db.set_meta_in(cur, {"segment": str(_number(name)),
                                     "replicated_seq": str(replicated)})  # fmt: skip
        return total
    finally:
        db.close()
