"""The local audit archive: one SQLite database of settled notices (WAL, ``synchronous=FULL``),
one row per notice id, written idempotently, with the times each was delivered. Blocking: trio
code calls it through ``ArchiveStore``, on one dedicated thread.

Its layout changes by ``UPGRADES``, in order, each once (SQLite's ``user_version`` counts those
done): a writer upgrades a database of an older layout when it opens it; a reader
(``read_archive``) reads an older one as it is, a column it lacks read as its default.

The database file is created mode 0600 (in a directory created 0700 when missing); SQLite gives
its ``-wal`` and ``-shm`` files the same mode. ``read_archive`` reads an archive without writing
anything, not even SQLite's side files.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import attrs
import trio

from codemojex.audit.dedicated import DedicatedThread
from codemojex.audit.rows import COLUMNS, AuditRow
from servicekit.datadir import PRIVATE_FILE_MODE, private_dir

__all__ = [
    "UPGRADES",
    "ArchiveDB",
    "ArchiveStore",
    "Inserted",
    "NotAnArchive",
    "open_reader",
    "read_archive",
]

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS notices (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    notice_id TEXT NOT NULL UNIQUE,
    job_id TEXT NOT NULL,
    chat INTEGER,
    outcome TEXT NOT NULL,
    message_id INTEGER,
    attempts INTEGER NOT NULL,
    reason TEXT,
    enqueued_ms INTEGER,
    settled_ms INTEGER NOT NULL,
    text TEXT
);
CREATE INDEX IF NOT EXISTS notices_by_chat ON notices (chat, settled_ms);
CREATE INDEX IF NOT EXISTS notices_by_time ON notices (settled_ms);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# Changes of the layout after SCHEMA (version 0), in order: the n-th takes a database from
# version n - 1 to n, in one transaction with the version's bump. A new database takes them all.
UPGRADES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("deliveries: the times each notice was delivered (1 for each delivered row so far)", (
        "ALTER TABLE notices ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0",
        "UPDATE notices SET deliveries = 1 WHERE outcome = 'delivered'",
    )),
)  # fmt: skip
# How a reader reads a column that a database of an older layout lacks.
DEFAULTS = {"deliveries": "(outcome = 'delivered')"}


# The page cache of a writing connection, at most (SQLite's default is 2,000 KiB). The archiver
# appends: what it reads and writes again is the b-trees' upper pages and their newest leaves.
# The cache fills as the database grows, so a smaller bound is reached sooner, and stays.
CACHE_KIB = 512


@attrs.frozen
class Inserted:
    """What an insert did: ``written`` rows (new, or a later settlement replacing a notice's
    row), of which ``resent`` were a delivery of a notice already recorded as delivered."""

    written: int = 0
    resent: int = 0


class NotAnArchive(ValueError):
    """The file is not an audit archive (not SQLite, or without the archive's tables): check the
    path."""


def _create_private(path: Path) -> None:
    # The file exists, 0600, before SQLite opens it; a missing parent is created 0700. An existing
    # parent is left as it is (it may be shared, or not ours to tighten).
    if not path.parent.exists():
        private_dir(path.parent)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE))


class ArchiveDB:
    """Blocking SQLite access; one instance per thread of use (see ``ArchiveStore``).

    Opening creates the database (0600) and its tables if missing; ``read_archive`` opens one
    read-only instead."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        _create_private(self.path)
        self.conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA busy_timeout=10000")
        self.conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self.conn.executescript(SCHEMA)
        self._upgrade()
        self._read_layout()

    @classmethod
    def _over(cls, path: Path, conn: sqlite3.Connection) -> ArchiveDB:
        db = cls.__new__(cls)
        db.path, db.conn = path, conn
        db._read_layout()
        return db

    def _read_layout(self) -> None:
        # The select lists of this database's layout (an older one read by a reader: DEFAULTS).
        self.columns = ", ".join(_column(self.conn, name) for name in COLUMNS)
        self._deliveries = _column(self.conn, "deliveries")

    def _upgrade(self) -> None:
        """Bring the layout up to date (``UPGRADES``), each step once."""
        while (version := self.version()) < len(UPGRADES):
            with self.transaction() as cur:
                if cur.execute("PRAGMA user_version").fetchone()[0] != version:
                    continue  # another writer did it meanwhile
                for statement in UPGRADES[version][1]:
                    cur.execute(statement)
                cur.execute(f"PRAGMA user_version = {version + 1}")

    def version(self) -> int:
        """The layout's version: how many of ``UPGRADES`` it has had."""
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction: committed when the block ends, rolled back if it raises."""
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:  # SQLite rolled back by itself (a full disk): none left
                cur.execute("ROLLBACK")
            raise

    def insert(self, rows: Sequence[AuditRow], seqs: Sequence[int] | None = None) -> int:
        """``insert_counted``; returns how many rows were written."""
        return self.insert_counted(rows, seqs).written

    def insert_counted(
        self, rows: Sequence[AuditRow], seqs: Sequence[int] | None = None
    ) -> Inserted:
        """Insert rows in one committed transaction, one row per notice (see ``insert_in``)."""
        with self.transaction() as cur:
            return self.insert_in(cur, rows, seqs)

    def insert_in(
        self, cur: sqlite3.Cursor, rows: Sequence[AuditRow], seqs: Sequence[int] | None = None
    ) -> Inserted:
        """Insert rows inside the caller's ``transaction``, one row per notice.

        Folded rows (no ``seqs``): a record no later than the notice's stored one was folded
        already (a replayed batch) and is skipped; a later one is a new settlement (the notice
        was replayed from the dead set, or sent again after the server's data went back): it
        replaces the row under a new sequence number, so it is replicated again, and its
        deliveries add to the row's (``resent`` counts a delivery of a notice delivered
        before). An ack made without sending (``AuditRow.unsent``) leaves a stored row as it is.

        Restored rows (``seqs``: their original sequence numbers) carry their counts already: a
        later row of a notice replaces the earlier one as it is."""
        marks = ", ".join("?" * len(COLUMNS))
        names = ", ".join(COLUMNS)
        written = resent = 0
        for n, row in enumerate(rows):
            old = cur.execute(
                "SELECT settled_ms, deliveries FROM notices WHERE notice_id = ?", (row.notice_id,)
            ).fetchone()
            if old is not None:
                if row.settled_ms <= old[0] or (seqs is None and row.unsent):
                    continue
                if seqs is None:
                    resent += bool(old[1] and row.deliveries)
                    row = attrs.evolve(row, deliveries=old[1] + row.deliveries)
                cur.execute("DELETE FROM notices WHERE notice_id = ?", (row.notice_id,))
            if seqs is None:
                cur.execute(f"INSERT INTO notices ({names}) VALUES ({marks})", row.as_tuple())
            else:
                cur.execute(f"INSERT INTO notices (seq, {names}) VALUES (?, {marks})",
                            (seqs[n], *row.as_tuple()))  # fmt: skip
            written += 1
        return Inserted(written, resent)

    def rows_after(self, seq: int, limit: int) -> list[tuple[int, AuditRow]]:
        cur = self.conn.execute(
            f"SELECT seq, {self.columns} FROM notices WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, limit),
        )
        return [(r[0], AuditRow(*r[1:])) for r in cur.fetchall()]

    def query(
        self,
        chat: int | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 1000,
    ) -> list[AuditRow]:
        where, args = [], []
        if chat is not None:
            where.append("chat = ?")
            args.append(chat)
        if since_ms is not None:
            where.append("settled_ms >= ?")
            args.append(since_ms)
        if until_ms is not None:
            where.append("settled_ms < ?")
            args.append(until_ms)
        sql = f"SELECT {self.columns} FROM notices"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY settled_ms, seq LIMIT ?"
        return [AuditRow(*r) for r in self.conn.execute(sql, (*args, limit)).fetchall()]

    def counts(self) -> dict[str, int]:
        cur = self.conn.execute("SELECT outcome, COUNT(*) FROM notices GROUP BY outcome")
        return {outcome: n for outcome, n in cur.fetchall()}

    def delivery_counts(self) -> tuple[int, int]:
        """Deliveries in all (every send Telegram accepted, re-sends included), and the notices
        delivered more than once."""
        deliveries = self._deliveries
        total, resent = self.conn.execute(
            f"SELECT COALESCE(SUM({deliveries}), 0), COALESCE(SUM({deliveries} > 1), 0) "
            "FROM notices"
        ).fetchone()
        return int(total), int(resent)

    def delivery(self, notice_id: str) -> tuple[int | None, int | None] | None:
        """``(chat, message_id)`` of notice ``notice_id`` if the archive records it delivered
        (now, or at a settlement before its latest), else ``None``."""
        deliveries = self._deliveries
        found = self.conn.execute(
            f"SELECT chat, message_id FROM notices WHERE notice_id = ? AND "
            f"(outcome = 'delivered' OR {deliveries} > 0)",
            (notice_id,),
        ).fetchone()
        return None if found is None else (found[0], found[1])

    def max_seq(self) -> int:
        return int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM notices").fetchone()[0])

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else str(row[0])

    def set_meta(self, values: Mapping[str, str]) -> None:
        with self.transaction() as cur:
            self.set_meta_in(cur, values)

    def set_meta_in(self, cur: sqlite3.Cursor, values: Mapping[str, str]) -> None:
        """``set_meta`` inside the caller's ``transaction``."""
        cur.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                        list(values.items()))  # fmt: skip


def _column(conn: sqlite3.Connection, name: str) -> str:
    """``name``, or the expression that reads it in a database of an older layout."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(notices)")}
    return name if name in have else DEFAULTS[name]


def open_reader(path: str | Path) -> ArchiveDB:
    """The archive at ``path`` opened read-only beside its writer (blocking; close it when
    done): ``NotAnArchive`` when it is not one, ``sqlite3.OperationalError`` when there is no
    file."""
    return _open_read_only(Path(path), immutable=False)


def _open_read_only(path: Path, immutable: bool) -> ArchiveDB:
    uri = f"file:{quote(str(path.absolute()))}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError:  # not SQLite at all
        tables = set()
    if not {"notices", "meta"} <= tables:
        conn.close()
        raise NotAnArchive(f"{path} is not an audit archive")
    return ArchiveDB._over(path, conn)


def read_archive(path: str | Path, read: Callable[[ArchiveDB], T]) -> T:
    """``read(db)`` on the archive at ``path`` opened read-only (blocking); creates nothing.

    ``FileNotFoundError`` when there is no file, ``NotAnArchive`` when it is not an archive.
    With no ``-wal`` file beside it (no archiver has it open) the database is read as immutable,
    because a read-only SQLite connection would otherwise create the ``-wal`` and ``-shm`` files;
    if a writer opened it meanwhile (a ``-wal`` appeared), the read is done again the usual
    way, through the writer's files."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no archive at {path}")
    wal = Path(f"{path}-wal")
    quiet = not wal.exists()
    db = _open_read_only(path, immutable=quiet)
    try:
        result = read(db)
    except sqlite3.DatabaseError:
        if not (quiet and wal.exists()):
            raise
    else:
        if not (quiet and wal.exists()):
            return result
    finally:
        db.close()
    db = _open_read_only(path, immutable=False)
    try:
        return read(db)
    finally:
        db.close()


class ArchiveStore:
    """``ArchiveDB`` for trio code: every call runs on one dedicated thread, one at a time, from
    ``open`` to ``aclose`` (``dedicated``: so SQLite's memory stays in one ``malloc`` arena)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._thread = DedicatedThread(f"archive {self.path.name}")
        self._db: ArchiveDB | None = None

    async def open(self) -> None:
        self._thread.start()
        try:
            self._db = await self._thread.run(ArchiveDB, self.path)
        except BaseException:
            self._thread.stop()
            raise

    async def aclose(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            try:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
                    await self._thread.run(db.close)
            finally:
                self._thread.stop()

    @property
    def db(self) -> ArchiveDB:
        if self._db is None:
            raise RuntimeError("the archive store is not open")
        return self._db

    async def insert(self, rows: Sequence[AuditRow]) -> int:
        return await self._thread.run(self.db.insert, rows)

    async def insert_counted(self, rows: Sequence[AuditRow]) -> Inserted:
        return await self._thread.run(self.db.insert_counted, rows)

    async def rows_after(self, seq: int, limit: int) -> list[tuple[int, AuditRow]]:
        return await self._thread.run(self.db.rows_after, seq, limit)

    async def get_meta(self, key: str, default: str | None = None) -> str | None:
        return await self._thread.run(self.db.get_meta, key, default)

    async def set_meta(self, values: Mapping[str, str]) -> None:
        await self._thread.run(self.db.set_meta, values)

    async def max_seq(self) -> int:
        return await self._thread.run(self.db.max_seq)
