"""``Folder``: the audit stream into the local archive: read → SQLite → acknowledge → trim.

Theory of operation:

* It reads the queue's audit stream with a consumer group (``archiver``): first this consumer's
  own unacknowledged entries (after a crash and restart), then entries a crashed peer left idle
  for ``min_idle_ms`` (``XAUTOCLAIM``, at start and every ``min_idle_ms / 2``), then new ones.
* The group's members stay bounded: a consumer is named per process, so each run leaves its name
  in the group. After each ``XAUTOCLAIM`` pass (the first at start, once this consumer's own
  pending entries are read), the members that hold nothing and have been idle for more than
  ``forget_idle_ms`` are removed (``audit.forget_idle_readers``, one script: a member is never
  removed with entries). A member that still holds entries is taken over first, and goes at a
  later pass. A batch is folded into SQLite and
  committed, then acknowledged, then the stream is trimmed below what every reader of the group
  has committed (one script, never a blind cap). A crash between commit and acknowledge replays
  the batch; inserts are idempotent by notice id and settlement time, and a later delivery of a
  notice already delivered is counted on its row (``resent``, and one log line per batch).
* It needs only the server and the local disk. Server trouble is logged once (and once when it
  is over) and retried every ``poll_s``; so is a local disk too full for SQLite to commit a
  batch (the batch, unacknowledged, is read again: a full disk is an outage, not an exit).
* While ``may_read()`` is false (the archiver's epoch is fenced) it leaves the stream to the
  epoch's holder.
* Cancellation (a clean stop) drains: folding goes on while the workers that stop alongside
  settle their last notices, until the stream has been quiet for ``drain_quiet_s`` with no job
  held, at most ``drain_max_s`` (a shield with that deadline). So after a clean stop the archive
  has a row for every settled notice. A crash leaves the records in the stream for the next
  start.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence

import attrs
import trio

from codemojex.audit.archive import ArchiveStore
from codemojex.audit.rows import fold
from echomq_trio import Bus, BusError, audit, jobs

__all__ = ["DEFAULT_FORGET_IDLE_MS", "GROUP", "Folder", "FolderStats", "one_line"]

log = logging.getLogger(__name__)

GROUP = "archiver"
# A member of the group that holds nothing and has been idle this long is a past run's (a live
# archiver reads every poll_s): it is removed from the group.
DEFAULT_FORGET_IDLE_MS = 600_000


def one_line(exc: BaseException) -> str:
    """An error as one short line, for a log."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


@attrs.frozen
class FolderStats:
    archived: int = 0  # rows inserted (new)
    resent: int = 0  # deliveries of notices already recorded as delivered (sent again)
    acknowledged: int = 0  # stream entries committed and acked
    forgotten: int = 0  # members of past runs removed from the group
    folding: bool = False  # reading the stream (not while a new database waits for the replica)


class Folder:
    """Run with ``await folder.run()`` once ``prepare`` is done and the store is open; cancel
    to stop (it drains first)."""

    def __init__(
        self,
        bus: Bus,
        store: ArchiveStore,
        *,
        queue: str,
        consumer: str,
        batch: int = 500,
        min_idle_ms: int = 30_000,
        forget_idle_ms: int = DEFAULT_FORGET_IDLE_MS,
        poll_s: float = 0.2,
        drain_quiet_s: float = 0.5,
        drain_max_s: float = 5.0,
        may_read: Callable[[], bool] = lambda: True,
    ) -> None:
        self.bus = bus
        self.store = store
        self.queue = queue
        self.consumer = consumer
        self.batch = batch
        self.min_idle_ms = min_idle_ms
        self.forget_idle_ms = forget_idle_ms
        self.poll_s = poll_s
        self.drain_quiet_s = drain_quiet_s
        self.drain_max_s = drain_max_s
        self.may_read = may_read
        self._stats = FolderStats()
        self._server_down = False

    def statistics(self) -> FolderStats:
        return self._stats

    def reset(self) -> None:
        """A new run: not folding until ``run``."""
        self._stats = attrs.evolve(self._stats, folding=False)

    async def prepare(self) -> None:
        """Have the queue keep an audit stream, and the stream a consumer group for us."""
        await audit.enable(self.bus, self.queue)
        await audit.create_group(self.bus, self.queue, GROUP, "0")

    async def run(self) -> None:
        """Fold until cancelled, then drain (see the module docstring)."""
        self._stats = attrs.evolve(self._stats, folding=True)
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
                if self.may_read():
                    if own_pending:
                        got = await self._fold(await self._read(pending=True))
                        own_pending = got >= self.batch
                    if trio.current_time() >= next_autoclaim:
                        next_autoclaim = trio.current_time() + self.min_idle_ms / 2000
                        got += await self._fold(await audit.autoclaim(
                            self.bus, self.queue, GROUP, self.consumer, self.min_idle_ms,
                            self.batch))  # fmt: skip
                        await self._forget_past_members()
                    got += await self._fold(await self._read())
                self._server_ok()
            except BusError as exc:
                self._server_failed(exc)
                got = 0
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_FULL:
                    raise
                self._server_failed(exc)  # the local disk is full: wait, as for the server's
                own_pending, got = True, 0  # what was read and not committed: read it again
            if got == 0:
                await trio.sleep(self.poll_s)

    async def _drain(self) -> None:
        # Fold what the stream gets while the workers stop (their last acks append records), until
        # it has been quiet for ``drain_quiet_s`` and no job is held; the caller's deadline bounds
        # it. A batch cut short by that deadline stays pending for the next start.
        if not self.may_read():
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
                    # The last jobs may have been acked between the read above and the count
                    # (each ack appends its record in the same step): read once more, and stop
                    # only when that read is empty too.
                    if not await self._fold(await self._read()):
                        return
                    quiet_since = trio.current_time()
                    continue
                await trio.sleep(step)
        except BusError as exc:
            log.warning("archiver: stopped draining the audit stream: %s", one_line(exc))

    async def _forget_past_members(self) -> None:
        gone = await audit.forget_idle_readers(self.bus, self.queue, GROUP, self.forget_idle_ms,
                                               keep=self.consumer)  # fmt: skip
        if gone:
            self._stats = attrs.evolve(self._stats, forgotten=self._stats.forgotten + len(gone))
            log.info("archiver: removed %d idle member(s) of past runs from the group: %s",
                     len(gone), ", ".join(gone))  # fmt: skip

    def _server_failed(self, exc: BusError | sqlite3.OperationalError) -> None:
        if not self._server_down:
            self._server_down = True
            what = "server" if isinstance(exc, BusError) else "audit database"
            log.warning("archiver: %s trouble, retrying every %.1f s: %s", what, self.poll_s,
                        one_line(exc))  # fmt: skip

    def _server_ok(self) -> None:
        if self._server_down:
            self._server_down = False
            log.warning("archiver: the server answers again; folding goes on")

    async def _read(self, *, pending: bool = False) -> list[audit.AuditRecord]:
        return await audit.read(self.bus, self.queue, GROUP, self.consumer, self.batch,
                                pending=pending)  # fmt: skip

    async def _fold(self, records: Sequence[audit.AuditRecord]) -> int:
        if not records:
            return 0
        done = await self.store.insert_counted(fold(records))  # committed (synchronous=FULL)
        self._stats = attrs.evolve(self._stats, archived=self._stats.archived + done.written,
                                   resent=self._stats.resent + done.resent)  # fmt: skip
        if done.resent:
            log.warning("archiver: %d notice(s) delivered again that the archive recorded as "
                        "delivered before (python -m codemojex.audit counts)",
                        done.resent)  # fmt: skip
        # Acknowledge, and trim below what every reader of the group has committed: one script.
        acked = await audit.ack_and_trim(self.bus, self.queue, GROUP,
                                         [r.stream_id for r in records])  # fmt: skip
        self._stats = attrs.evolve(self._stats, acknowledged=self._stats.acknowledged + acked.acked)
        return len(records)
