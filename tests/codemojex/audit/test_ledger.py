"""The ledger (``codemojex.audit.Ledger``) against a real SQLite archive, no server: only notices
minted before the server's data last went back are looked up; one the archive records as
delivered is found, others are not; an archive that cannot be read is said once and the
notice is sent."""

import logging
from pathlib import Path

import pytest

from codemojex.audit import ArchiveDB, ArchivedDelivery, AuditRow, Ledger, LedgerStats
from echomq_trio import ids
from echomq_trio._aof import RepairRecord, encode_record

REPAIRED_MS = 1_796_000_000_000


def minted(at_ms: int) -> str:
    return ids.IdMinter(7).generate("NOT", at_ms)  # a minter of its own: never later than asked


def row(notice_id: str, outcome: str, message_id: int | None) -> AuditRow:
    return AuditRow(notice_id, "JOB" + notice_id[3:], 42, outcome, message_id, 1, None, 1,
                    REPAIRED_MS - 500, "t")  # fmt: skip


def test_only_notices_from_before_the_data_went_back_are_covered() -> None:
    ledger = Ledger("unused.sqlite", REPAIRED_MS)
    assert ledger.covers(minted(REPAIRED_MS - 1))
    assert not ledger.covers(minted(REPAIRED_MS + 1))
    assert ledger.covers("not-an-id")  # no mint time: looked up
    assert not Ledger("unused.sqlite", None).covers(minted(REPAIRED_MS - 1))
    assert not Ledger(None, REPAIRED_MS).covers(minted(REPAIRED_MS - 1))  # no archive


def test_the_time_comes_from_the_data_directorys_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert Ledger.for_data_dir(tmp_path, tmp_path / "a.sqlite").since_ms is None
    lines = [RepairRecord("repair", REPAIRED_MS - 10), RepairRecord("restore", REPAIRED_MS)]
    (tmp_path / "repairs.jsonl").write_text("".join(encode_record(r) + "\n" for r in lines))
    ledger = Ledger.for_data_dir(tmp_path, tmp_path / "a.sqlite")
    assert ledger.since_ms == REPAIRED_MS
    described = ledger.describe()
    assert described is not None and "a.sqlite" in described
    with caplog.at_level(logging.WARNING):
        assert Ledger.for_data_dir(tmp_path, None).since_ms is None
    assert "no audit archive is kept" in caplog.text


async def test_a_notice_the_archive_records_as_delivered_is_found(tmp_path: Path) -> None:
    sent, dead, unknown = (minted(REPAIRED_MS - n) for n in (3, 2, 1))
    db = ArchiveDB(tmp_path / "a.sqlite")  # the archiver's connection, open meanwhile
    db.insert([row(sent, "delivered", 77), row(dead, "dead", None)])
    try:
        async with Ledger(tmp_path / "a.sqlite", REPAIRED_MS) as ledger:
            assert await ledger.delivered(sent) == ArchivedDelivery(42, 77)
            assert await ledger.delivered(dead) is None
            assert await ledger.delivered(unknown) is None
            assert await ledger.delivered(minted(REPAIRED_MS + 5)) is None  # not looked up
            assert ledger.statistics() == LedgerStats(consulted=3, found=1)
            later = minted(REPAIRED_MS - 4)
            db.insert([row(later, "delivered", 78)])  # folded since: seen at once
            assert await ledger.delivered(later) == ArchivedDelivery(42, 78)
    finally:
        db.close()


async def test_an_archive_that_cannot_be_read_is_said_once_and_the_notice_is_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "a.sqlite"
    notice = minted(REPAIRED_MS - 1)
    async with Ledger(path, REPAIRED_MS) as ledger:
        with caplog.at_level(logging.WARNING):
            assert await ledger.delivered(notice) is None
            assert await ledger.delivered(notice) is None
        assert caplog.text.count("cannot read the audit archive") == 1
        assert ledger.statistics().failed == 2
        db = ArchiveDB(path)  # the archive appears: read from then on
        db.insert([row(notice, "delivered", 9)])
        try:
            assert await ledger.delivered(notice) == ArchivedDelivery(42, 9)
        finally:
            db.close()
