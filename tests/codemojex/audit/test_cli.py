"""``python -m codemojex.audit`` on a real archive and replica: query by chat and time range,
counts, replica status, restore, and clear errors. The readers write nothing; ``archive`` needs
a server that holds the queue and a database no other archiver holds."""

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from codemojex.audit import ArchiveDB, AuditRow, segments
from codemojex.audit.contents import build_compaction, read_contents
from codemojex.audit.replica import DirectoryReplica
from echomq_trio import Bus, jobs
from tests.support import ROOT, read_line, spawn

pytestmark = pytest.mark.slow

ENV = {k: v for k, v in os.environ.items() if k != "ECHOMQ_URL"} | {"PYTHONPATH": str(ROOT)}


def audit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codemojex.audit", *args], cwd=ROOT, capture_output=True,
        text=True, timeout=60, env=ENV,
    )  # fmt: skip


async def audit_async(*args: str) -> subprocess.CompletedProcess[bytes]:
    """``audit`` from a trio test (the server fixtures are async)."""
    return await trio.run_process(
        [sys.executable, "-m", "codemojex.audit", *args], cwd=ROOT, env=ENV,
        capture_stdout=True, capture_stderr=True, check=False,
    )  # fmt: skip


def one_line_error(out: "subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]",
                   status: int, words: str) -> None:  # fmt: skip
    err = out.stderr.decode() if isinstance(out.stderr, bytes) else out.stderr
    assert out.returncode == status and words in err, (out.returncode, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
            for p in sorted(folder.rglob("*"))}  # fmt: skip


def row(n: int, chat: int, outcome: str, settled_ms: int) -> AuditRow:
    return AuditRow(f"NOT0ST3A7fpq{n:02d}", f"JOB0ST3A7fpq{n:02d}", chat, outcome,
                    n if outcome == "delivered" else None, 1,
                    None if outcome == "delivered" else "chat not found", 1, settled_ms,
                    f"text {n}")  # fmt: skip


def make_archive(tmp_path: Path) -> tuple[Path, Path]:
    db_path, replica_path = tmp_path / "audit.sqlite", tmp_path / "replica"
    db = ArchiveDB(db_path)
    rows = [row(1, 10, "delivered", 1_000), row(2, 10, "dropped", 2_000),
            row(3, 20, "delivered", 3_000), row(4, 10, "delivered", 4_000)]  # fmt: skip
    db.insert(rows)
    db.set_meta({"segment": "1", "replicated_seq": "3"})
    db.close()
    replica = DirectoryReplica(replica_path)
    replica.put_new(segments.segment_name(1), segments.encode(1, 1, list(enumerate(rows[:3], 1))))
    replica.put_new(segments.epoch_name(1), segments.encode_epoch(1, "test"))
    return db_path, replica_path


def test_query_counts_status_restore(tmp_path: Path) -> None:
    db, rep = make_archive(tmp_path)
    out = audit("query", "--db", str(db), "--chat", "10", "--since", "1500", "--json")
    assert out.returncode == 0, out.stderr
    assert [r["notice_id"] for r in json.loads(out.stdout)] == ["NOT0ST3A7fpq02", "NOT0ST3A7fpq04"]
    out = audit("query", "--db", str(db), "--until", "1970-01-01T00:00:02.5Z")
    assert "NOT0ST3A7fpq01" in out.stdout and "NOT0ST3A7fpq02" in out.stdout
    assert "NOT0ST3A7fpq03" not in out.stdout and "chat not found" in out.stdout
    out = audit("counts", "--db", str(db), "--json")
    assert json.loads(out.stdout) == {"delivered": 3, "dropped": 1, "deliveries": 3, "resent": 0}
    out = audit("status", "--db", str(db), "--replica", str(rep), "--json")
    status = json.loads(out.stdout)
    assert (status["segments"], status["local_rows"], status["lag_rows"], status["epoch"]) == (
        1,
        4,
        1,
        1,
    )
    restored = tmp_path / "restored.sqlite"
    out = audit("restore", "--db", str(restored), "--replica", str(rep))
    assert out.returncode == 0 and "restored 3 notices" in out.stdout
    out = audit("restore", "--db", str(restored), "--replica", str(rep))
    assert out.returncode == 1 and "exists" in out.stderr


def test_errors_are_one_line(tmp_path: Path) -> None:
    for args, words in [
        (["counts", "--db", str(tmp_path / "none.sqlite")], "no archive at"),
        (["query", "--db", str(make_archive(tmp_path)[0]), "--since", "yesterday"], "not a time"),
        (["restore", "--db", str(tmp_path / "new.sqlite"), "--replica", str(tmp_path / "empty")],
         "no segments"),
        (["status", "--db", str(tmp_path / "audit.sqlite"), "--replica", "ftp://x"], "replica"),
    ]:  # fmt: skip
        out = audit(*args)
        assert out.returncode == 1 and words in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_an_s3_replica_without_boto3_is_one_line(tmp_path: Path) -> None:
    no_boto3 = ("import runpy, sys; sys.modules['boto3'] = None; "
                "sys.argv[0] = 'codemojex.audit'; runpy.run_module('codemojex.audit', "
                "run_name='__main__', alter_sys=True)")  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", no_boto3, "status", "--db", str(make_archive(tmp_path)[0]),
         "--replica", "s3://audit-bucket/cm"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=ENV,
    )  # fmt: skip
    one_line_error(out, 1, "the replica s3://audit-bucket/cm needs boto3")


def test_restore_json_and_a_private_database(tmp_path: Path) -> None:
    _, rep = make_archive(tmp_path)
    restored = tmp_path / "new-dir" / "restored.sqlite"
    out = audit("restore", "--db", str(restored), "--replica", str(rep), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"restored": 3, "replica": f"dir:{rep.resolve()}",
                                      "db": str(restored)}  # fmt: skip
    assert stat.S_IMODE(restored.stat().st_mode) == 0o600
    assert stat.S_IMODE(restored.parent.stat().st_mode) == 0o700


def test_readers_write_nothing(tmp_path: Path) -> None:
    db, rep = make_archive(tmp_path)
    before = listing(tmp_path)
    missing_replica = tmp_path / "no-replica"
    for args in (["query", "--db", str(db)], ["counts", "--db", str(db), "--json"],
                 ["status", "--db", str(db), "--replica", str(rep)],
                 ["status", "--db", str(db), "--replica", str(missing_replica)]):  # fmt: skip
        out = audit(*args)
        assert out.returncode == 0, out.stderr
    assert listing(tmp_path) == before, "a reader created or changed a file"
    one_line_error(audit("counts", "--db", str(tmp_path / "none.sqlite")), 1, "no archive at")
    assert not (tmp_path / "none.sqlite").exists()


def test_a_file_that_is_not_an_archive_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_bytes(b"not a database at all\n" * 100)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE something (x)")
    conn.commit()
    conn.close()
    for path in (junk, other):
        for command in (["query"], ["counts"], ["status", "--replica", str(tmp_path / "r")]):
            out = audit(*command, "--db", str(path))
            one_line_error(out, 1, f"codemojex.audit: {path} is not an audit archive")


def test_query_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    db_path = tmp_path / "big.sqlite"
    db = ArchiveDB(db_path)
    db.insert([row(n, 10 + n % 7, "delivered", 1_000 + n) for n in range(3000)])  # ~300 KB out
    db.close()
    argv = [sys.executable, "-m", "codemojex.audit", "query", "--db", str(db_path),
            "--limit", "10000"]  # fmt: skip
    with subprocess.Popen(argv, cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()  # like ``| head -1``: one line, then the reader is gone
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.wait(30)
    assert err == "", err
    assert proc.returncode == 1  # the documented recipe's status for a broken pipe


def test_archive_needs_a_url_and_never_starts_a_server(tmp_path: Path) -> None:
    db, rep = tmp_path / "audit.sqlite", tmp_path / "replica"
    out = audit("archive", "--db", str(db), "--replica", str(rep))
    one_line_error(out, 2, "archive needs --url (or ECHOMQ_URL)")
    assert not db.exists() and not rep.exists()


async def test_archive_refuses_a_server_without_the_queue(
    bus: Bus, queue: str, server_url: str, tmp_path: Path
) -> None:
    db, rep = tmp_path / "audit.sqlite", tmp_path / "replica"
    out = await audit_async("archive", "--url", server_url, "--queue", queue, "--db", str(db),
                            "--replica", str(rep))  # fmt: skip
    one_line_error(out, 1, f"no queue {queue!r} on redis://:***@")
    assert not db.exists() and not rep.exists(), "nothing made, no epoch claimed"
    assert not (await jobs.counts(bus, queue)).exists, "and nothing made on the server"


@pytest.mark.timeout_s(90)
async def test_one_archiver_per_database_and_a_json_start_line(
    bus: Bus, queue: str, server_url: str, tmp_path: Path
) -> None:
    await jobs.set_audit(bus, queue)
    db, rep = tmp_path / "audit.sqlite", tmp_path / "replica"
    args = ["archive", "--url", server_url, "--queue", queue, "--db", str(db), "--replica",
            str(rep)]  # fmt: skip
    async with spawn(*args, "--json", module="codemojex.audit") as first:
        start = json.loads(await read_line(first))
        assert start == {"archiving": queue, "server": bus.url, "db": str(db),
                         "replica": f"dir:{rep.resolve()}"}  # fmt: skip
        one_line_error(await audit_async(*args), 2, f"in use by process {first.pid}")
        _, other_replica = make_archive(tmp_path / "elsewhere")  # has segments to restore
        out = await audit_async("restore", "--db", str(db), "--replica", str(other_replica),
                                "--force")  # fmt: skip
        one_line_error(out, 2, f"in use by process {first.pid}")  # never under an archiver
        assert db.exists()
        first.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await first.wait()
        assert first.returncode == 0
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(rep.stat().st_mode) == 0o700


def test_status_reports_the_manifest_and_the_objects_and_restore_reads_the_manifest(
    tmp_path: Path,
) -> None:
    db, rep = make_archive(tmp_path)
    replica = DirectoryReplica(rep)
    fourth = numbered_rows(db)[3:]  # the row not yet replicated
    replica.put_new(segments.segment_name(2), segments.encode(2, 1, fourth))
    built = build_compaction(replica, read_contents(replica), 1, 1000)  # segments 1 and 2
    assert built is not None
    with built.file:
        replica.put_new_file(built.piece.name, built.file)
    replica.put_new(segments.manifest_name(1), segments.encode_manifest(built.manifest))
    replica.delete([segments.segment_name(1)])  # as a clean-up after a later manifest would
    out = audit("status", "--db", str(db), "--replica", str(rep), "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert {k: status[k] for k in ("manifest", "manifest_objects", "manifest_last_segment",
                                   "segments", "compacted", "manifests", "objects")} == {
        "manifest": 1, "manifest_objects": 1, "manifest_last_segment": 2, "segments": 1,
        "compacted": 1, "manifests": 1, "objects": 4,
    }  # fmt: skip
    text = audit("status", "--db", str(db), "--replica", str(rep)).stdout
    assert "manifest               1" in text and "objects                4" in text
    restored = tmp_path / "restored.sqlite"
    out = audit("restore", "--db", str(restored), "--replica", str(rep), "--json")
    assert json.loads(out.stdout)["restored"] == 4
    assert numbered_rows(restored) == numbered_rows(db)


def numbered_rows(path: Path) -> list[tuple[int, AuditRow]]:
    db = ArchiveDB(path)
    try:
        return db.rows_after(0, 100)
    finally:
        db.close()
