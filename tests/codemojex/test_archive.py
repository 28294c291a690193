"""The persistence floor: every settled notice gets exactly one audit row, folded off the hot
path into SQLite and replicated create-only; fencing; restore."""

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from codemojex.archive import ArchiveDB, AuditRow, fold
from codemojex.archiver import Archiver, restore, segment_name
from codemojex.limits import Limits
from codemojex.notification_worker import NotificationWorker
from codemojex.notifier import notify
from codemojex.rate_limiter import RateLimiter
from codemojex.replica import DirectoryReplica, NameTaken, S3Replica, open_replica
from codemojex.telegram import open_bot
from codemojex.testing.telegram import Scripted, TelegramStandIn, open_stand_in
from echomq_trio import Bus, Metronome, jobs
from tests.conftest import wait_for
from tests.echomq_trio.processes import read_line, spawn

TOKEN = "123456:TEST"
LIMITS = Limits().scaled(20)


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
        {"id": "JOB0ST3A7fpq0Q", "outcome": "acked", "attempts": "2", "settled_ms": "9",
         "payload": payload, "note": '{"chat": 7, "message_id": 3}', "error": ""},
        {"id": "JOB0ST3A7fpq0R", "outcome": "dropped", "attempts": "1", "settled_ms": "9",
         "payload": payload.replace("0Q", "0R"), "note": "", "error": "chat not found"},
        {"id": "JOB0ST3A7fpq0S", "outcome": "dead", "attempts": "6", "settled_ms": "9",
         "payload": "not json", "note": "", "error": "boom"},
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
        await wait_for(lambda: archiver.stats.archived == len(sent), timeout=30)
        await wait_for(lambda: archiver.stats.segments >= 3, timeout=30)
        await archiver.replicate(force=True)
        nursery.cancel_scope.cancel()
    rows = rows_of(tmp_path / "audit.sqlite")
    assert sorted(r["notice_id"] for r in rows) == sorted(sent)
    by_chat = {r["chat"]: r for r in rows}
    assert by_chat[9]["outcome"] == "dropped" and "blocked" in str(by_chat[9]["reason"])
    assert all(
        r["outcome"] == "delivered" and r["message_id"] for c, r in by_chat.items() if c != 9
    )
    audit_len = await bus.wire.command("XLEN", bus.keys(queue).prefix + "audit")
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
    args += ["--min-idle-ms", "300"]
    sent: list[str] = []
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        async with spawn(*args, module="codemojex.audit") as first:
            assert (await read_line(first)).startswith("archiving epoch")
            await run_pipeline(bus, queue, tg, nursery)
            for n in range(300):
                sent.append(await notify(bus, 100 + n % 40, f"m{n}", queue=queue))
            await wait_for(lambda: len(tg.deliveries) >= 60, timeout=60)
            first.send_signal(signal.SIGKILL)  # whatever batch it was in the middle of
            await first.wait()
        async with spawn(*args, module="codemojex.audit") as second:
            assert (await read_line(second)).startswith("archiving epoch")
            await wait_for(lambda: _settled(bus, queue), timeout=90)

            def archived() -> bool:
                return len(rows_of(db)) >= len(sent)

            await wait_for(archived, timeout=60, step=0.2)
        nursery.cancel_scope.cancel()
    rows = rows_of(db)
    ids = [r["notice_id"] for r in rows]
    assert len(ids) == len(set(ids)) == len(sent) and set(ids) == set(sent)
    pending = await bus.wire.command("XPENDING", bus.keys(queue).prefix + "audit", "archiver")
    assert int(pending[0]) == 0


async def test_two_archivers_on_one_database_and_replica_one_is_fenced(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    replica = DirectoryReplica(tmp_path / "replica")
    kw = {"queue": queue, "segment_rows": 10, "segment_every_s": 0.1, "poll_s": 0.05}
    old = Archiver(bus, tmp_path / "a.sqlite", replica, consumer="old", **kw)  # type: ignore[arg-type]
    new = Archiver(bus, tmp_path / "a.sqlite", replica, consumer="new", **kw)  # type: ignore[arg-type]
    async with open_stand_in(TOKEN, LIMITS) as tg, trio.open_nursery() as nursery:
        await nursery.start(old.run)
        await nursery.start(new.run)  # claims a newer epoch
        assert (old.stats.epoch, new.stats.epoch) == (1, 2)
        sent = [await notify(bus, 500 + n, f"x{n}", queue=queue) for n in range(80)]
        await run_pipeline(bus, queue, tg, nursery)
        await wait_for(lambda: _settled(bus, queue), timeout=60)
        await wait_for(lambda: old.stats.archived + new.stats.archived == len(sent), timeout=30)
        await wait_for(lambda: old.stats.fenced is not None, timeout=30)
        while await new.replicate(force=True):
            pass
        nursery.cancel_scope.cancel()
    assert "newer archiver" in (old.stats.fenced or "")
    assert new.stats.fenced is None and new.stats.segments >= 1
    names = replica.names("segments/")
    replicated = [json.loads(line)["notice_id"] for name in names
                  for line in replica.get(name).decode().splitlines()[1:]]  # fmt: skip
    assert len(replicated) == len(set(replicated)), "a row was replicated twice"
    assert sorted(replicated) == sorted(sent)
    assert sorted(r["notice_id"] for r in rows_of(tmp_path / "a.sqlite")) == sorted(sent)


async def test_a_taken_segment_number_fences_its_writer(
    bus: Bus, queue: str, tmp_path: Path
) -> None:
    replica = DirectoryReplica(tmp_path / "replica")
    archiver = Archiver(bus, tmp_path / "db.sqlite", replica, queue=queue, segment_rows=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(archiver.run)
        replica.put_new(segment_name(1), b'{"segment": 1, "last_seq": 0}\n')  # another writer
        await jobs.enqueue(
            bus, queue, "JOB0ST3A7fpq0Q", '{"chat": 1, "text": "t", "id": "NOT0ST3A7fpq0Q"}'
        )
        (job,) = await jobs.claim(bus, queue)
        await jobs.ack(bus, queue, job.id, job.token)
        await wait_for(lambda: archiver.stats.fenced is not None, timeout=20)
        nursery.cancel_scope.cancel()
    assert "segment 1 is owned by another writer" in (archiver.stats.fenced or "")
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
        await wait_for(lambda: archiver.stats.archived == len(sent), timeout=60)
        while await archiver.replicate(force=True):
            pass
        nursery.cancel_scope.cancel()
    before = rows_of(db)
    for suffix in ("", "-wal", "-shm"):
        await trio.Path(str(db) + suffix).unlink(missing_ok=True)
    assert restore(replica, db) == len(sent)
    assert rows_of(db) == before


# --- S3-compatible storage (moto's server on loopback) ----------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)  # sync fixture, outside trio
    else:
        proc.kill()
        raise RuntimeError("moto server did not start")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def s3_replica(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> S3Replica:
    import boto3

    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    bucket = "audit-" + os.urandom(4).hex()
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return S3Replica(bucket, "cm", endpoint_url=s3_endpoint)


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
        await wait_for(lambda: archiver.stats.archived == len(sent), timeout=60)
        while await archiver.replicate(force=True):
            pass
        # A second writer of the next number is refused by the store itself.
        taken = archiver.stats.segments
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
        await wait_for(lambda: archiver.stats.archived == len(sent), timeout=60)
        await wait_for(lambda: archiver.stats.replica_errors > 0)
        replica.down = False  # it comes back: replication catches up
        await wait_for(lambda: archiver.stats.segments == 3, timeout=30)
        nursery.cancel_scope.cancel()
    assert archiver.stats.fenced is None


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
        await wait_for(lambda: first.stats.archived == len(sent), timeout=60)
        while await first.replicate(force=True):
            pass
        nursery.cancel_scope.cancel()
    # A new host: empty database, same replica. It restores before archiving further.
    second = Archiver(bus, tmp_path / "new.sqlite", replica, queue=queue, poll_s=0.02)
    async with trio.open_nursery() as nursery:
        await nursery.start(second.run)
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
