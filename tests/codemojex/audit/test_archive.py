"""The persistence floor: every settled notice gets exactly one audit row, folded off the hot
path into SQLite and replicated create-only; fencing; restore; replica outages (a real S3 server
process stopped and started again); a clean stop drains; one archiver per database; private
files."""

import json
import logging
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import trio

from codemojex.audit import ArchiveDB, Archiver, AuditRow, fold, read_archive, restore
from codemojex.audit.contents import read_contents
from codemojex.audit.folder import GROUP
from codemojex.audit.replica import DirectoryReplica, NameTaken, Replica, S3Replica, open_replica
from codemojex.audit.segments import segment_name
from codemojex.notify.notifier import notify
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.worker import NotificationWorker
from codemojex.standin.bot_api import Scripted, TelegramStandIn, open_stand_in
from codemojex.telegram.bot import open_bot
from codemojex.telegram.limits import Limits
from echomq_trio import Bus, Exponential, Jitter, Metronome, audit, ids, jobs
from echomq_trio._replies import as_text
from echomq_trio.audit import AuditOutcome, AuditRecord
from echomq_trio.server import free_port
from servicekit.datadir import InUse
from tests.support import ROOT, read_line, spawn, wait_for

pytestmark = pytest.mark.slow

TOKEN = "123456:TEST"
LIMITS = Limits().scaled(20)
FAST_RETRY = Jitter(Exponential(20, 300))  # replica retries for tests: at most 0.3 s apart
T = TypeVar("T")
BLOCKING = trio.CapacityLimiter(1)  # the tests' own sqlite3/boto3 calls, in a worker thread


async def off_thread(fn: Callable[..., T], *args: Any) -> T:
    return await trio.to_thread.run_sync(fn, *args, limiter=BLOCKING)


def rows_of(db_path: Path) -> list[dict[str, object]]:
    db = ArchiveDB(db_path)
    try:
        return [r.as_dict() for r in db.query(limit=100_000)]
    finally:
        db.close()


async def run_pipeline(bus: Bus, queue: str, tg: TelegramStandIn, nursery: trio.Nursery) -> None:
    bot_cm = open_bot(TOKEN, tg.api_url)
    bot = await bot_cm.__aenter__()
    nursery.start_soon(_close_later, bot_cm)
    worker = NotificationWorker(bus, bot, RateLimiter(bus, LIMITS, tag=queue, margin_ms=20),
                                queue=queue)  # fmt: skip
    await nursery.start(worker.run)
    await nursery.start(Metronome(bus, queue, beat_ms=100).run)


async def _close_later(cm) -> None:  # type: ignore[no-untyped-def]
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await cm.__aexit__(None, None, None)


async def _settled(bus: Bus, queue: str) -> bool:
    c = await jobs.counts(bus, queue)
    return c.pending == c.active == c.scheduled == 0


def test_fold_maps_records_to_rows() -> None:
    payload = json.dumps(
        {"chat": 5, "text": "hi", "opts": {}, "id": "NOT0ST3A7fpq0Q", "attempt": 1}
    )
    (delivered, dropped, dead) = fold([
        AuditRecord("1-0", "JOB0ST3A7fpq0Q", AuditOutcome.ACKED, 2, 9, payload.encode(),
                    '{"chat": 7, "message_id": 3}', ""),
        AuditRecord("2-0", "JOB0ST3A7fpq0R", AuditOutcome.DROPPED, 1, 9,
                    payload.replace("0Q", "0R").encode(), "", "chat not found"),
        AuditRecord("3-0", "JOB0ST3A7fpq0S", AuditOutcome.DEAD, 6, 9, b"not json", "", "boom"),
    ])  # fmt: skip
    assert (delivered.outcome, delivered.chat, delivered.message_id, delivered.attempts) == (
        "delivered",
        7,
        3,
        2,
    )  # the chat it reached (after a migration)
    assert delivered.notice_id == "NOT0ST3A7fpq0Q" and delivered.enqueued_ms is not None
    assert (dropped.outcome, dropped.reason, dropped.chat) == ("dropped", "chat not found", 5)
    assert (dead.outcome, dead.notice_id, dead.chat, dead.reason) == (
        "dead",
        "JOB0ST3A7fpq0S",
        None,
        "boom",
    )


@pytest.mark.cluster  # slot routing: see tests/conftest.py
async def test_every_settled_notice_has_one_row_and_the_stream_is_trimmed(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    replica = DirectoryReplica(tmp_path / "replica")
    archiver = Archiver(bus, tmp_path / "audit.sqlite", replica, queue=queue, segment_rows=25,
                        segment_every_s=0.2, poll_s=0.05)  # fmt: skip
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        await nursery.start(archiver.run)  # turns the audit on before anything settles
        tg.script(9, Scripted.forbidden())
        sent = [await notify(bus, chat, f"n{chat}", queue=queue) for chat in range(1, 60)]
        await run_pipeline(bus, queue, tg, nursery)
        await wait_for(lambda: _settled(bus, queue), timeout=60)
        await wait_for(lambda: archiver.statistics().folder.archived == len(sent), timeout=30)
        await wait_for(lambda: archiver.statistics().replicator.segments >= 3, timeout=30)
        await archiver.replicate(force=True)
        nursery.cancel_scope.cancel()
    rows = rows_of(tmp_path / "audit.sqlite")
    assert sorted(r["notice_id"] for r in rows) == sorted(sent)
    by_chat = {r["chat"]: r for r in rows}
    assert by_chat[9]["outcome"] == "dropped" and "blocked" in str(by_chat[9]["reason"])
    assert all(
        r["outcome"] == "delivered" and r["message_id"] for c, r in by_chat.items() if c != 9
    )
    audit_len = await bus.transport.command("XLEN", bus.keys(queue).prefix + "audit")
    assert int(audit_len) == 0, "committed entries must be trimmed from the stream"
    # Every row went to exactly one segment.
    replicated = [json.loads(line)["notice_id"] for name in replica.names("segments/")
                  for line in replica.get(name).decode().splitlines()[1:]]  # fmt: skip
    assert sorted(replicated) == sorted(sent)


@pytest.mark.timeout_s(180)
async def test_archiver_killed_mid_batch_and_restarted_loses_and_doubles_nothing(
    bus: Bus, queue: str, server_url: str, tmp_path: Path
) -> None:
    db, rep = tmp_path / "audit.sqlite", tmp_path / "replica"
    args = ["archive", "--url", server_url, "--queue", queue, "--db", str(db)]
    args += ["--replica", str(rep), "--segment-rows", "20", "--segment-every", "0.2"]
    args += ["--min-idle-ms", "300", "--forget-idle-ms", "200"]
    sent: list[str] = []
    await jobs.set_audit(bus, queue)  # the queue exists on the server, as the service's would
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        async with spawn(*args, module="codemojex.audit") as first:
            assert (await read_line(first)).startswith(f"archiving {queue} ")
            await run_pipeline(bus, queue, tg, nursery)
            for n in range(300):
                sent.append(await notify(bus, 100 + n % 40, f"m{n}", queue=queue))
            await wait_for(lambda: len(tg.deliveries) >= 60, timeout=60)
            first.send_signal(signal.SIGKILL)  # whatever batch it was in the middle of
            await first.wait()
        async with spawn(*args, module="codemojex.audit") as second:
            assert (await read_line(second)).startswith(f"archiving {queue} ")
            await wait_for(lambda: _settled(bus, queue), timeout=90)

            def archived() -> bool:
                return len(rows_of(db)) >= len(sent)

            await wait_for(archived, timeout=60, step=0.2)
            # The killed run's member is taken over and then removed: only this run's is left.
            this_run = f"{socket.gethostname()}-{second.pid}"
            await wait_for(lambda: _members_are(bus, queue, {this_run}), timeout=30)
        nursery.cancel_scope.cancel()
    rows = rows_of(db)
    ids = [r["notice_id"] for r in rows]
    assert len(ids) == len(set(ids)) == len(sent) and set(ids) == set(sent)
    pending = await bus.transport.command("XPENDING", bus.keys(queue).prefix + "audit", "archiver")
    assert int(pending[0]) == 0


async def _members(bus: Bus, queue: str) -> dict[str, int]:
    """The members of the archiver's group on the audit stream, and what each holds."""
    raw = await bus.transport.command("XINFO", "CONSUMERS", bus.keys(queue).audit, GROUP)
    return {as_text(m[b"name"]): int(m[b"pending"]) for m in raw}


async def _members_are(bus: Bus, queue: str, names: set[str]) -> bool:
    return set(await _members(bus, queue)) == names


async def _settle(bus: Bus, queue: str, n: int) -> list[str]:
    """``n`` notices settled (acked) at once, without a worker; their notice ids."""
    sent = [ids.generate("NOT") for _ in range(n)]
    for notice in sent:
        payload = json.dumps({"chat": 1, "text": "t", "opts": {}, "id": notice, "attempt": 1})
        await jobs.enqueue(bus, queue, payload)
    for job in await jobs.claim(bus, queue, n):
        await jobs.ack(bus, queue, job.id, job.token)
    return sent


@pytest.mark.timeout_s(120)
async def test_restarts_do_not_grow_the_group_s_members(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    db, replica = tmp_path / "audit.sqlite", DirectoryReplica(tmp_path / "replica")
    await audit.enable(bus, queue)
    await audit.create_group(bus, queue, GROUP)
    sent = await _settle(bus, queue, 3)
    crashed = await audit.read(bus, queue, GROUP, "crashed-run", 10)  # and never acknowledged
    assert len(crashed) == 3 and await _members(bus, queue) == {"crashed-run": 3}
    forgotten = 0
    for run in range(4):  # each run is named per process; here, per run
        archiver = Archiver(bus, db, replica, queue=queue, consumer=f"run-{run}", min_idle_ms=200,
                            forget_idle_ms=100, poll_s=0.02)  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(archiver.run)
            sent += await _settle(bus, queue, 2)
            # The past run's member goes once what it held is taken over: one member is left.
            await wait_for(partial(_members_are, bus, queue, {f"run-{run}"}), timeout=30)
            await wait_for(partial(off_thread, _archived, db, len(sent)), timeout=30)
            nursery.cancel_scope.cancel()
        forgotten += archiver.statistics().folder.forgotten
    assert forgotten == 4, "crashed-run, run-0, run-1 and run-2"
    assert sorted(r["notice_id"] for r in await off_thread(rows_of, db)) == sorted(sent)
    assert await _members(bus, queue) == {"run-3": 0}


def _archived(db: Path, rows: int) -> bool:
    return read_archive(db, lambda d: d.max_seq() >= rows)


async def test_two_archivers_on_one_replica_the_older_is_fenced(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    # Two hosts (two databases) on one replica: the newer epoch wins, the older stops.
    replica = DirectoryReplica(tmp_path / "replica")
    kw = {"queue": queue, "segment_rows": 10, "segment_every_s": 0.1, "poll_s": 0.05}
    old = Archiver(bus, tmp_path / "a.sqlite", replica, consumer="old", **kw)  # type: ignore[arg-type]
    new = Archiver(bus, tmp_path / "b.sqlite", replica, consumer="new", **kw)  # type: ignore[arg-type]
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        await nursery.start(old.run)
        await wait_for(lambda: old.statistics().replicator.replicating)
        await nursery.start(new.run)  # claims a newer epoch
        await wait_for(lambda: new.statistics().replicator.replicating)
        assert (old.statistics().replicator.epoch, new.statistics().replicator.epoch) == (1, 2)
        await wait_for(lambda: old.statistics().replicator.fenced is not None, timeout=30)
        sent = [await notify(bus, 500 + n, f"x{n}", queue=queue) for n in range(80)]
        await run_pipeline(bus, queue, tg, nursery)
        await wait_for(lambda: _settled(bus, queue), timeout=60)
        await wait_for(lambda: new.statistics().folder.archived == len(sent), timeout=30)
        while await new.replicate(force=True):
            pass
        nursery.cancel_scope.cancel()
    assert "newer archiver" in (old.statistics().replicator.fenced or "")
    assert old.statistics().folder.archived == old.statistics().replicator.segments == 0, (
        "a fenced archiver stops reading"
    )
    assert new.statistics().replicator.fenced is None and new.statistics().replicator.segments >= 1
    names = replica.names("segments/")
    replicated = [json.loads(line)["notice_id"] for name in names
                  for line in replica.get(name).decode().splitlines()[1:]]  # fmt: skip
    assert len(replicated) == len(set(replicated)), "a row was replicated twice"
    assert sorted(replicated) == sorted(sent)
    assert sorted(r["notice_id"] for r in rows_of(tmp_path / "b.sqlite")) == sorted(sent)


async def test_two_archivers_never_fold_into_one_database(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    replica = DirectoryReplica(tmp_path / "replica")
    first = Archiver(bus, tmp_path / "a.sqlite", replica, queue=queue)
    second = Archiver(bus, tmp_path / "a.sqlite", replica, queue=queue, consumer="second")
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        with pytest.raises(InUse, match=f"a.sqlite is in use by process {os.getpid()}"):
            await second.run()
        nursery.cancel_scope.cancel()
    assert second.statistics().replicator.epoch == 0, "refused before it touched the replica"
    async with trio.open_nursery() as nursery:  # once the first has stopped, it may
        await nursery.start(second.run)
        nursery.cancel_scope.cancel()


async def test_a_taken_segment_number_fences_its_writer(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    replica = DirectoryReplica(tmp_path / "replica")
    archiver = Archiver(bus, tmp_path / "db.sqlite", replica, queue=queue, segment_rows=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(archiver.run)
        # The epoch is claimed and the replica reconciled:
        await wait_for(lambda: archiver.statistics().replicator.replicating)
        replica.put_new(segment_name(1), b'{"segment": 1, "last_seq": 0}\n')  # another writer
        await jobs.enqueue(
            bus, queue, '{"chat": 1, "text": "t", "id": "NOT0ST3A7fpq0Q"}', job_id="JOB0ST3A7fpq0Q"
        )
        (job,) = await jobs.claim(bus, queue)
        await jobs.ack(bus, queue, job.id, job.token)
        await wait_for(lambda: archiver.statistics().replicator.fenced is not None, timeout=20)
        nursery.cancel_scope.cancel()
    assert "segment 1 is owned by another writer" in (archiver.statistics().replicator.fenced or "")
    assert replica.get(segment_name(1)) == b'{"segment": 1, "last_seq": 0}\n'  # untouched


async def test_restore_rebuilds_the_same_rows(bus: Bus, queue: str, tmp_path: Path) -> None:
    replica = DirectoryReplica(tmp_path / "replica")
    db = tmp_path / "audit.sqlite"
    archiver = Archiver(bus, db, replica, queue=queue, segment_rows=7, segment_every_s=0.1,
                        poll_s=0.05)  # fmt: skip
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        await nursery.start(archiver.run)
        sent = [await notify(bus, 900 + n, f"r{n}", queue=queue) for n in range(30)]
        await run_pipeline(bus, queue, tg, nursery)
        await wait_for(lambda: archiver.statistics().folder.archived == len(sent), timeout=60)
        while await archiver.replicate(force=True):
            pass
        nursery.cancel_scope.cancel()
    before = rows_of(db)
    for suffix in ("", "-wal", "-shm"):
        await trio.Path(str(db) + suffix).unlink(missing_ok=True)
    assert restore(replica, db) == len(sent)
    assert rows_of(db) == before


# --- S3-compatible storage (moto's server on loopback) ----------------------------------------


def test_s3_segments_are_create_only(s3_replica: S3Replica) -> None:
    s3_replica.put_new("segments/00000000000000000001.jsonl", b"first")
    with pytest.raises(NameTaken):
        s3_replica.put_new("segments/00000000000000000001.jsonl", b"second")
    assert s3_replica.get("segments/00000000000000000001.jsonl") == b"first"
    assert s3_replica.names("segments/") == ["segments/00000000000000000001.jsonl"]


async def test_archiver_replicates_to_s3_and_restores_from_it(
    bus: Bus, queue: str, tmp_path: Path, s3_replica: S3Replica, s3_endpoint: str
) -> None:
    db = tmp_path / "audit.sqlite"
    archiver = Archiver(bus, db, s3_replica, queue=queue, segment_rows=5, segment_every_s=0.1,
                        poll_s=0.05)  # fmt: skip
    rival = Archiver(bus, tmp_path / "rival.sqlite", s3_replica, queue=queue)
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        await nursery.start(archiver.run)
        sent = [await notify(bus, 700 + n, f"s{n}", queue=queue) for n in range(12)]
        await run_pipeline(bus, queue, tg, nursery)
        await wait_for(lambda: archiver.statistics().folder.archived == len(sent), timeout=60)
        while await archiver.replicate(force=True):
            pass
        # A second writer of the next number is refused by the store itself.
        taken = archiver.statistics().replicator.segments
        with pytest.raises(NameTaken):
            await trio.to_thread.run_sync(s3_replica.put_new, segment_name(taken), b"x")
        del rival
        nursery.cancel_scope.cancel()
    spec = f"s3://{s3_replica.bucket}/cm?endpoint={s3_endpoint}"
    restored = tmp_path / "restored.sqlite"
    assert restore(open_replica(spec), restored) == len(sent)
    assert rows_of(restored) == rows_of(db)


class FlakyReplica(DirectoryReplica):
    """A directory replica whose writes fail while ``down`` is set (a real OSError)."""

    down = True

    def put_new(self, name: str, data: bytes) -> None:
        if self.down and name.startswith("segments/"):
            raise OSError("replica unreachable")
        super().put_new(name, data)


async def test_a_failing_replica_does_not_stop_archiving(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    replica = FlakyReplica(tmp_path / "replica")
    archiver = Archiver(bus, tmp_path / "db.sqlite", replica, queue=queue, segment_rows=2,
                        segment_every_s=0.05, poll_s=0.02)  # fmt: skip
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        await nursery.start(archiver.run)
        sent = [await notify(bus, 300 + n, f"f{n}", queue=queue) for n in range(6)]
        await run_pipeline(bus, queue, tg, nursery)
        await wait_for(lambda: archiver.statistics().folder.archived == len(sent), timeout=60)
        await wait_for(lambda: archiver.statistics().replicator.replica_errors > 0)
        replica.down = False  # it comes back: replication catches up
        await wait_for(lambda: archiver.statistics().replicator.segments == 3, timeout=30)
        nursery.cancel_scope.cancel()
    assert archiver.statistics().replicator.fenced is None


async def test_a_new_database_beside_a_replica_starts_from_the_replica(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    replica = DirectoryReplica(tmp_path / "replica")
    first = Archiver(bus, tmp_path / "old.sqlite", replica, queue=queue, segment_rows=3,
                     segment_every_s=0.05, poll_s=0.02)  # fmt: skip
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        await nursery.start(first.run)
        sent = [await notify(bus, 400 + n, f"g{n}", queue=queue) for n in range(6)]
        await run_pipeline(bus, queue, tg, nursery)
        await wait_for(lambda: first.statistics().folder.archived == len(sent), timeout=60)
        while await first.replicate(force=True):
            pass
        nursery.cancel_scope.cancel()
    # A new host: empty database, same replica. It restores before archiving further.
    second = Archiver(bus, tmp_path / "new.sqlite", replica, queue=queue, poll_s=0.02)
    async with trio.open_nursery() as nursery:
        await nursery.start(second.run)
        await wait_for(lambda: second.statistics().folder.folding)  # after the restore
        nursery.cancel_scope.cancel()
    assert sorted(r["notice_id"] for r in rows_of(tmp_path / "new.sqlite")) == sorted(sent)


def test_one_row_per_notice_and_the_latest_settlement_wins(tmp_path: Path) -> None:
    db = ArchiveDB(tmp_path / "a.sqlite")
    base = {"notice_id": "NOT0ST3A7fpq01", "job_id": "JOB0ST3A7fpq01", "chat": 1,
            "message_id": None, "attempts": 6, "enqueued_ms": 1, "text": "t"}  # fmt: skip
    dead = AuditRow(**base, outcome="dead", reason="boom", settled_ms=10)  # type: ignore[arg-type]
    assert db.insert([dead]) == 1
    assert db.insert([dead]) == 0  # the same record again (a replayed batch)
    delivered = AuditRow(**{**base, "message_id": 5, "attempts": 1},  # type: ignore[arg-type]
                         outcome="delivered", reason=None, settled_ms=20)  # fmt: skip
    assert db.insert([delivered]) == 1  # replayed from the dead set, then delivered
    assert [r.outcome for r in db.query()] == ["delivered"]
    assert db.rows_after(1, 10)[0][0] == 2  # a new sequence number: replicated again
    db.close()


def test_a_full_disk_fails_a_batch_with_sqlite_s_own_error_and_a_later_one_commits(
    tmp_path: Path,
) -> None:
    """SQLite rolls a transaction back by itself when the disk is full (``SQLITE_FULL``, which
    the folder waits out): the error is that, not a failed ``ROLLBACK`` of no transaction."""
    db = ArchiveDB(tmp_path / "a.sqlite")
    rows = [AuditRow(f"NOT0ST3A7fpq{i:02d}", f"JOB0ST3A7fpq{i:02d}", 1, "delivered", 5, 1, None,
                     1, 10, "x" * 2000) for i in range(50)]  # fmt: skip
    pages = db.conn.execute("PRAGMA page_count").fetchone()[0]
    db.conn.execute(f"PRAGMA max_page_count = {pages}")  # no room for another page
    with pytest.raises(sqlite3.OperationalError) as full:
        db.insert(rows)
    assert full.value.sqlite_errorcode == sqlite3.SQLITE_FULL, full.value
    assert db.query() == []
    db.conn.execute("PRAGMA max_page_count = 1073741823")  # room again
    assert db.insert(rows) == 50
    db.close()


def test_archive_files_are_private(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)  # the usual umask: without care, files would be 0644, dirs 0755
    try:
        db = ArchiveDB(tmp_path / "new-dir" / "audit.sqlite")
        row = AuditRow("NOT0ST3A7fpq01", "JOB0ST3A7fpq01", 1, "delivered", 5, 1, None, 1, 10, "t")
        db.insert([row])  # the -wal and -shm files exist while it is open
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "new-dir").iterdir()}
        db.close()
        replica = DirectoryReplica(tmp_path / "replica-root")
        replica.put_new(segment_name(1), b"x")
        replica_mode = stat.S_IMODE(replica.root.stat().st_mode)
        segment_mode = stat.S_IMODE((replica.root / segment_name(1)).stat().st_mode)
        shared = tmp_path / "shared"  # an existing directory is not ours to tighten
        shared.mkdir(mode=0o755)
        ArchiveDB(shared / "audit.sqlite").close()
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "new-dir").stat().st_mode) == 0o700
    assert modes == {"audit.sqlite": 0o600, "audit.sqlite-wal": 0o600, "audit.sqlite-shm": 0o600}
    assert (replica_mode, segment_mode) == (0o700, 0o600)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "audit.sqlite").stat().st_mode) == 0o600


@pytest.mark.timeout_s(90)
async def test_a_clean_stop_folds_what_the_workers_settle_while_stopping(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    db = tmp_path / "audit.sqlite"
    archiver = Archiver(bus, db, DirectoryReplica(tmp_path / "replica"), queue=queue,
                        poll_s=0.05)  # fmt: skip
    slow = [601, 602, 603]
    # As in the service: the bot client outlives the nursery of archiver, worker and metronome.
    async with (
        open_stand_in(TOKEN, LIMITS) as tg,
        open_bot(TOKEN, tg.api_url) as bot,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(archiver.run)
        for chat in slow:
            tg.script(chat, Scripted.hang(1.5))  # these sends are slow to answer
        sent = [await notify(bus, chat, f"c{chat}", queue=queue) for chat in range(600, 620)]
        limiter = RateLimiter(bus, LIMITS, tag=queue, margin_ms=20)
        await nursery.start(NotificationWorker(bus, bot, limiter, queue=queue).run)
        await nursery.start(Metronome(bus, queue, beat_ms=100).run)
        await wait_for(lambda: len(tg.deliveries) == len(sent) - len(slow), timeout=30)
        await wait_for(lambda: all(tg.pending_scripts(c) == 0 for c in slow))  # in flight
        await wait_for(
            lambda: archiver.statistics().folder.archived == len(sent) - len(slow), timeout=30
        )
        nursery.cancel_scope.cancel()  # a clean stop, while three sends are in flight
    # The workers finished those sends in their grace period and acked them; the archiver
    # folded their records before it stopped.
    assert len(tg.deliveries) == len(sent)
    assert sorted(r["notice_id"] for r in await off_thread(rows_of, db)) == sorted(sent)
    audit_len = await bus.transport.command("XLEN", bus.keys(queue).prefix + "audit")
    assert int(audit_len) == 0, "a record was left in the stream"


@pytest.mark.parametrize("where", ["directory", "s3"])
async def test_a_clean_stop_leaves_the_replica_complete(
    bus: Bus, queue: str, tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    replica = (DirectoryReplica(tmp_path / "replica") if where == "directory"
               else request.getfixturevalue("s3_replica"))  # fmt: skip
    db = tmp_path / "audit.sqlite"
    # Segments are cut at 10,000 rows or hourly: nothing is replicated while it runs.
    archiver = Archiver(bus, db, replica, queue=queue, segment_rows=10_000, segment_every_s=3600,
                        poll_s=0.02)  # fmt: skip
    async with trio.open_nursery() as nursery:
        await nursery.start(archiver.run)
        await wait_for(lambda: archiver.statistics().replicator.replicating)
        sent = await _settle(bus, queue, 25)
        await wait_for(lambda: archiver.statistics().folder.archived == len(sent))
        assert archiver.statistics().replicator.segments == 0
        nursery.cancel_scope.cancel()  # a clean stop
    assert archiver.statistics().replicator.segments == 1, "one final segment"
    restored = tmp_path / "restored.sqlite"
    assert await off_thread(restore, replica, restored) == len(sent)
    assert await off_thread(rows_of, restored) == await off_thread(rows_of, db)


@pytest.mark.parametrize("where", ["directory", "s3"])
@pytest.mark.timeout_s(120)
async def test_the_archiver_compacts_as_it_goes_and_restore_stays_equal(
    bus: Bus, queue: str, tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    replica = (DirectoryReplica(tmp_path / "replica") if where == "directory"
               else request.getfixturevalue("s3_replica"))  # fmt: skip
    db = tmp_path / "audit.sqlite"
    archiver = Archiver(bus, db, replica, queue=queue, segment_rows=4, segment_every_s=0.02,
                        compact_segments=3, compact_rows=30, poll_s=0.02)  # fmt: skip
    sent: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(archiver.run)
        for _ in range(12):  # notices settle in batches; segments and compactions follow
            sent += await _settle(bus, queue, 9)
            await wait_for(partial(off_thread, _fully_replicated, db, len(sent)), timeout=30)
        await wait_for(lambda: archiver.statistics().replicator.compactions >= 6, timeout=30)

        async def settled_down() -> bool:  # no compaction due, the last one's clean-up done
            contents = await off_thread(read_contents, replica)
            return len(contents.manifests) == 2 and len(contents.after) < 3

        await wait_for(settled_down, timeout=30)
        nursery.cancel_scope.cancel()
    stats = archiver.statistics().replicator
    assert stats.fenced is None and stats.deleted > 0 and stats.segments >= 27
    manifests = await off_thread(replica.names, "manifests/")
    segments_left = await off_thread(replica.names, "segments/")
    # Segments the newest manifest covers, and those after it (the last, the clean stop's).
    assert len(manifests) == 2 and len(segments_left) <= 2 * 3, "superseded pieces are gone"
    assert sorted(r["notice_id"] for r in await off_thread(rows_of, db)) == sorted(sent)
    await _same_rows_after_restore(replica, db, tmp_path)


async def test_a_replica_down_at_a_clean_stop_is_one_line_and_the_next_start_catches_up(
    bus: Bus, queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="codemojex.audit.replicator")
    replica = FlakyReplica(tmp_path / "replica")  # refuses segments while down
    db = tmp_path / "audit.sqlite"
    first = Archiver(bus, db, replica, queue=queue, segment_rows=10_000, segment_every_s=3600,
                     poll_s=0.02)  # fmt: skip
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await wait_for(lambda: first.statistics().replicator.replicating)
        sent = await _settle(bus, queue, 10)
        await wait_for(lambda: first.statistics().folder.archived == len(sent))
        nursery.cancel_scope.cancel()  # a clean stop, the replica down
    said = [r.getMessage() for r in caplog.records if r.name == "codemojex.audit.replicator"
            and r.levelno >= logging.WARNING]  # fmt: skip
    assert len(said) == 1 and "not replicated" in said[0] and "replica unreachable" in said[0]
    assert replica.names("segments/") == [] and first.statistics().replicator.segments == 0
    assert sorted(r["notice_id"] for r in await off_thread(rows_of, db)) == sorted(sent)
    replica.down = False  # the next start, the replica back: it catches up
    second = Archiver(bus, db, replica, queue=queue, segment_every_s=0.05, poll_s=0.02)
    async with trio.open_nursery() as nursery:
        await nursery.start(second.run)
        await wait_for(lambda: off_thread(_fully_replicated, db, len(sent)), timeout=30)
        nursery.cancel_scope.cancel()
    restored = tmp_path / "restored.sqlite"
    assert await off_thread(restore, replica, restored) == len(sent)
    assert await off_thread(rows_of, restored) == await off_thread(rows_of, db)


# --- replica outages: a real S3 server process, stopped and started again on its port ---------


class DurableS3:
    """A moto server process (``tests.codemojex.audit.moto_durable``) on a fixed port whose objects
    survive a stop and a start."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: trio.Process | None = None

    async def start(self) -> None:
        argv = [sys.executable, "-m", "tests.codemojex.audit.moto_durable", str(self.port),
                str(self.state)]  # fmt: skip
        self.proc = await trio.lowlevel.open_process(
            argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        with trio.fail_after(30):
            assert await read_line(self.proc) == "ready"

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
                await self.proc.wait()

    async def create_bucket(self, bucket: str) -> None:
        import boto3

        client = boto3.client("s3", endpoint_url=self.url)
        await off_thread(lambda: client.create_bucket(Bucket=bucket))

    async def require_auth(self, required: bool) -> None:
        """Check credentials (none are known, so every key is refused: 403), or stop checking."""
        async with httpx.AsyncClient() as client:
            answer = await client.post(f"{self.url}/moto-api/reset-auth",
                                       content="0" if required else "inf",
                                       headers={"Content-Type": "text/plain"})  # fmt: skip
            answer.raise_for_status()


@pytest.fixture
async def durable_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DurableS3]:
    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    s3 = DurableS3(tmp_path / "s3-recording.jsonl")
    try:
        yield s3
    finally:
        await s3.stop()


def _fully_replicated(db: Path, rows: int) -> bool:
    def check(d: ArchiveDB) -> bool:
        return d.max_seq() >= rows and d.max_seq() == int(d.get_meta("replicated_seq") or 0)

    return read_archive(db, check)


def _replica_lines(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    """How many times the archiver said the replica went down, and came back."""
    said = [r.getMessage() for r in caplog.records if r.name == "codemojex.audit.replicator"]
    return sum("is failing" in m for m in said), sum("is back after" in m for m in said)


async def _same_rows_after_restore(replica: Replica, db: Path, tmp_path: Path) -> None:
    restored = tmp_path / f"restored-{os.urandom(3).hex()}.sqlite"
    await off_thread(restore, replica, restored)
    assert await off_thread(rows_of, restored) == await off_thread(rows_of, db)


async def _notify_many(bus: Bus, queue: str, first_chat: int, n: int) -> list[str]:
    return [await notify(bus, first_chat + i, f"m{first_chat + i}", queue=queue) for i in range(n)]


ARCHIVER_KW: dict[str, Any] = {"segment_rows": 5, "segment_every_s": 0.1, "poll_s": 0.02,
                               "replica_retry": FAST_RETRY}  # fmt: skip


@pytest.mark.timeout_s(120)
async def test_a_replica_down_at_start_up_gets_every_segment_when_it_is_back(
    bus: Bus, queue: str, tmp_path: Path, durable_s3: DurableS3, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="codemojex.audit.replicator")
    db = tmp_path / "audit.sqlite"
    await durable_s3.start()
    await durable_s3.create_bucket("audit-down")
    replica = S3Replica("audit-down", "cm", endpoint_url=durable_s3.url)
    first = Archiver(bus, db, replica, queue=queue, **ARCHIVER_KW)
    second = Archiver(bus, db, replica, queue=queue, **ARCHIVER_KW)
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        async with trio.open_nursery() as archiving:
            await archiving.start(first.run)
            await run_pipeline(bus, queue, tg, nursery)
            sent = await _notify_many(bus, queue, 1000, 12)
            await wait_for(lambda: off_thread(_fully_replicated, db, len(sent)), timeout=60)
            archiving.cancel_scope.cancel()
        await durable_s3.stop()  # the replica is down when the archiver starts again
        async with trio.open_nursery() as archiving:
            await archiving.start(second.run)  # it starts all the same, and archives locally
            sent += await _notify_many(bus, queue, 1100, 16)
            await wait_for(lambda: second.statistics().folder.archived == 16, timeout=60)
            await wait_for(lambda: second.statistics().replicator.replica_errors >= 3)
            assert second.statistics().replicator.replica_down_since is not None
            assert (
                second.statistics().replicator.epoch,
                second.statistics().replicator.segments,
            ) == (0, 0)
            await durable_s3.start()  # back on the same port, with what it held
            await wait_for(lambda: off_thread(_fully_replicated, db, len(sent)), timeout=30)
            archiving.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    assert (
        second.statistics().replicator.epoch == 2 and second.statistics().replicator.segments >= 3
    )
    assert (
        second.statistics().replicator.replica_down_since is None
        and second.statistics().replicator.fenced is None
    )
    assert sorted(r["notice_id"] for r in await off_thread(rows_of, db)) == sorted(sent)
    await _same_rows_after_restore(replica, db, tmp_path)
    assert _replica_lines(caplog) == (1, 1), "one line down, one line back"


@pytest.mark.timeout_s(120)
async def test_a_new_database_waits_for_the_replica_before_folding(
    bus: Bus, queue: str, tmp_path: Path, durable_s3: DurableS3
) -> None:
    await durable_s3.start()
    await durable_s3.create_bucket("audit-new")
    replica = S3Replica("audit-new", "cm", endpoint_url=durable_s3.url)
    old_db, new_db = tmp_path / "old.sqlite", tmp_path / "new.sqlite"
    first = Archiver(bus, old_db, replica, queue=queue, **ARCHIVER_KW)
    second = Archiver(bus, new_db, replica, queue=queue, **ARCHIVER_KW)
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        async with trio.open_nursery() as archiving:
            await archiving.start(first.run)
            await run_pipeline(bus, queue, tg, nursery)
            sent = await _notify_many(bus, queue, 2000, 10)
            await wait_for(lambda: off_thread(_fully_replicated, old_db, len(sent)), timeout=60)
            archiving.cancel_scope.cancel()
        await durable_s3.stop()
        # A new host: an empty database beside a replica that has segments it cannot reach.
        async with trio.open_nursery() as archiving:
            await archiving.start(second.run)
            later = await _notify_many(bus, queue, 2100, 8)
            await wait_for(lambda: _settled(bus, queue), timeout=60)
            await wait_for(lambda: second.statistics().replicator.replica_errors >= 3)
            assert (
                second.statistics().folder.archived == 0 and not second.statistics().folder.folding
            ), "folded too early"
            audit_len = await bus.transport.command("XLEN", bus.keys(queue).prefix + "audit")
            assert int(audit_len) == len(later), "the records wait in the stream"
            await durable_s3.start()
            await wait_for(lambda: second.statistics().folder.archived == len(later), timeout=30)
            total = len(sent) + len(later)
            await wait_for(lambda: off_thread(_fully_replicated, new_db, total), timeout=30)
            archiving.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    rows = await off_thread(rows_of, new_db)
    assert sorted(r["notice_id"] for r in rows) == sorted(sent + later)
    old_rows = await off_thread(rows_of, old_db)
    assert [r for r in rows if r["notice_id"] in sent] == old_rows, "restored, not refolded"
    await _same_rows_after_restore(replica, new_db, tmp_path)


@pytest.mark.timeout_s(120)
async def test_a_replica_outage_mid_run_is_caught_up_in_order(
    bus: Bus, queue: str, tmp_path: Path, durable_s3: DurableS3, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="codemojex.audit.replicator")
    db = tmp_path / "audit.sqlite"
    await durable_s3.start()
    await durable_s3.create_bucket("audit-mid")
    replica = S3Replica("audit-mid", "cm", endpoint_url=durable_s3.url)
    archiver = Archiver(bus, db, replica, queue=queue, **ARCHIVER_KW)
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        await nursery.start(archiver.run)
        await run_pipeline(bus, queue, tg, nursery)
        sent = await _notify_many(bus, queue, 3000, 60)
        await wait_for(lambda: archiver.statistics().replicator.segments >= 2, timeout=60)
        await durable_s3.stop()  # while notices are being settled and archived
        sent += await _notify_many(bus, queue, 3100, 40)
        await wait_for(lambda: _settled(bus, queue), timeout=60)
        await wait_for(lambda: archiver.statistics().folder.archived == len(sent), timeout=30)
        await wait_for(lambda: archiver.statistics().replicator.replica_errors >= 3)
        during = archiver.statistics().replicator.segments
        await durable_s3.start()
        await wait_for(lambda: off_thread(_fully_replicated, db, len(sent)), timeout=30)
        nursery.cancel_scope.cancel()
    assert (
        archiver.statistics().replicator.segments > during
        and archiver.statistics().replicator.fenced is None
    )
    names = await off_thread(replica.names, "segments/")
    assert [int(Path(n).name.split(".")[0]) for n in names] == list(range(1, len(names) + 1))
    assert sorted(r["notice_id"] for r in await off_thread(rows_of, db)) == sorted(sent)
    await _same_rows_after_restore(replica, db, tmp_path)
    assert _replica_lines(caplog) == (1, 1), "one line down, one line back"


@pytest.mark.timeout_s(120)
async def test_refused_credentials_keep_archiving_locally_with_one_line(
    bus: Bus, queue: str, tmp_path: Path, durable_s3: DurableS3, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="codemojex.audit.replicator")
    db = tmp_path / "audit.sqlite"
    await durable_s3.start()
    await durable_s3.create_bucket("audit-auth")
    replica = S3Replica("audit-auth", "cm", endpoint_url=durable_s3.url)
    archiver = Archiver(bus, db, replica, queue=queue, **ARCHIVER_KW)
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        await nursery.start(archiver.run)
        await run_pipeline(bus, queue, tg, nursery)
        sent = await _notify_many(bus, queue, 4000, 10)
        await wait_for(lambda: off_thread(_fully_replicated, db, len(sent)), timeout=60)
        await durable_s3.require_auth(True)  # our key is now refused (a revoked key): 403
        sent += await _notify_many(bus, queue, 4100, 20)
        await wait_for(lambda: archiver.statistics().folder.archived == len(sent), timeout=60)
        await wait_for(lambda: archiver.statistics().replicator.replica_errors >= 5)
        assert "InvalidAccessKeyId" in (archiver.statistics().replicator.replica_error or "")
        assert _replica_lines(caplog) == (1, 0), "one line, not one per retry"
        await durable_s3.require_auth(False)
        await wait_for(lambda: off_thread(_fully_replicated, db, len(sent)), timeout=30)
        nursery.cancel_scope.cancel()
    assert _replica_lines(caplog) == (1, 1)
    assert archiver.statistics().replicator.fenced is None
    await _same_rows_after_restore(replica, db, tmp_path)
