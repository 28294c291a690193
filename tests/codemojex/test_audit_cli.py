"""``python -m codemojex.audit`` on a real archive and replica: query by chat and time range,
counts, replica status, restore, and clear errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

from codemojex.archive import ArchiveDB, AuditRow
from codemojex.archiver import segment_name
from codemojex.replica import DirectoryReplica
from tests.echomq_trio.processes import ROOT


def audit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codemojex.audit", *args], cwd=ROOT, capture_output=True,
        text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip


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
    lines = [json.dumps({"segment": 1, "epoch": 1, "first_seq": 1, "last_seq": 3, "rows": 3})]
    lines += [json.dumps({"seq": i + 1, **r.as_dict()}) for i, r in enumerate(rows[:3])]
    replica.put_new(segment_name(1), ("\n".join(lines) + "\n").encode())
    replica.put_new("epochs/00000000000000000001", b"{}")
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
    assert json.loads(out.stdout) == {"delivered": 3, "dropped": 1}
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
