"""``Ledger``: the audit archive, consulted before a notice is sent, once the server's data has
gone back in time.

Theory of operation:

* A repair of the server's append-only file (``echomq repair``) cuts it at its damage, and a
  restore (``echomq restore``) puts an older copy in place: either way, notices delivered and
  acked after that point are pending again on the server, and would be sent a second time. The
  archive (``audit.sqlite``) was not cut: it is the ledger of what was delivered.
* Each repair and restore is recorded with its time in the data directory
  (``echomq_trio.repair``). Only notices minted before the latest one can have been delivered
  before it; notice ids are time-ordered snowflakes, so ``covers`` is a comparison of the id's
  mint time with that time (an id that is not a valid one is covered). Notices minted after it,
  and every notice when no repair or restore was ever recorded, cost nothing.
* For a covered notice, ``delivered`` looks it up in the archive: the chat and message id of
  its delivery when the archive records one, else ``None``. The worker acks a notice found
  delivered without sending it, with a note that says so (the archive's fold does not count
  that as a delivery).
* SQLite is blocking: each lookup runs in a ``trio.to_thread`` worker, one at a time (a
  ``CapacityLimiter`` of one; the connection is used by one thread at a time), on a read-only
  connection beside the archiver's. A lookup is not abandoned when its caller is cancelled
  (an indexed read by notice id: short). An archive that cannot be read (missing, damaged, the
  disk) is said in one log line per outage, and the notice is sent: a notice lost would be
  worse than one sent twice, and a re-send shows in the archive (``deliveries``).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
from types import TracebackType

import attrs
import trio

from codemojex.audit.archive import ArchiveDB, NotAnArchive, open_reader
from codemojex.stats import added
from echomq_trio import ids
from echomq_trio.repair import rewound_at_ms
from servicekit import humane

__all__ = ["ArchivedDelivery", "Ledger", "LedgerStats"]

log = logging.getLogger(__name__)


@attrs.frozen
class ArchivedDelivery:
    """A delivery the archive records: the chat reached and Telegram's message id."""

    chat: int | None
    message_id: int | None


@attrs.frozen
class LedgerStats:
    consulted: int = 0  # notices looked up (minted before the latest repair or restore)
    found: int = 0  # of them, recorded as delivered
    failed: int = 0  # lookups the archive could not answer (the notice was sent)


class Ledger:
    """``async with Ledger(db_path, since_ms) as ledger``; ``since_ms`` is when the server's data
    last went back (``None``: never, and the ledger is never consulted). ``for_data_dir`` reads
    it from a data directory."""

    def __init__(self, db_path: str | os.PathLike[str] | None, since_ms: int | None) -> None:
        self.db_path = None if db_path is None else Path(db_path)
        self.since_ms = since_ms if db_path is not None else None
        self._limiter = trio.CapacityLimiter(1)
        self._db: ArchiveDB | None = None
        self._stats = LedgerStats()
        self._failing = False

    @classmethod
    def for_data_dir(
        cls, data_dir: str | os.PathLike[str], db_path: str | os.PathLike[str] | None
    ) -> Ledger:
        """The ledger of the service whose data directory is ``data_dir`` and whose archive is
        ``db_path`` (``None``: no archive, so nothing to consult; said in one log line if the
        data went back)."""
        since = rewound_at_ms(data_dir)
        if since is not None and db_path is None:
            log.warning("the server's data in %s went back at %s (a repair or restore), and no "
                        "audit archive is kept: notices from before then may be sent again",
                        data_dir, humane.iso(since))  # fmt: skip
        return cls(db_path, since)

    def statistics(self) -> LedgerStats:
        return self._stats

    def covers(self, notice_id: str) -> bool:
        """Whether ``notice_id`` may have been delivered before the server's data went back
        (pure): minted before then, or not an id with a mint time."""
        if self.since_ms is None:
            return False
        if not ids.is_valid(notice_id):
            return True
        return ids.timestamp_ms(notice_id) <= self.since_ms

    async def delivered(self, notice_id: str) -> ArchivedDelivery | None:
        """The delivery of ``notice_id`` the archive records, if it ``covers`` the notice and the
        archive records one; else ``None`` (also when the archive cannot be read: logged)."""
        if not self.covers(notice_id):
            return None
        self._count(consulted=1)
        try:
            found = await trio.to_thread.run_sync(self._lookup, notice_id, limiter=self._limiter)
        except (sqlite3.Error, NotAnArchive, OSError) as exc:
            self._count(failed=1)
            if not self._failing:
                self._failing = True
                log.warning("cannot read the audit archive %s to tell whether notices from "
                            "before the repair were delivered; sending them: %s",
                            self.db_path, exc)  # fmt: skip
            return None
        if self._failing:
            self._failing = False
            log.warning("the audit archive %s answers again", self.db_path)
        if found is None:
            return None
        self._count(found=1)
        return ArchivedDelivery(*found)

    def _lookup(self, notice_id: str) -> tuple[int | None, int | None] | None:
        if self._db is None:
            assert self.db_path is not None  # covers() is false without one
            self._db = open_reader(self.db_path)
        try:
            return self._db.delivery(notice_id)
        except sqlite3.Error:
            self._db.close()  # open again at the next lookup
            self._db = None
            raise

    def _count(self, **more: int) -> None:
        self._stats = added(self._stats, **more)

    async def aclose(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await trio.to_thread.run_sync(db.close, limiter=self._limiter)

    async def __aenter__(self) -> Ledger:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
            await self.aclose()

    def describe(self) -> str | None:
        """One line for the service's first screen, or ``None`` when never consulted."""
        if self.since_ms is None:
            return None
        return (f"notices from before {humane.iso(self.since_ms)} (the server's data went back "
                f"then: a repair or restore) are checked against {self.db_path} before "
                "sending")  # fmt: skip
