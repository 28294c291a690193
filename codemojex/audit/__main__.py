"""``python -m codemojex.audit``: the audit archive from the command line.

    python -m codemojex.audit query   --db PATH [--chat ID] [--since T] [--until T] [--json]
    python -m codemojex.audit counts  --db PATH [--json]
    python -m codemojex.audit status  --db PATH --replica SPEC [--json]    # manifest, objects, lag
    python -m codemojex.audit restore --db PATH --replica SPEC [--force] [--json]
    python -m codemojex.audit archive --db PATH --replica SPEC --url URL [--queue Q] [--json]

``query``, ``counts`` and ``status`` only read: the archive is opened read-only and nothing is
created, not even a missing replica directory. ``restore`` builds a new database (mode 0600) and
reads the replica. ``archive`` runs an archiver against the server at ``--url`` (or
``ECHOMQ_URL``): it never starts a server of its own, refuses a server without the queue (the
wrong server or database), and refuses a database another archiver holds.

Times are ISO 8601 (``2026-11-29T10:00:00Z``) or Unix milliseconds. A replica SPEC is a
directory or ``s3://bucket/prefix`` (see ``codemojex.audit.replica``). Errors are one line on
stderr: exit status 2 for a usage error or an archive in use by another process, 1 for the
others.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from codemojex.audit import segments
from codemojex.audit.archive import NotAnArchive, read_archive
from codemojex.audit.archiver import (
    DEFAULT_COMPACT_ROWS,
    DEFAULT_COMPACT_SEGMENTS,
    DEFAULT_FORGET_IDLE_MS,
    DEFAULT_MIN_IDLE_MS,
    DEFAULT_SEGMENT_EVERY_S,
    DEFAULT_SEGMENT_ROWS,
    Archiver,
)
from codemojex.audit.contents import read_contents
from codemojex.audit.replica import NoSuchName, S3Unavailable, open_replica
from codemojex.audit.replicator import restore
from codemojex.notify.notifier import NOTIFY_QUEUE
from echomq_trio import BusError
from servicekit.cli import CliError, cancel_on_signal, first_error, silence_stdout
from servicekit.datadir import InUse, hold, private_dir

__all__ = ["main"]


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


def _print(data: Any, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2) if as_json else text)


def cmd_query(args: argparse.Namespace) -> None:
    since, until = _time(args.since), _time(args.until)
    rows = read_archive(args.db, lambda db: db.query(args.chat, since, until, args.limit))
    lines = [f"{_when(r.settled_ms)}  {r.outcome:<9} chat {r.chat}  {r.notice_id}  "
             f"attempts {r.attempts}  deliveries {r.deliveries}  {r.reason or ''}".rstrip()
             for r in rows]  # fmt: skip
    _print([r.as_dict() for r in rows], args.json, "\n".join(lines) or "no notices")


def cmd_counts(args: argparse.Namespace) -> None:
    counts, (deliveries, resent) = read_archive(
        args.db, lambda db: (db.counts(), db.delivery_counts())
    )
    text = "\n".join(f"{k:<10} {v}" for k, v in sorted(counts.items())) or "no notices"
    if counts:
        text += (f"\ndeliveries {deliveries}  (every send Telegram accepted)"
                 f"\nresent     {resent}  (notices delivered more than once)")  # fmt: skip
    _print(counts | {"deliveries": deliveries, "resent": resent}, args.json, text)


def cmd_status(args: argparse.Namespace) -> None:
    local_rows, replicated = read_archive(
        args.db, lambda db: (db.max_seq(), int(db.get_meta("replicated_seq", "0") or 0))
    )
    replica = open_replica(args.replica, create=False)
    contents = read_contents(replica)
    manifest = contents.manifest
    status = {
        "replica": replica.describe(),
        "last_segment": contents.segments[-1] if contents.segments else None,
        "segments": len(contents.segments),
        "manifest": manifest.manifest if manifest else 0,
        "manifest_objects": len(manifest.objects) if manifest else 0,
        "manifest_last_segment": contents.covered,
        "compacted": len(contents.compacted),
        "manifests": len(contents.manifests),
        "objects": contents.objects,
        "epoch": len(contents.epochs) and segments.number(contents.epochs[-1]),
        "local_rows": local_rows,
        "replicated_seq": replicated,
        "lag_rows": local_rows - replicated,
    }
    _print(status, args.json, "\n".join(f"{k:<22} {v}" for k, v in status.items()))


def cmd_restore(args: argparse.Namespace) -> None:
    path = Path(args.db)
    existed = path.exists()
    if existed and not args.force:
        raise CliError(f"{path} exists; restore rebuilds a missing database (or pass --force)")
    replica = open_replica(args.replica, create=False)
    if not read_contents(replica).live:
        raise CliError(f"no segments in {replica.describe()}")
    if not path.parent.exists():
        private_dir(path.parent)
    lock = hold(Path(f"{path}.lock"), f"archive {path}")  # not under a running archiver
    try:
        files = [Path(f"{path}{suffix}") for suffix in ("", "-wal", "-shm")]
        for file in files if existed else ():
            file.unlink(missing_ok=True)
        try:
            n = restore(replica, path)
        except BaseException:
            for file in files:  # nothing half made is left behind
                file.unlink(missing_ok=True)
            raise
    finally:
        lock.release()
    data = {"restored": n, "replica": replica.describe(), "db": str(path)}
    _print(data, args.json, f"restored {n} notices from {replica.describe()} into {path}")


def cmd_archive(args: argparse.Namespace) -> None:
    if not args.url:
        raise CliError("archive needs --url (or ECHOMQ_URL), the server that holds the audit "
                       "stream; it never starts a server of its own", status=2)  # fmt: skip
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s: %(message)s")  # fmt: skip
    logging.getLogger("codemojex").setLevel(logging.INFO)
    trio.run(cancel_on_signal, _archive, args)  # a signal is a clean stop: it drains first


async def _archive(args: argparse.Namespace) -> None:
    from echomq_trio import jobs, open_bus

    async with open_bus(args.url) as bus:
        # Only on the server that holds the queue: else no epoch is claimed, nothing made.
        if not (await jobs.counts(bus, args.queue)).exists:
            raise CliError(f"no queue {args.queue!r} on {bus.url}: the wrong server or "
                           "database? (nothing archived)")  # fmt: skip
        replica = open_replica(args.replica)
        archiver = Archiver(bus, args.db, replica, queue=args.queue,
                            segment_rows=args.segment_rows,
                            segment_every_s=args.segment_every,
                            compact_segments=args.compact_segments,
                            compact_rows=args.compact_rows,
                            min_idle_ms=args.min_idle_ms,
                            forget_idle_ms=args.forget_idle_ms)  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(archiver.run)
            start = {"archiving": args.queue, "server": bus.url, "db": str(args.db),
                     "replica": replica.describe()}  # fmt: skip
            text = (f"archiving {args.queue} from {bus.url} into {args.db}, replicating to "
                    f"{replica.describe()} (Ctrl-C to stop)")  # fmt: skip
            print(json.dumps(start) if args.json else text, flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m codemojex.audit",
        description="Query, check and restore the audit archive, or run an archiver. "
        "query, counts and status only read.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("query", help="notices by chat and time range (read-only)")
    q.add_argument("--chat", type=int)
    q.add_argument("--since", help="from this time (ISO 8601 or Unix ms)")
    q.add_argument("--until", help="before this time (ISO 8601 or Unix ms)")
    q.add_argument("--limit", type=int, default=1000)
    q.add_argument("--json", action="store_true", help="print a JSON list of rows")
    c = sub.add_parser("counts", help="notices per outcome, deliveries, notices delivered more "
                       "than once (read-only)")  # fmt: skip
    c.add_argument("--json", action="store_true", help="print a JSON object")
    s = sub.add_parser("status", help="replica status: last segment, manifest, objects and lag "
                       "(read-only)")  # fmt: skip
    s.add_argument("--json", action="store_true", help="print a JSON object")
    r = sub.add_parser("restore", help="rebuild a missing database from the replica")
    r.add_argument("--force", action="store_true", help="replace an existing database")
    r.add_argument("--json", action="store_true", help="print a JSON object: rows, replica, db")
    a = sub.add_parser("archive", help="run an archiver until Ctrl-C or SIGTERM")
    a.add_argument("--url", default=os.environ.get("ECHOMQ_URL"),
                   help="the server that holds the audit stream (default: ECHOMQ_URL); "
                   "required: no server is started")  # fmt: skip
    a.add_argument("--queue", default=NOTIFY_QUEUE,
                   help="the audited queue (default: %(default)s)")  # fmt: skip
    a.add_argument("--segment-rows", type=int, default=DEFAULT_SEGMENT_ROWS,
                   help="rows per segment (default: %(default)s)")  # fmt: skip
    a.add_argument("--segment-every", type=float, default=DEFAULT_SEGMENT_EVERY_S,
                   help="seconds before fewer rows make a segment "
                   "(default: %(default)s)")  # fmt: skip
    a.add_argument("--compact-segments", type=int, default=DEFAULT_COMPACT_SEGMENTS,
                   help="compact the replica once this many segments follow its newest manifest "
                   "(default: %(default)s)")  # fmt: skip
    a.add_argument("--compact-rows", type=int, default=DEFAULT_COMPACT_ROWS,
                   help="compacted objects merge while they hold at most this many rows "
                   "(default: %(default)s)")  # fmt: skip
    a.add_argument("--min-idle-ms", type=int, default=DEFAULT_MIN_IDLE_MS,
                   help="take over records a crashed archiver left idle this many ms "
                   "(default: %(default)s)")  # fmt: skip
    a.add_argument("--forget-idle-ms", type=int, default=DEFAULT_FORGET_IDLE_MS,
                   help="remove members of the stream's group (past runs) that hold nothing and "
                   "have been idle this many ms (default: %(default)s)")  # fmt: skip
    a.add_argument("--json", action="store_true", help="print the start line as JSON")
    for sp in (q, c, s, r, a):
        sp.add_argument("--db", required=True, help="path of the SQLite archive")
    for sp in (s, r, a):
        sp.add_argument("--replica", required=True, help="a directory or s3://bucket/prefix")
    return p


COMMANDS = {"query": cmd_query, "counts": cmd_counts, "status": cmd_status,
            "restore": cmd_restore, "archive": cmd_archive}  # fmt: skip
KNOWN = (CliError, InUse, NotAnArchive, NoSuchName, ValueError, OSError, BusError, S3Unavailable)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()  # the reader went away (``| head``): end quietly
        return 1
    except (Exception, BaseExceptionGroup) as exc:
        known = first_error(exc, KNOWN)
        if known is None:
            raise
        print(f"codemojex.audit: {known}", file=sys.stderr)
        if isinstance(known, CliError):
            return known.status
        return 2 if isinstance(known, InUse) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
