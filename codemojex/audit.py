"""``python -m codemojex.audit``: the audit archive from the command line.

    python -m codemojex.audit query   --db PATH [--chat ID] [--since T] [--until T] [--json]
    python -m codemojex.audit counts  --db PATH [--json]
    python -m codemojex.audit status  --db PATH --replica SPEC [--json]
    python -m codemojex.audit restore --db PATH --replica SPEC [--force]
    python -m codemojex.audit archive --db PATH --replica SPEC [--url URL] [--queue Q]

Times are ISO 8601 (``2026-11-29T10:00:00Z``) or Unix milliseconds. A replica SPEC is a
directory or ``s3://bucket/prefix`` (see ``codemojex.replica``). Errors are one line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from codemojex.archive import ArchiveDB
from codemojex.archiver import Archiver, restore
from codemojex.replica import open_replica

__all__ = ["main"]


class CliError(Exception):
    pass


def _time(text: str | None) -> int | None:
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"not a time (ISO 8601 or Unix ms): {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _open_db(path: str) -> ArchiveDB:
    if not Path(path).exists():
        raise CliError(f"no archive at {path}")
    return ArchiveDB(path)


def _print(data: Any, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2) if as_json else text)


def cmd_query(args: argparse.Namespace) -> None:
    db = _open_db(args.db)
    rows = db.query(args.chat, _time(args.since), _time(args.until), args.limit)
    lines = [f"{_when(r.settled_ms)}  {r.outcome:<9} chat {r.chat}  {r.notice_id}  "
             f"attempts {r.attempts}  {r.reason or ''}".rstrip() for r in rows]  # fmt: skip
    _print([r.as_dict() for r in rows], args.json, "\n".join(lines) or "no notices")


def cmd_counts(args: argparse.Namespace) -> None:
    counts = _open_db(args.db).counts()
    text = "\n".join(f"{k:<10} {v}" for k, v in sorted(counts.items())) or "no notices"
    _print(counts, args.json, text)


def cmd_status(args: argparse.Namespace) -> None:
    db = _open_db(args.db)
    replica = open_replica(args.replica)
    segments = replica.names("segments/")
    epochs = replica.names("epochs/")
    replicated = int(db.get_meta("replicated_seq", "0") or 0)
    status = {
        "replica": replica.describe(),
        "last_segment": segments[-1] if segments else None,
        "segments": len(segments),
        "epoch": len(epochs) and int(Path(epochs[-1]).name),
        "local_rows": db.max_seq(),
        "replicated_seq": replicated,
        "lag_rows": db.max_seq() - replicated,
    }
    _print(status, args.json, "\n".join(f"{k:<15} {v}" for k, v in status.items()))


def cmd_restore(args: argparse.Namespace) -> None:
    path = Path(args.db)
    if path.exists() and not args.force:
        raise CliError(f"{path} exists; restore rebuilds a missing database (or pass --force)")
    if path.exists():
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    replica = open_replica(args.replica)
    if not replica.names("segments/"):
        raise CliError(f"no segments in {replica.describe()}")
    n = restore(replica, path)
    print(f"restored {n} notices from {replica.describe()} into {path}")


def cmd_archive(args: argparse.Namespace) -> None:
    from echomq_trio import open_bus

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with open_bus(args.url) as bus, trio.open_nursery() as nursery:
                archiver = Archiver(bus, args.db, open_replica(args.replica), queue=args.queue,
                                    segment_rows=args.segment_rows,
                                    segment_every_s=args.segment_every,
                                    min_idle_ms=args.min_idle_ms)  # fmt: skip
                await nursery.start(archiver.run)
                print(f"archiving epoch {archiver.stats.epoch}", flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    trio.run(run)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m codemojex.audit",
        description="Query, check and restore the audit archive.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("query", help="notices by chat and time range")
    q.add_argument("--chat", type=int)
    q.add_argument("--since")
    q.add_argument("--until")
    q.add_argument("--limit", type=int, default=1000)
    c = sub.add_parser("counts", help="notices per outcome")
    s = sub.add_parser("status", help="replica status: last segment and lag")
    r = sub.add_parser("restore", help="rebuild the database from the replica")
    r.add_argument("--force", action="store_true", help="replace an existing database")
    a = sub.add_parser("archive", help="run an archiver until Ctrl-C")
    a.add_argument("--url", default=os.environ.get("ECHOMQ_URL"))
    a.add_argument("--queue", default="cm.notify")
    a.add_argument("--segment-rows", type=int, default=1000)
    a.add_argument("--segment-every", type=float, default=5.0)
    a.add_argument("--min-idle-ms", type=int, default=30_000)
    for sp in (q, c, s, r, a):
        sp.add_argument("--db", required=True, help="path of the SQLite archive")
        sp.add_argument("--json", action="store_true")
    for sp in (s, r, a):
        sp.add_argument("--replica", required=True, help="a directory or s3://bucket/prefix")
    return p


COMMANDS = {"query": cmd_query, "counts": cmd_counts, "status": cmd_status,
            "restore": cmd_restore, "archive": cmd_archive}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (CliError, ValueError, OSError) as exc:
        print(f"codemojex.audit: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
