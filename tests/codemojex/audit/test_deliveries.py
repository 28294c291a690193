"""The archive counts every delivery of a notice (pure folding and SQLite, no server): a second
delivery adds to the notice's row instead of being dropped, a replayed record does not, an ack
made without sending does not; an archive of the older layout is upgraded once by a writer
and read as it is by a reader; the count travels through the replica and a restore."""

import sqlite3
from pathlib import Path

import attrs

from codemojex.audit import ArchiveDB, AuditRow, fold, read_archive, restore
from codemojex.audit.archive import SCHEMA, UPGRADES, Inserted
from codemojex.audit.replica import DirectoryReplica
from codemojex.audit.rows import COLUMNS, NOT_SENT_AGAIN
from codemojex.audit.segments import encode, segment_name
from codemojex.notify.notice import DeliveryNote, encode_note
from echomq_trio.audit import AuditOutcome, AuditRecord

NOTICE = "NOT0ST3A7fpq01"
PAYLOAD = b'{"chat": 7, "text": "hi", "opts": {}, "id": "NOT0ST3A7fpq01"}'


def record(outcome: AuditOutcome, settled_ms: int, note: str = "", error: str = "") -> AuditRecord:
    return AuditRecord(f"{settled_ms}-0", "JOB0ST3A7fpq01", outcome, 1, settled_ms, PAYLOAD,
                       note, error)  # fmt: skip


def delivered(settled_ms: int, message_id: int = 5, *, already: bool = False) -> AuditRecord:
    note = encode_note(DeliveryNote(7, message_id, already_delivered=already))
    return record(AuditOutcome.ACKED, settled_ms, note)


def test_a_record_folds_into_a_row_with_its_deliveries() -> None:
    sent, unsent, dropped = fold([
        delivered(10), delivered(20, already=True),
        record(AuditOutcome.DROPPED, 30, error="403 blocked"),
    ])  # fmt: skip
    assert (sent.outcome, sent.deliveries, sent.unsent) == ("delivered", 1, False)
    assert (unsent.outcome, unsent.deliveries, unsent.unsent) == ("delivered", 0, True)
    assert unsent.reason == NOT_SENT_AGAIN and unsent.message_id == 5
    assert (dropped.outcome, dropped.deliveries) == ("dropped", 0)


def test_every_delivery_counts_and_nothing_else_does(tmp_path: Path) -> None:
    db = ArchiveDB(tmp_path / "a.sqlite")
    try:
        assert db.insert_counted(fold([delivered(10)])) == Inserted(1, 0)
        assert db.insert_counted(fold([delivered(10)])) == Inserted(0, 0)  # a replayed batch
        assert db.insert_counted(fold([delivered(20, 6)])) == Inserted(1, 1)  # sent again
        (row,) = db.query()
        assert (row.deliveries, row.message_id, row.settled_ms) == (2, 6, 20)
        assert db.rows_after(1, 10)[0][0] == 2  # a new sequence number: replicated again
        # The worker acked it unsent (the ledger knew): the row stays as it is.
        assert db.insert_counted(fold([delivered(30, already=True)])) == Inserted(0, 0)
        assert db.query() == [row]
        # An earlier record folded late is taken for one folded already: not counted.
        assert db.insert_counted(fold([delivered(15)])) == Inserted(0, 0)
        # A later settlement that is not a delivery keeps the count.
        db.insert(fold([record(AuditOutcome.DROPPED, 40, error="403 blocked")]))
        (row,) = db.query()
        assert (row.outcome, row.deliveries) == ("dropped", 2)
        assert db.delivery(NOTICE) == (7, None)  # delivered before (the drop has no message id)
        assert db.delivery_counts() == (2, 1)
    finally:
        db.close()


def test_an_unsent_ack_of_a_notice_the_archive_lacks_is_kept_as_delivered(tmp_path: Path) -> None:
    db = ArchiveDB(tmp_path / "a.sqlite")
    try:
        db.insert(fold([delivered(30, already=True)]))
        (row,) = db.query()
        assert (row.outcome, row.deliveries) == ("delivered", 0)
        assert db.delivery(NOTICE) == (7, 5) and db.delivery_counts() == (0, 0)
        assert db.delivery("NOT0ST3A7fpq02") is None
    finally:
        db.close()


def old_archive(path: Path) -> None:
    """An archive as written before the count existed: the base layout, version 0."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA)
    base = [c for c in COLUMNS if c != "deliveries"]
    for n, outcome in enumerate(["delivered", "dead", "delivered"], 1):
        row = AuditRow(f"NOT0ST3A7fpq0{n}", f"JOB0ST3A7fpq0{n}", 7, outcome, n, 1, None, 1,
                       10 * n, "t")  # fmt: skip
        values = [getattr(row, c) for c in base]
        conn.execute(f"INSERT INTO notices ({', '.join(base)}) VALUES "
                     f"({', '.join('?' * len(base))})", values)  # fmt: skip
    conn.close()


def test_an_older_archive_is_read_as_it_is_and_upgraded_once_by_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    old_archive(path)
    before = path.read_bytes()

    def look(db: ArchiveDB) -> tuple[int, list[int], tuple[int, int], object]:
        return db.version(), [r.deliveries for r in db.query()], db.delivery_counts(), \
            db.delivery("NOT0ST3A7fpq02")  # fmt: skip

    assert read_archive(path, look) == (0, [1, 0, 1], (2, 0), None)
    assert path.read_bytes() == before, "a reader changes nothing"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.sqlite"]

    db = ArchiveDB(path)
    try:
        assert look(db) == (len(UPGRADES), [1, 0, 1], (2, 0), None)
        db.insert(fold([delivered(50)]))  # NOT…01 delivered again
        assert [r.deliveries for r in db.query()] == [0, 1, 2]  # by settled time
    finally:
        db.close()
    db = ArchiveDB(path)  # opened again: nothing to upgrade
    try:
        assert db.version() == len(UPGRADES) and db.delivery_counts() == (3, 1)
    finally:
        db.close()


def test_the_count_travels_through_the_replica_and_a_restore(tmp_path: Path) -> None:
    first = fold([delivered(10)])[0]
    again = attrs.evolve(first, message_id=6, settled_ms=20, deliveries=2)
    other = attrs.evolve(first, notice_id="NOT0ST3A7fpq02", settled_ms=11)
    replica = DirectoryReplica(tmp_path / "replica")
    older = encode(1, 1, [(1, first), (2, other)])
    assert b'"deliveries"' not in older  # rows read as they always were
    newer = encode(2, 1, [(3, again)])
    assert b'"deliveries": 2' in newer
    replica.put_new(segment_name(1), older)
    replica.put_new(segment_name(2), newer)
    restore(replica, tmp_path / "restored.sqlite")
    db = ArchiveDB(tmp_path / "restored.sqlite")
    try:
        got = {r.notice_id: r.deliveries for r in db.query()}
        assert got == {NOTICE: 2, "NOT0ST3A7fpq02": 1}  # carried as written, not added up
    finally:
        db.close()
