"""``Replicator``: committed rows of the local archive, off-box in numbered, create-only segments
(``segments`` has the replica's layout and the segment format); ``restore`` brings them back.

Theory of operation:

* It first claims an epoch: create ``epochs/<n+1>`` in the replica, create-only. A writer whose
  epoch is no longer the newest is fenced: it stops replicating (and the archiver stops
  reading) and says so.
* Then it reconciles: a segment written just before a crash may be missing from the local
  bookkeeping, and the replica is trusted. A new, empty database beside a replica that has
  segments (a new host, a lost disk) is restored from it first, so row numbers and segments
  line up. ``reconciled`` is set once that is done: a new database must not fold before it.
* Only then does it cut committed rows into segments, when ``segment_rows`` rows are waiting or
  ``segment_every_s`` has passed. Each number is written exactly once: if it exists (S3's 412)
  and is not this epoch's own earlier attempt (whose answer was lost), another writer owns it,
  and this one is fenced. A 409 is retried.
* A replica that is unreachable or refuses (connection errors, refused credentials, any boto or
  OS error) is retried with capped exponential backoff and full jitter (``retry``); one line is
  logged when it goes down and one when it is back, and ``statistics`` shows the outage. When it
  is back, every segment still missing is written, in order.
* Compaction (``compaction`` has the rules): once ``compact_segments`` segments follow the newest
  manifest, they are merged into one compacted object (with the manifest's last, smaller
  compacted objects, up to ``compact_rows`` rows), then the next manifest is written naming the
  archive's objects; both create-only. Like a segment, it is fenced by the epoch: the newest
  epoch is checked first, and a manifest number another writer took makes this one lose the
  round (and be fenced, if that writer's epoch is newer). Then what the manifest before has
  superseded is deleted, by the epoch's holder only. The objects' content comes from the
  replica, never from the local archive, so any writer's compaction is the same.
* A clean stop writes a final segment: once the folder has drained, ``final_segment`` writes
  every committed row not yet replicated, at once (shielded, with a deadline). One try: a replica
  that is down, fails, or does not answer in time leaves them in the local archive for the next
  start, said in one log line; nothing is lost.
* ``restore`` rebuilds a database from the newest manifest's objects and the segments after it,
  in order, in one transaction, reading each object a chunk at a time; if an object goes while
  it reads (a clean-up), it starts again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from codemojex.audit import segments
from codemojex.audit.archive import ArchiveDB, ArchiveStore
from codemojex.audit.compaction import DEFAULT_COMPACT_ROWS, DEFAULT_COMPACT_SEGMENTS, Contents
from codemojex.audit.contents import Compaction, build_compaction, read_contents, read_header
from codemojex.audit.folder import one_line
from codemojex.audit.replica import NameTaken, NoSuchName, Replica, ReplicaBusy
from echomq_trio.backoff import Exponential, Jitter, Policy, delay_ms, reconnect_delay_s

__all__ = ["DEFAULT_REPLICA_RETRY", "Replicator", "ReplicatorStats", "restore"]

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_REPLICA_RETRY: Policy = Jitter(Exponential(500, 30_000))
RESTORE_TRIES = 5  # a restore that meets a missing object starts again, this many times at most
ROUND_SEGMENTS = 5  # a compaction round takes at most this many times compact_segments segments


@attrs.frozen
class ReplicatorStats:
    segments: int = 0  # segments this replicator wrote
    epoch: int = 0  # 0 until claimed
    fenced: str | None = None
    replicating: bool = False  # the epoch is held and the archive reconciled with the replica
    replica_down_since: float | None = None  # Unix time the current outage began
    replica_error: str | None = None  # the latest failure, one line
    replica_errors: int = 0  # failed replica calls, all outages
    manifest: int = 0  # the newest manifest this replicator knows of (0: none)
    compactions: int = 0  # manifests this replicator wrote
    deleted: int = 0  # superseded objects this replicator deleted
    compaction_stopped: str | None = None  # an object that cannot be compacted, one line


class Replicator:
    """Run with ``await replicator.run(new_db=...)`` once the store is open; cancel to stop."""

    def __init__(
        self,
        store: ArchiveStore,
        replica: Replica,
        *,
        holder: str,
        segment_rows: int = 1000,
        segment_every_s: float = 5.0,
        poll_s: float = 0.2,
        retry: Policy = DEFAULT_REPLICA_RETRY,
        compact_segments: int = DEFAULT_COMPACT_SEGMENTS,
        compact_rows: int = DEFAULT_COMPACT_ROWS,
    ) -> None:
        self.store = store
        self.replica = replica
        self.holder = holder  # who claims epochs: the archiver's name
        self.segment_rows = segment_rows
        self.segment_every_s = segment_every_s
        self.poll_s = poll_s
        self.retry = retry
        self.compact_segments = compact_segments
        self.compact_rows = compact_rows
        self.reconciled = trio.Event()  # the epoch is held and the replica asked
        self._stats = ReplicatorStats()
        self._limiter = trio.CapacityLimiter(1)  # replica calls, one at a time
        self._last_cut = 0.0
        self._next_epoch_check = 0.0
        self._replicating = trio.Lock()  # one segment at a time, whoever asks
        self._new_db = False
        self._failures = 0  # consecutive failed replica calls
        self._last_segment = 0  # the newest segment in the replica, as this replicator knows
        self._compact_from = 0  # compact no sooner than this segment (after a round lost)
        self._covered = 0  # the last segment the newest manifest covers, as this one knows

    def statistics(self) -> ReplicatorStats:
        return self._stats

    def reset(self) -> None:
        """A new run is a new start: a new epoch, the replica asked again."""
        self._stats = attrs.evolve(self._stats, epoch=0, fenced=None, replicating=False,
                                   compaction_stopped=None)  # fmt: skip
        self.reconciled, self._failures, self._next_epoch_check = trio.Event(), 0, 0.0

    def _count(self, **changes: Any) -> None:
        self._stats = attrs.evolve(self._stats, **changes)

    async def run(self, *, new_db: bool) -> None:
        """Claim an epoch and reconcile (``new_db``: the archive was empty when opened, and may
        have to start from the replica), then write segments until cancelled or fenced."""
        self._new_db = new_db
        while not self._stats.replicating:
            try:
                if self._stats.epoch == 0:
                    await self._claim_epoch()
                await self._reconcile()
            except Exception as exc:  # the replica's own errors: OSError, boto's, ...
                self._replica_failed(exc)
                await self._backoff()
                continue
            self._last_cut = trio.current_time()
            self._count(replicating=True)
        self.reconciled.set()
        while self._stats.fenced is None:
            wrote = await self.replicate()
            if not self._failures and self._compaction_due():
                await self.compact()
            if self._failures:
                await self._backoff()
            elif not wrote:
                await trio.sleep(self.poll_s)
            else:
                await trio.lowlevel.checkpoint()  # a backlog: the next segment at once

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
        self._count(replica_errors=self._stats.replica_errors + 1, replica_error=one_line(exc))
        if self._stats.replica_down_since is None:
            self._count(replica_down_since=time.time())
            if self._new_db and not self.reconciled.is_set():
                meanwhile = (
                    "a new archive waits for it before folding (the records wait in the stream)"
                )
            else:
                meanwhile = "archiving goes on locally; segments follow when it is back"
            log.warning("archiver: replica %s is failing (%s); %s; retrying with backoff",
                        self.replica.describe(), self._stats.replica_error,
                        meanwhile)  # fmt: skip

    def _replica_ok(self) -> None:
        self._failures = 0
        if self._stats.replica_down_since is not None:
            down_s = time.time() - self._stats.replica_down_since
            self._count(replica_down_since=None)
            # At the level of the line it ends, so whoever saw one sees the other.
            log.warning("archiver: replica %s is back after %.1f s", self.replica.describe(),
                        down_s)  # fmt: skip

    async def _backoff(self) -> None:
        await trio.sleep(delay_ms(self.retry, max(self._failures, 1)) / 1000)

    async def _claim_epoch(self) -> None:
        for _ in range(20):
            names = await self._replica(self.replica.names, segments.EPOCHS)
            n = max((segments.number(x) for x in names), default=0) + 1
            try:
                await self._replica(self.replica.put_new, segments.epoch_name(n),
                                    segments.encode_epoch(n, self.holder))  # fmt: skip
            except NameTaken:
                continue  # someone claimed n at the same moment: take the next
            self._count(epoch=n)
            log.info("archiver %s holds epoch %d of %s", self.holder, n, self.replica.describe())
            return
        raise RuntimeError("could not claim an epoch in the replica")

    async def _reconcile(self) -> None:
        contents = await self._replica(read_contents, self.replica)
        last = contents.last_segment
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
            last_seq = await self._last_seq(contents)
            await self.store.set_meta({"segment": str(last), "replicated_seq": str(last_seq)})
        elif mine > last:
            log.warning("archiver: replica %s has segments up to %d but this archive wrote up to "
                        "%d: the replica lost segments, or it is not this archive's replica",
                        self.replica.describe(), last, mine)  # fmt: skip
        self._known(contents)
        self._last_segment = self._compact_from = max(last, mine)

    async def _last_seq(self, contents: Contents) -> int:
        """The last row of the replica's newest segment: its header's, or when a manifest covers
        it, the manifest's."""
        if contents.manifest is not None and contents.covered == contents.last_segment:
            return contents.manifest.last_seq
        raw = await self._replica(self.replica.get, segments.segment_name(contents.last_segment))
        return segments.decode_header(raw).last_seq

    def _known(self, contents: Contents) -> None:
        """Remember the replica's newest manifest."""
        if contents.manifest is not None:
            self._count(manifest=contents.manifest.manifest)
        self._covered = contents.covered

    async def _newer_epoch(self) -> bool:
        """Whether another archiver holds a newer epoch (then this one is fenced)."""
        names = await self._replica(self.replica.names, segments.EPOCHS)
        newest = max((segments.number(x) for x in names), default=0)
        if newest > self._stats.epoch:
            self._fence(f"a newer archiver holds epoch {newest} (this one holds "
                        f"{self._stats.epoch})")  # fmt: skip
            return True
        return False

    def _fence(self, why: str) -> None:
        if self._stats.fenced is None:
            self._count(fenced=why)
            log.warning("archiver %s is fenced and stops replicating: %s", self.holder, why)

    async def replicate(self, *, force: bool = False) -> int:
        """Write the next segment if one is due; returns its number (0: none written).

        Nothing is written before the epoch is claimed and the archive reconciled. A replica
        failure is counted in ``statistics`` (logged once per outage) and returns 0:
        replication tries again later, archiving goes on (it is off the hot path, and must not
        stop the service)."""
        async with self._replicating:
            if not self._stats.replicating:
                return 0
            try:
                return await self._replicate(force)
            except Exception as exc:  # the replica's own errors: OSError, boto's, ...
                self._replica_failed(exc)
                return 0

    async def _replicate(self, force: bool) -> int:
        if self._stats.fenced is not None:
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
            if await self._newer_epoch():
                return 0
        if not rows or not (due or force):
            return 0
        n = int(await self.store.get_meta("segment", "0") or 0) + 1
        data = segments.encode(n, self._stats.epoch, rows)
        last_seq = rows[-1][0]
        for attempt in range(5):
            try:
                await self._replica(self.replica.put_new, segments.segment_name(n), data)
                break
            except NameTaken:
                taken = await self._replica(self.replica.get, segments.segment_name(n))
                header = _header_or_none(taken)
                if header is None or header.epoch != self._stats.epoch:
                    self._fence(f"segment {n} is owned by another writer")
                    return 0
                # This epoch's own earlier attempt landed though its answer was lost (the
                # replica went away mid-call): it is ours, and it is what the replica holds.
                last_seq = header.last_seq
                break
            except ReplicaBusy:
                await trio.sleep(reconnect_delay_s(attempt + 1))
        else:
            return 0
        await self.store.set_meta({"segment": str(n), "replicated_seq": str(last_seq)})
        self._last_segment = n
        self._count(segments=self._stats.segments + 1)
        self._last_cut = trio.current_time()
        return n

    def _compaction_due(self) -> bool:
        return (
            self._stats.compaction_stopped is None
            and self._last_segment >= self._compact_from
            and self._last_segment - self._covered >= self.compact_segments
        )

    async def compact(self, *, force: bool = False) -> int:
        """Compact the segments after the newest manifest if they are ``compact_segments`` or
        more (``force``: at least one), then delete what is superseded; returns the number of
        the manifest written (0: none).

        Nothing is compacted before the epoch is claimed and the archive reconciled, nor by a
        fenced replicator. A replica failure is counted as for segments and returns 0; so does
        a round lost to another writer (this one tries again after its next segment). An object
        that is not what it should be stops compaction for this run, said in one line."""
        async with self._replicating:
            if not self._stats.replicating or self._stats.fenced is not None:
                return 0
            if self._stats.compaction_stopped is not None:
                return 0
            try:
                n = await self._compact(force)
            except NoSuchName:  # another writer's clean-up got there first: a round lost
                n = 0
            except ValueError as exc:
                self._count(compaction_stopped=one_line(exc))
                log.warning("archiver: compaction of %s stops for this run: %s",
                            self.replica.describe(), self._stats.compaction_stopped)  # fmt: skip
                return 0
            except Exception as exc:  # the replica's own errors: OSError, boto's, ...
                self._replica_failed(exc)
                return 0
            if not n:
                self._compact_from = self._last_segment + 1
            return n

    async def _compact(self, force: bool) -> int:
        if await self._newer_epoch():
            return 0
        contents = await self._replica(read_contents, self.replica)
        self._known(contents)
        if not contents.after or len(contents.after) < (1 if force else self.compact_segments):
            return 0
        most = ROUND_SEGMENTS * self.compact_segments
        built = await self._replica(build_compaction, self.replica, contents, self._stats.epoch,
                                    self.compact_rows, most, self.store.path.parent)  # fmt: skip
        if built is None:
            return 0
        with built.file:
            created = await self._create_compacted(built)
        if not created:
            log.info("archiver: %s holds another object named %s; compaction goes on later",
                     self.replica.describe(), built.piece.name)  # fmt: skip
            return 0
        if not await self._create_manifest(built.manifest):
            return 0
        self._covered = built.manifest.last_segment
        self._count(manifest=built.manifest.manifest, compactions=self._stats.compactions + 1)
        log.info("archiver compacted %s into %s (manifest %d)", self.replica.describe(),
                 built.piece.name, built.manifest.manifest)  # fmt: skip
        await self._clean_up()
        return built.manifest.manifest

    async def _create_compacted(self, built: Compaction) -> bool:
        """Create the compacted object; ``False`` if its name holds something else."""
        try:
            await self._replica(self.replica.put_new_file, built.piece.name, built.file)
            return True
        except NameTaken:
            # Its name says what it holds: another writer's, or this one's earlier attempt,
            # holds the same rows if its header agrees.
            try:
                there = await self._replica(read_header, self.replica, built.piece.name)
            except ValueError:
                return False
            ours = built.header
            return attrs.evolve(there, epoch=ours.epoch) == ours

    async def _create_manifest(self, manifest: segments.Manifest) -> bool:
        """Create the manifest; ``False`` if another writer took its number (this one is fenced
        if that writer's epoch is newer)."""
        name = segments.manifest_name(manifest.manifest)
        try:
            await self._replica(self.replica.put_new, name, segments.encode_manifest(manifest))
            return True
        except NameTaken:
            there = await self._replica(self.replica.get, name)
            try:
                theirs = segments.decode_manifest(there)
            except ValueError:
                theirs = None
            if theirs == manifest:
                return True  # this epoch's own earlier attempt, whose answer was lost
            if theirs is not None and theirs.epoch > self._stats.epoch:
                self._fence(f"manifest {manifest.manifest} is a newer archiver's "
                            f"(epoch {theirs.epoch})")  # fmt: skip
            else:
                log.info("archiver: manifest %d of %s was written by another writer first; "
                         "compaction goes on from it", manifest.manifest,
                         self.replica.describe())  # fmt: skip
            return False

    async def _clean_up(self) -> None:
        """Delete what the manifest before the newest has superseded (the epoch's holder only)."""
        if await self._newer_epoch():
            return
        contents = await self._replica(partial(read_contents, previous=True), self.replica)
        doomed = contents.garbage()
        if doomed:
            await self._replica(self.replica.delete, doomed)
            self._count(deleted=self._stats.deleted + len(doomed))

    async def final_segment(self, within_s: float) -> int:
        """A clean stop: write every committed row not yet replicated now, as a last segment
        (several when they are more than ``segment_rows``), shielded for at most ``within_s``
        seconds; returns the segments written. One try, no backoff: when the replica is down,
        fails, or does not answer in time, the rows stay in the local archive for the next start,
        and one line says so. Nothing is written by a fenced replicator."""
        written, why = 0, None
        with trio.CancelScope(shield=True, deadline=trio.current_time() + within_s) as scope:
            async with self._replicating:
                if self._stats.fenced is not None or not await self._unreplicated():
                    return 0
                if not self._stats.replicating:  # no epoch yet: the replica never answered
                    why = self._stats.replica_error or "the replica has not answered yet"
                while why is None:
                    try:
                        n = await self._replicate(force=True)
                    except Exception as exc:  # the replica's own errors: OSError, boto's, ...
                        self._count(replica_errors=self._stats.replica_errors + 1,
                                    replica_error=one_line(exc))  # fmt: skip
                        why = self._stats.replica_error
                        break
                    if not n:
                        break
                    written += 1
                left = await self._unreplicated()
                if left and why is None and self._stats.fenced is None:
                    why = "the replica was busy"
        if scope.cancelled_caught:
            left, why = -1, f"no answer within {within_s:g} s"
        if left and why is not None:
            log.warning("archiver: stopping with committed rows not replicated to %s (%s); they "
                        "are kept in %s and follow at the next start", self.replica.describe(),
                        why, self.store.path)  # fmt: skip
        return written

    async def _unreplicated(self) -> int:
        """How many rows (at most) are committed but not replicated."""
        upto = int(await self.store.get_meta("replicated_seq", "0") or 0)
        return max(await self.store.max_seq() - upto, 0)


def _header_or_none(data: bytes) -> segments.Header | segments.CompactedHeader | None:
    try:
        return segments.header_of(data)
    except ValueError:
        return None


def restore(replica: Replica, db_path: str | Path) -> int:
    """Rebuild the database at ``db_path`` from the replica (blocking): the newest manifest's
    objects, then every segment after it, in order, in one transaction: a failure part way
    leaves the database as it was. An object deleted while it reads (a compaction's clean-up
    after two newer manifests) makes it start again from the newest manifest, up to
    ``RESTORE_TRIES`` times. Returns the rows restored."""
    for attempt in range(1, RESTORE_TRIES + 1):
        try:
            return _restore(replica, db_path)
        except NoSuchName:
            if attempt == RESTORE_TRIES:
                raise
    raise AssertionError("unreachable")


def _restore(replica: Replica, db_path: str | Path) -> int:
    contents = read_contents(replica)
    db = ArchiveDB(db_path)
    try:
        total = 0
        replicated = 0
        with db.transaction() as cur:
            for name in contents.live:
                with replica.reader(name) as piece:  # a compacted object is read in parts
                    for rows in segments.read_rows(piece):
                        seqs = [seq for seq, _ in rows]
                        total += db.insert_in(cur, [row for _, row in rows], seqs).written
                        replicated = max(replicated, seqs[-1])
                db.set_meta_in(cur, {"segment": str(segments.span(name)[1]),
                                     "replicated_seq": str(replicated)})  # fmt: skip
        return total
    finally:
        db.close()
