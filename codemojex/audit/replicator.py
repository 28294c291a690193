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
* A clean stop writes a final segment: once the folder has drained, ``final_segment`` writes
  every committed row not yet replicated, at once (shielded, with a deadline). One try: a replica
  that is down, fails, or does not answer in time leaves them in the local archive for the next
  start, said in one log line; nothing is lost.
* ``restore`` rebuilds a database from the segments, in order, in one transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from codemojex.audit import segments
from codemojex.audit.archive import ArchiveDB, ArchiveStore
from codemojex.audit.folder import one_line
from codemojex.audit.replica import NameTaken, Replica, ReplicaBusy
from echomq_trio.backoff import Exponential, Jitter, Policy, delay_ms, reconnect_delay_s

__all__ = ["DEFAULT_REPLICA_RETRY", "Replicator", "ReplicatorStats", "restore"]

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_REPLICA_RETRY: Policy = Jitter(Exponential(500, 30_000))


@attrs.frozen
class ReplicatorStats:
    segments: int = 0  # segments this replicator wrote
    epoch: int = 0  # 0 until claimed
    fenced: str | None = None
    replicating: bool = False  # the epoch is held and the archive reconciled with the replica
    replica_down_since: float | None = None  # Unix time the current outage began
    replica_error: str | None = None  # the latest failure, one line
    replica_errors: int = 0  # failed replica calls, all outages


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
    ) -> None:
        self.store = store
        self.replica = replica
        self.holder = holder  # who claims epochs: the archiver's name
        self.segment_rows = segment_rows
        self.segment_every_s = segment_every_s
        self.poll_s = poll_s
        self.retry = retry
        self.reconciled = trio.Event()  # the epoch is held and the replica asked
        self._stats = ReplicatorStats()
        self._limiter = trio.CapacityLimiter(1)  # replica calls, one at a time
        self._last_cut = 0.0
        self._next_epoch_check = 0.0
        self._replicating = trio.Lock()  # one segment at a time, whoever asks
        self._new_db = False
        self._failures = 0  # consecutive failed replica calls

    def statistics(self) -> ReplicatorStats:
        return self._stats

    def reset(self) -> None:
        """A new run is a new start: a new epoch, the replica asked again."""
        self._stats = attrs.evolve(self._stats, epoch=0, fenced=None, replicating=False)
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
        names = await self._replica(self.replica.names, segments.SEGMENTS)
        last = max((segments.number(x) for x in names), default=0)
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
            raw = await self._replica(self.replica.get, segments.segment_name(last))
            header = segments.decode_header(raw)
            await self.store.set_meta({"segment": str(last),
                                       "replicated_seq": str(header.last_seq)})  # fmt: skip
        elif mine > last:
            log.warning("archiver: replica %s has segments up to %d but this archive wrote up to "
                        "%d: the replica lost segments, or it is not this archive's replica",
                        self.replica.describe(), last, mine)  # fmt: skip

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
            names = await self._replica(self.replica.names, segments.EPOCHS)
            newest = max((segments.number(x) for x in names), default=0)
            if newest > self._stats.epoch:
                self._fence(f"a newer archiver holds epoch {newest} (this one holds "
                            f"{self._stats.epoch})")  # fmt: skip
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
        self._count(segments=self._stats.segments + 1)
        self._last_cut = trio.current_time()
        return n

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


def _header_or_none(data: bytes) -> segments.Header | None:
    try:
        return segments.decode_header(data)
    except ValueError:
        return None


def restore(replica: Replica, db_path: str | Path) -> int:
    """Rebuild the database at ``db_path`` from the replica's segments, in order (blocking), in
    one transaction: a failure part way leaves the database as it was. Returns the rows
    restored."""
    db = ArchiveDB(db_path)
    try:
        total = 0
        replicated = 0
        with db.transaction() as cur:
            for name in sorted(replica.names(segments.SEGMENTS), key=segments.number):
                segment = segments.decode(replica.get(name))
                seqs = [seq for seq, _ in segment.rows]
                total += db.insert_in(cur, [row for _, row in segment.rows], seqs)
                replicated = max([replicated, *seqs])
                db.set_meta_in(cur, {"segment": str(segments.number(name)),
                                     "replicated_seq": str(replicated)})  # fmt: skip
        return total
    finally:
        db.close()
