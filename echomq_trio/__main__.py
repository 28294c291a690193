"""``echomq`` / ``python -m echomq_trio``: inspect and repair queues on a running server, and
repair or restore a stopped embedded server's append-only file.

    echomq [--url URL | --data-dir DIR] [--json] stats QUEUE
    echomq ls QUEUE pending|scheduled|active|dead|cancelled|repeat|lanes [--limit N]
    echomq show QUEUE JOB_ID
    echomq flow QUEUE JOB_ID [--limit N]
    echomq result QUEUE JOB_ID [--timeout S]
    echomq replay QUEUE JOB_ID | --all [--reason TEXT]
    echomq cancel QUEUE JOB_ID [--reason TEXT] [--by NAME]
    echomq cancel-repeat QUEUE NAME
    echomq pause QUEUE | resume QUEUE
    echomq limit QUEUE N|none
    echomq expired QUEUE dead|drop
    echomq delete QUEUE JOB_ID
    echomq delete QUEUE --state pending|scheduled [--group G] [--older-than S] [--limit N]
    echomq tail QUEUE
    echomq queues
    echomq dashboard [--host 127.0.0.1] [--port 8090]
    echomq repair --data-dir DIR
    echomq restore --data-dir DIR [--from COPY]

``repair`` and ``restore`` work on a stopped embedded server's files in its data directory
(``--data-dir DIR``; ``echomq_trio.repair``), never on a running server. The others reach a
server: ``--url``, else the one ``--data-dir DIR`` records (``DIR/server.json``, written
by the owner of an embedded server: ``echomq_trio._address``), else ``ECHOMQ_URL``, else the one
``./codemojex-data`` records (``python -m codemojex.run``'s default data directory; a line on
stderr says so), else ``redis://127.0.0.1:6379``. Every subcommand takes these options too
(``echomq queues --data-dir DIR``). A CLI never starts a server. Errors are one line on stderr
and exit status 1 (2 for bad usage); a record whose server does not answer is one naming the
directory. A reader that stops early (``echomq tail q | head``) ends the command quietly with
exit status 141, as for a command killed by SIGPIPE: no traceback, and no error message. SIGINT
(Ctrl-C) or SIGTERM stops a command cleanly with exit status 128 + N (130 for Ctrl-C).
A partitioned queue (``echomq_trio.partitions``) is one queue to every command that takes
QUEUE (``echomq_trio._one_queue``): its partitions merged, read or set at once; a partition's
own name names that partition alone (said on stderr); ``limit`` refuses a partitioned queue.
``result`` waits for a job of a queue that keeps results (``jobs.result``) and prints its result
(nothing for none); a dead, cancelled or unknown job is an error line and exit status 1, a job
not finished within ``--timeout`` exit status 124 (as ``timeout(1)``).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from echomq_trio import (
    _address,
    cron,
    flows,
    ids,
    jobs,
    partitions,
    protocol,
    queues,
    repair,
    repeat,
    retention,
)
from echomq_trio._one_queue import lanes_of, list_jobs, open_queue
from echomq_trio._opening import open_bus
from echomq_trio.bus import Bus
from echomq_trio.errors import (
    AuthenticationFailed,
    BusError,
    ConnectionLost,
    JobError,
    ResultTimedOut,
)
from echomq_trio.partitions import PartitionedQueue
from echomq_trio.results import Retention
from servicekit import humane
from servicekit.cli import CliError, Stopped, cancel_on_signal, silence_stdout

DEFAULT_URL = "redis://127.0.0.1:6379"
# Looked for in the current directory when no server is named: the default data directory of
# ``python -m codemojex.run`` (codemojex.settings.Settings.data_dir; a test checks they agree).
FOUND_DATA_DIR = Path("codemojex-data")
REPLAY_PAGE = 100  # dead jobs read per round trip by `replay --all`
DELETE_PAGE = 1000  # jobs looked at per round trip by `delete --state`


def _short(data: bytes | str, width: int = 40) -> str:
    return humane.payload_text(data, width)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if attrs.has(type(value)):
        return {k: _jsonable(v) for k, v in attrs.asdict(value, recurse=False).items()}
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


async def _known(bus: Bus, queue: str) -> jobs.Counts:
    counts = await jobs.counts(bus, queue)
    if not counts.exists:
        raise CliError(f"unknown queue {queue!r} on {bus.url}: nothing was ever enqueued there")
    return counts


async def _opened(bus: Bus, queue: str) -> PartitionedQueue:
    """The queue a command names, known (``_known``), as one queue (``open_queue``)."""
    pq = await open_queue(bus, queue)
    await _known(bus, queue)
    return pq


async def _stats(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    n = pq.n
    # a partitioned queue: its partitions' counts added up (its retention, controls: 0's)
    c = await pq.counts()
    kept = await retention.get(bus, args.queue)
    control = await queues.control(bus, args.queue)
    if args.json:  # the counts' fields, the retention and the controls under their own names
        return _jsonable(c) | {"partitions": n, "retention": kept, "control": _jsonable(control)}
    rows = [(f.name, getattr(c, f.name)) for f in attrs.fields(jobs.Counts) if f.name != "exists"]
    rows += [("partitions", n)] if n > 1 else []
    rows += [
        (f"retention.{f.name}", _bound(getattr(kept, f.name))) for f in attrs.fields(Retention)
    ]
    now = await bus.transport.server_time_ms()
    paused = "no" if control.paused_since_ms is None else humane.at(control.paused_since_ms, now)
    rows += [("paused", paused), ("max_active", _bound(control.max_active)),
             ("expired", control.expired)]  # fmt: skip
    return _table(["", args.queue], rows)


def _schedule(reg: repeat.Registration) -> str:
    """``every 1 h`` or the cron expression."""
    return reg.cron if reg.cron is not None else f"every {humane.span(reg.every_ms or 0)}"


def _next_runs(reg: repeat.Registration) -> tuple[str, str]:
    """The next 3 runs in the schedule's zone and in UTC, ``", "``-joined."""
    try:
        runs = repeat.next_runs(reg, 3)
    except ValueError:  # a zone this machine's database lacks
        return "?", "?"
    tz = reg.tz or "UTC"
    return ", ".join(cron.local_text(t, tz) for t in runs), ", ".join(humane.iso(t) for t in runs)


def _bound(value: object) -> object:
    return "none" if value is None else value


async def _ls(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    now = await bus.transport.server_time_ms()
    if args.what == "repeat":
        regs = await pq.list_repeats(args.limit)
        if args.json:
            return [{**attrs.asdict(r), "next_runs": repeat.next_runs(r)} for r in regs]
        return _table(
            ["name", "schedule", "zone", "next_run", "then (local)", "then (UTC)", "group",
             "last_fired", "template"],
            [(r.name, _schedule(r), r.tz or "-", humane.at(r.next_run_ms, now),
              *_next_runs(r), r.group or "-", humane.at(r.last_fired_ms, now),
              _short(r.template)) for r in regs],
        )  # fmt: skip
    if args.what == "lanes":
        status = await lanes_of(pq, args.limit)
        if args.json:
            return status
        return _table(
            ["group", "depth", "in_flight", "limit", "weight", "paused", "wait_until", "served"],
            [(s.group, s.depth, s.in_flight, s.limit or "-", s.weight, "yes" if s.paused else "",
              humane.at(s.wait_until_ms, now), "yes" if s.on_ring else "") for s in status],
        )  # fmt: skip
    rows = await list_jobs(pq, args.what, 0, args.limit)
    if args.what == "pending":
        for lane in await lanes_of(pq, args.limit):
            if len(rows) < args.limit and lane.depth:
                rows += await pq.lane_jobs(lane.group, 0, args.limit - len(rows))
    if args.json:
        return rows
    when_title = {"scheduled": "run_at", "active": "lease_until", "dead": "died"}.get(args.what, "")
    return _table(
        ["id", "attempts", "priority", "group", when_title or "-", "last_error", "payload"],
        [(r.id, r.attempts, r.priority, r.group or "-", humane.at(r.score_ms, now),
          _short(r.last_error or "-"), _short(r.payload)) for r in rows],
    )  # fmt: skip


def _job_id(value: str) -> str:
    """The job an id names: a job's own id, or, for a branded id of another namespace (a
    codemojex notice's ``NOT`` id), the job minted with it: ``JOB`` and the same snowflake."""
    if ids.is_valid(value) and ids.namespace(value) != "JOB":
        return "JOB" + value[3:]
    return value


async def _show(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    found = await pq.find(_job_id(args.job_id))
    if found is None:
        raise CliError(f"no job {args.job_id} in {args.queue!r} (never enqueued, or finished)")
    where, info = found
    if args.json:
        return info
    now = await bus.transport.server_time_ms()
    rows: list[tuple[str, object]] = [
        ("id", info.id), ("state", info.state), ("attempts", info.attempts),
        ("priority", info.priority), ("group", info.group or "-"),
        ("time", humane.at(info.score_ms, now)),
        ("last_error", info.last_error or "-"), ("payload", _short(info.payload, 200)),
    ]  # fmt: skip
    if info.expires_ms is not None:
        rows.append(("expires", humane.at(info.expires_ms, now)))
    if info.debounce is not None:
        rows.append(("debounce", info.debounce))
    if info.progress is not None:
        rows.append(("progress", json.dumps(info.progress)))
    if info.finished_ms is not None:
        rows.append(("finished", humane.at(info.finished_ms, now)))
    if info.result is not None:
        rows.append(("result", _short(info.result, 200)))
    if pq.n > 1:  # which partition holds it (a flow's jobs are in that one)
        rows.append(("partition", f"{pq.names.index(where)} ({where})"))
    row = await flows.tree(bus, where, info.id, max_jobs=1)
    if row is not None and row.parent is not None:
        rows.append(("parent", f"{_ref(*row.parent, pq)} ({row.parent_state or 'gone'})"))
    if row is not None and row.unfinished is not None:
        kids = await flows.children(bus, where, info.id)
        states = ", ".join(f"{c.id} {c.state or 'gone'}" for c in kids)
        rows.append(("children", f"{row.unfinished} of {len(kids)} not ended: {states}"))
    return _table(["field", "value"], rows)


def _ref(queue: str, job_id: str, here: PartitionedQueue) -> str:
    """A job of a flow as the CLI names it: its id, and its queue when not ``here`` (the queue
    the command names, any of its partitions)."""
    return job_id if queue in here.names else f"{queue}/{job_id}"


async def _flow(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    job_id = _job_id(args.job_id)
    where = await pq.holder(job_id) if pq.n > 1 else pq.name
    tree = await flows.tree(bus, where, job_id, max_jobs=args.limit)
    if tree is None:
        raise CliError(f"no job {args.job_id} in {args.queue!r} (never enqueued, or finished)")
    if args.json:
        return tree
    lines = []
    if tree.parent is not None:
        lines.append(f"parent {_ref(*tree.parent, pq)} ({tree.parent_state or 'gone'})")
    for depth, node in flows.outline(tree):
        note = ""
        if node.unfinished:
            note = f"  waits for {node.unfinished} of {len(node.children) + node.more}"
        if node.error:
            note += f"  ignored: {node.error}"
        elif node.result is not None:
            note += f"  result: {_short(node.result)}"
        lines.append(f"{'  ' * depth}{_ref(node.queue, node.id, pq)}  "
                     f"{node.state or 'gone'}{note}")  # fmt: skip
        if node.more:
            lines.append(f"{'  ' * (depth + 1)}... {node.more} more")
    return "\n".join(lines)


RESULT_TIMED_OUT = 124  # the exit status of `echomq result` past its --timeout, as timeout(1)


async def _result(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    job_id = _job_id(args.job_id)
    try:
        got = await pq.result(job_id, timeout_s=args.timeout)
    except ResultTimedOut as exc:
        raise CliError(str(exc), RESULT_TIMED_OUT) from None
    except JobError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        return {"id": job_id, "result": got}
    return None if got is None else got.decode(errors="replace")


async def _replay(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    if args.all == (args.job_id is not None):
        raise CliError("replay needs a JOB_ID or --all (not both)", status=2)
    if args.all:
        replayed = await pq.replay_all(args.reason, page=REPLAY_PAGE)
        return {"replayed": replayed} if args.json else f"replayed {replayed} dead jobs"
    if args.reason is not None:
        raise CliError("--reason goes with --all", status=2)
    args.job_id = _job_id(args.job_id)
    outcome = await pq.replay(args.job_id)
    if outcome is jobs.Outcome.GONE:
        raise CliError(f"no job {args.job_id} in {args.queue!r}")
    if outcome is jobs.Outcome.NOT_DEAD:
        raise CliError(f"job {args.job_id} is not dead; only dead jobs can be replayed")
    return {"replayed": args.job_id} if args.json else f"replayed {args.job_id}"


def _who() -> str:
    """Who cancels from the command line, when ``--by`` does not say: ``cli:<user>``."""
    try:
        return "cli:" + getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid
        return "cli"


async def _cancel(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    args.job_id = _job_id(args.job_id)
    by = args.by if args.by is not None else _who()
    outcome = await pq.cancel(args.job_id, args.reason, by)
    if outcome is jobs.Cancelled.NOT_FOUND:
        raise CliError(f"no job {args.job_id} in {args.queue!r} (never enqueued, or finished)")
    if outcome is jobs.Cancelled.ALREADY_DONE:
        raise CliError(f"job {args.job_id} is dead or cancelled already; nothing changed")
    return {"cancelled": args.job_id} if args.json else f"cancelled {args.job_id}"


async def _cancel_repeat(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    if not await pq.cancel_repeat(args.name):
        raise CliError(f"no recurring schedule {args.name!r} in {args.queue!r}")
    return {"cancelled": args.name} if args.json else f"cancelled {args.name}"


async def _pause(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    now = await pq.pause()
    if args.json:
        return {"queue": args.queue, "paused": True, "already": not now}
    return f"paused {args.queue}" if now else f"{args.queue} was paused already"


async def _resume(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    was = await pq.resume()
    if args.json:
        return {"queue": args.queue, "paused": False, "was_paused": was}
    return f"resumed {args.queue}" if was else f"{args.queue} was not paused"


def _cap(text: str) -> int | None:
    """``limit``'s argument: a number of jobs (>= 1), or ``none``."""
    if text.lower() == "none":
        return None
    try:
        n = int(text)
    except ValueError:
        raise CliError(f"limit takes a number of jobs (>= 1) or none, got {text!r}", 2) from None
    if n < 1:
        raise CliError(f"limit takes a number of jobs (>= 1) or none, got {n}", status=2)
    return n


async def _limit(bus: Bus, args: argparse.Namespace) -> Any:
    cap = _cap(args.max_active)
    pq = await open_queue(bus, args.queue)
    if pq.n > 1:  # the whole queue's cap, shared out over its partitions
        got = await pq.set_limit(cap)
        now, active = got.total, got.active
    else:
        await _known(bus, args.queue)
        now, active = await queues.set_limit(bus, args.queue, cap)
    if args.json:
        return {"queue": args.queue, "max_active": now, "active": active}
    if now is None:
        return f"{args.queue}: no cap on jobs in flight ({active} in flight now)"
    return f"{args.queue}: at most {now} jobs in flight ({active} in flight now)"


async def _expired(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    now = await pq.set_expired(args.action)
    if args.json:
        return {"queue": args.queue, "expired": now}
    kept = "kept dead (reason: expired)" if now == "dead" else "deleted (counted)"
    return f"{args.queue}: a job a claim meets past its expiry is {kept}"


async def _delete(bus: Bus, args: argparse.Namespace) -> Any:
    if (args.job_id is None) == (args.state is None):
        raise CliError("delete needs a JOB_ID or --state (not both)", status=2)
    if args.job_id is not None and (args.group, args.older_than, args.limit) != (None,) * 3:
        raise CliError("--group, --older-than and --limit go with --state", status=2)
    pq = await _opened(bus, args.queue)
    if args.job_id is not None:
        return await _delete_one(pq, args, _job_id(args.job_id))
    older = None if args.older_than is None else round(args.older_than * 1000)
    most = args.limit
    if most is not None and most < 1:
        raise CliError(f"--limit must be >= 1, got {most}", status=2)
    deleted = await pq.delete_all(
        args.state, group=args.group, older_than_ms=older, limit=most, page=DELETE_PAGE
    )
    if args.json:
        return {"deleted": deleted}
    return f"deleted {deleted} {args.state} jobs"


async def _delete_one(pq: PartitionedQueue, args: argparse.Namespace, job_id: str) -> Any:
    outcome = await pq.delete(job_id)
    if outcome is jobs.Outcome.GONE:
        raise CliError(f"no job {job_id} in {args.queue!r} (never enqueued, or finished)")
    if outcome is jobs.Outcome.RUNNING:
        raise CliError(f"job {job_id} is running: it is not deleted (cancel it instead)")
    if outcome is jobs.Outcome.NOT_WAITING:
        raise CliError(
            f"job {job_id} is not waiting (dead: discard it from the dashboard); only pending "
            "and scheduled jobs are deleted"
        )
    return {"deleted": job_id} if args.json else f"deleted {job_id}"


async def _tail(bus: Bus, args: argparse.Namespace) -> Any:
    pq = await _opened(bus, args.queue)
    # a partitioned queue: every partition's events, each round's in time order
    async for where, event in pq.follow_events():
        if args.json:
            part = {"partition": pq.names.index(where)} if pq.n > 1 else {}
            print(json.dumps(_jsonable(event) | {"time_ms": event.time_ms} | part), flush=True)
        else:
            extra = " ".join(f"{k}={v}" for k, v in event.fields.items())
            when = humane.iso(event.time_ms)
            print(f"{when}  {event.kind:<10} {event.subject}  {extra}".rstrip(), flush=True)
    return None


async def _queues(bus: Bus, args: argparse.Namespace) -> Any:
    names = await queues.queue_names(bus)
    # a partitioned queue is one row: each partition's counts folded into its queue's
    # (partitions.membership); its controls are partition 0's
    parts: dict[str, list[jobs.Counts]] = {}
    for name in names:
        of = (await partitions.membership(bus, name)).of
        parts.setdefault(of or name, []).append(await jobs.counts(bus, name))
    counted = [(name, partitions.sum_counts(cs), len(cs), await queues.control(bus, name))
               for name, cs in sorted(parts.items())]  # fmt: skip
    if args.json:
        return [{"queue": name} | _jsonable(c) | {"partitions": n, "control": _jsonable(ctl)}
                for name, c, n, ctl in counted]  # fmt: skip
    if not counted:
        return f"no queues on {bus.url}"
    return _table(
        ["queue", "pending", "scheduled", "active", "dead", "lanes", "repeats", "completed",
         "paused", "max_active", "partitions"],
        [(name, c.pending, c.scheduled, c.active, c.dead, c.lanes, c.repeats, c.completed_total,
          "yes" if ctl.paused else "-", ctl.max_active or "-", n)
         for name, c, n, ctl in counted],
    )  # fmt: skip


async def _dashboard(bus: Bus, args: argparse.Namespace) -> Any:
    # Imported here: the web server's modules cost the other commands 0.1 s of start-up.
    from echomq_trio.dashboard import Dashboard, new_token

    token = os.environ.get("ECHOMQ_DASHBOARD_TOKEN") or new_token()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(Dashboard(bus, token).serve, args.host, args.port)
        print(f"echomq dashboard for {bus.url}: {url}/#token={token}", flush=True)
        print("  (the token lets the page replay or delete dead jobs; Ctrl-C stops)", flush=True)
    return None


def _data_dir_of(args: argparse.Namespace) -> Path:
    """The data directory ``repair`` and ``restore`` work on: ``--data-dir``, before or after
    the command's name (they never read a record or reach a server)."""
    if getattr(args, "data_dir", None) is None:
        raise CliError(f"{args.command} needs --data-dir DIR: the stopped server's data directory")
    return Path(args.data_dir)


async def _repair(args: argparse.Namespace) -> Any:
    try:
        done = await repair.repair(_data_dir_of(args))
    except repair.RepairError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        return {"data_dir": str(done.data_dir), "repaired": done.record}
    return repair.describe_repair(done)


async def _restore(args: argparse.Namespace) -> Any:
    try:
        record = await repair.restore(_data_dir_of(args), args.source)
    except repair.RepairError as exc:
        raise CliError(str(exc)) from None
    return record if args.json else repair.describe_restore(_data_dir_of(args), record)


OFFLINE = {"repair": _repair, "restore": _restore}  # a stopped server's files: no connection

COMMANDS = {
    "stats": _stats,
    "ls": _ls,
    "show": _show,
    "flow": _flow,
    "result": _result,
    "replay": _replay,
    "cancel": _cancel,
    "cancel-repeat": _cancel_repeat,
    "pause": _pause,
    "resume": _resume,
    "limit": _limit,
    "expired": _expired,
    "delete": _delete,
    "tail": _tail,
    "queues": _queues,
    "dashboard": _dashboard,
}


CONNECTION_HELP = (
    "The server is --url, else the one --data-dir records, else $ECHOMQ_URL, else the one "
    f"./{FOUND_DATA_DIR} records (the default data directory of python -m codemojex.run; a line "
    f"on stderr says when it is used), else {DEFAULT_URL}. A URL's password on a command line is "
    "on show to every user of the machine: prefer ECHOMQ_URL or --data-dir."
)


def _common_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command takes, before or after its name. Below the top they default to
    nothing at all (SUPPRESS), so they do not undo one given before the command's name."""
    unset: Any = None if top else argparse.SUPPRESS
    which = p.add_argument_group("which server", CONNECTION_HELP)
    which.add_argument("--url", default=unset, help="server URL (or set ECHOMQ_URL)")
    which.add_argument(
        "--data-dir", default=unset, metavar="DIR",
        help="the data directory of a service with an embedded server (python -m "
             "codemojex.run --data-dir): the server it records in DIR/server.json",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", default=False if top else argparse.SUPPRESS,
                   help="machine-readable output")  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="echomq", description="Inspect echomq_trio queues.")
    _common_options(p, top=True)
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, top=False)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, parents=[common])

    s = command("stats", "jobs per state and running totals (of every partition of a "
                "partitioned queue)")  # fmt: skip
    s.add_argument("queue")
    s = command("ls", "list jobs in a state, recurring schedules, or lanes")
    s.add_argument("queue")
    s.add_argument("what", choices=[*map(str, jobs.JobState), "repeat", "lanes"])
    s.add_argument("--limit", type=int, default=50)
    s = command("show", "one job's row")
    s.add_argument("queue")
    s.add_argument("job_id")
    s = command("flow", "a job's flow: its parent, and its children as a tree, with states")
    s.add_argument("queue")
    s.add_argument("job_id")
    s.add_argument("--limit", type=int, default=200, help="jobs read at most (one call each)")
    s = command("result", "wait for a job's result and print it (its queue keeps results)")
    s.add_argument("queue")
    s.add_argument("job_id")
    s.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="seconds to wait (%(default)s); past it, exit status 124")  # fmt: skip
    s = command("replay", "move a dead job (or every one: --all) back to pending")
    s.add_argument("queue")
    s.add_argument("job_id", nargs="?")
    s.add_argument("--all", action="store_true", help="every dead job of the queue")
    s.add_argument("--reason", help="with --all: only those whose last error contains this")
    s = command("cancel", "cancel a job: a waiting one never runs, a running one's handler is "
                "stopped; exit status 0 only when this cancelled it")  # fmt: skip
    s.add_argument("queue")
    s.add_argument("job_id")
    s.add_argument("--reason", default="", help="why (kept with the job, its event and audit)")
    s.add_argument("--by", help="who cancels (default: cli:<your user name>)")
    s = command("cancel-repeat", "remove a recurring schedule")
    s.add_argument("queue")
    s.add_argument("name")
    s = command("pause", "pause the whole queue: nothing is claimed until resume")
    s.add_argument("queue")
    s = command("resume", "end the queue's pause")
    s.add_argument("queue")
    s = command("limit", "cap the queue's jobs in flight across every worker (none: no cap)")
    s.add_argument("queue")
    s.add_argument("max_active", metavar="N|none")
    s = command("expired", "what a claim does with a job past its expiry: dead (keep) or drop")
    s.add_argument("queue")
    s.add_argument("action", choices=protocol.EXPIRED_ACTIONS)
    s = command("delete", "delete a waiting or scheduled job, or (--state) those of a filter")
    s.add_argument("queue")
    s.add_argument("job_id", nargs="?")
    s.add_argument(
        "--state",
        choices=protocol.DELETE_STATES,
        help="delete the jobs in this state (pending: the flat set, or --group's lane)",
    )
    s.add_argument("--group", help="with --state: only the jobs of this lane")
    s.add_argument(
        "--older-than",
        type=float,
        metavar="S",
        help="with --state: only jobs enqueued at least S seconds ago",
    )
    s.add_argument("--limit", type=int, help="with --state: delete at most N jobs")
    s = command("tail", "follow the queue's events (Ctrl-C to stop)")
    s.add_argument("queue")
    command("queues", "every queue on the server, with its counts (a partitioned queue's "
            "partitions folded into its row)")  # fmt: skip
    s = command("dashboard", "serve the bus dashboard (a web page; Ctrl-C to stop)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (%(default)s)")
    s.add_argument("--port", type=int, default=8090, help="port (%(default)s; 0: any free one)")
    offline = argparse.ArgumentParser(add_help=False)
    offline.add_argument("--data-dir", default=argparse.SUPPRESS, metavar="DIR",
                         help="the stopped server's data directory (codemojex's: "
                         "codemojex-data); needed")  # fmt: skip
    offline.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                         help="machine-readable output")  # fmt: skip
    sub.add_parser("repair", parents=[offline], help="cut a stopped embedded server's damaged "
                   "append-only file at the damage (keeps a copy; says what was cut)")  # fmt: skip
    s = sub.add_parser("restore", parents=[offline], help="put an older copy of a stopped "
                       "embedded server's append-only files in place (keeps the current ones), "
                       "or record that they were put in place by hand")  # fmt: skip
    s.add_argument("--from", dest="source", type=Path,
                   help="a copy of a data directory, of its appendonlydir/ or of its "
                   "appendonly.aof; without it, only record a restore made by hand")  # fmt: skip
    return p


@attrs.frozen
class Target:
    """The server a command talks to: its URL; the data directory whose record named it (and
    the record); a line to say before connecting; whether it is the default, named by nothing."""

    url: str
    data_dir: Path | None = None
    record: _address.ServerAddress | None = None
    note: str | None = None
    default: bool = False

    def unreachable(self, exc: ConnectionLost) -> Exception:
        """The error for a connection refused before the command connected."""
        if self.data_dir is not None and self.record is not None:
            return _address.not_answering(self.data_dir, self.record)
        if self.default:
            return CliError(
                f"{exc} (no server named: pass --url URL or set ECHOMQ_URL, or --data-dir DIR "
                "for a service's embedded server)"
            )
        return exc


def _recorded(data_dir: Path) -> Target:
    url, record = _address.url_of(data_dir)
    return Target(url, data_dir, record)


def target(url: str | None, data_dir: str | None, environ: Mapping[str, str], cwd: Path) -> Target:
    """Which server (see ``CONNECTION_HELP``). ``ServerNotRunning`` for a data directory that
    records none running (a stale record shows only on connecting: ``Target.unreachable``)."""
    if url is not None and data_dir is not None:
        raise CliError("give --url or --data-dir, not both", status=2)
    if url is not None:
        return Target(url)
    if data_dir is not None:
        return _recorded(Path(data_dir))
    if environ.get("ECHOMQ_URL"):
        return Target(environ["ECHOMQ_URL"])
    if (cwd / FOUND_DATA_DIR / _address.ADDRESS_FILE).exists():
        found = _recorded(cwd / FOUND_DATA_DIR)
        assert found.record is not None
        where = f"{found.record.host}:{found.record.port}"
        note = (f"echomq: using the server recorded in {found.data_dir} ({where}); --url or "
                "--data-dir names another")  # fmt: skip
        return attrs.evolve(found, note=note)
    return Target(DEFAULT_URL, default=True)


async def _command(args: argparse.Namespace) -> Any:
    if args.command in OFFLINE:
        return await OFFLINE[args.command](args)
    server = target(args.url, args.data_dir, os.environ, Path.cwd())
    connected = False
    try:
        async with open_bus(server.url) as bus:
            connected = True
            if server.note is not None:  # once connected: a stale record is one line alone
                print(server.note, file=sys.stderr, flush=True)
            return await COMMANDS[args.command](bus, args)
    except ConnectionLost as exc:
        if connected or isinstance(exc, AuthenticationFailed):
            raise
        raise server.unreachable(exc) from None


async def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        result = await cancel_on_signal(_command, args)
    except (CliError, ValueError, BusError) as exc:
        print(f"echomq: {exc}", file=sys.stderr)
        return exc.status if isinstance(exc, CliError) else 1
    if isinstance(result, Stopped):
        return result.exit_status
    if result is not None:
        print(json.dumps(_jsonable(result), indent=2) if args.json else result)
    return 0


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a command the signal ended


def main() -> None:
    try:
        status = trio.run(run)
        sys.stdout.flush()  # output still buffered meets a closed pipe here, not at exit
    except KeyboardInterrupt:  # before the signals were handled: at start-up
        sys.exit(130)
    except BrokenPipeError:
        silence_stdout()  # the reader is gone
        sys.exit(EXIT_BROKEN_PIPE)
    sys.exit(status)


if __name__ == "__main__":
    main()
