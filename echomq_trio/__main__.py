"""``echomq`` / ``python -m echomq_trio``: inspect and repair queues on a running server.

    echomq [--url URL] [--json] stats QUEUE
    echomq ls QUEUE pending|scheduled|active|dead|repeat|lanes [--limit N]
    echomq show QUEUE JOB_ID
    echomq replay QUEUE JOB_ID | --all [--reason TEXT]
    echomq cancel-repeat QUEUE NAME
    echomq tail QUEUE

The server is ``--url``, else ``ECHOMQ_URL``, else ``redis://127.0.0.1:6379``. Errors are one
line on stderr and exit status 1 (2 for bad usage). A reader that stops early
(``echomq tail q | head``) ends the command quietly with exit status 141, as for a command
killed by SIGPIPE: no traceback, and no error message. SIGINT (Ctrl-C) or SIGTERM stops a
command cleanly with exit status 128 + N (130 for Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
import trio

from echomq_trio import events, ids, jobs, lanes, repeat
from echomq_trio.bus import Bus, open_bus
from echomq_trio.cli import CliError, Stopped, cancel_on_signal, silence_stdout
from echomq_trio.errors import BusError

DEFAULT_URL = "redis://127.0.0.1:6379"
REPLAY_PAGE = 100  # dead jobs read per round trip by `replay --all`
REPLAYED = jobs.Outcome.REPLAYED


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _short(data: bytes | str, width: int = 40) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


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


async def _stats(bus: Bus, args: argparse.Namespace) -> Any:
    c = await _known(bus, args.queue)
    if args.json:
        return c
    rows = [(f.name, getattr(c, f.name)) for f in attrs.fields(jobs.Counts) if f.name != "exists"]
    return _table(["", args.queue], rows)


async def _ls(bus: Bus, args: argparse.Namespace) -> Any:
    await _known(bus, args.queue)
    if args.what == "repeat":
        regs = await repeat.list_repeats(bus, args.queue, args.limit)
        if args.json:
            return regs
        return _table(
            ["name", "every_ms", "next_run", "group", "last_fired", "template"],
            [(r.name, r.every_ms, _when(r.next_run_ms), r.group or "-", _when(r.last_fired_ms),
              _short(r.template)) for r in regs],
        )  # fmt: skip
    if args.what == "lanes":
        status = await lanes.status(bus, args.queue)
        if args.json:
            return status
        return _table(
            ["group", "depth", "in_flight", "limit", "weight", "paused", "wait_until", "served"],
            [(s.group, s.depth, s.in_flight, s.limit or "-", s.weight, "yes" if s.paused else "",
              _when(s.wait_until_ms), "yes" if s.on_ring else "") for s in status],
        )  # fmt: skip
    rows = await jobs.list_jobs(bus, args.queue, args.what, 0, args.limit)
    if args.what == "pending":
        for lane in await lanes.status(bus, args.queue):
            if len(rows) < args.limit and lane.depth:
                rows += await lanes.jobs(bus, args.queue, lane.group, 0, args.limit - len(rows))
    if args.json:
        return rows
    when_title = {"scheduled": "run_at", "active": "lease_until", "dead": "died"}.get(args.what, "")
    return _table(
        ["id", "attempts", "group", when_title or "-", "last_error", "payload"],
        [(r.id, r.attempts, r.group or "-", _when(r.score_ms), _short(r.last_error or "-"),
          _short(r.payload)) for r in rows],
    )  # fmt: skip


def _job_id(value: str) -> str:
    """The job an id names: a job's own id, or, for a branded id of another namespace (a
    codemojex notice's ``NOT`` id), the job minted with it: ``JOB`` and the same snowflake."""
    if ids.is_valid(value) and ids.namespace(value) != "JOB":
        return "JOB" + value[3:]
    return value


async def _show(bus: Bus, args: argparse.Namespace) -> Any:
    await _known(bus, args.queue)
    info = await jobs.get_job(bus, args.queue, _job_id(args.job_id))
    if info is None:
        raise CliError(f"no job {args.job_id} in {args.queue!r} (never enqueued, or finished)")
    if args.json:
        return info
    return _table(
        ["field", "value"],
        [("id", info.id), ("state", info.state), ("attempts", info.attempts),
         ("group", info.group or "-"), ("time", _when(info.score_ms)),
         ("last_error", info.last_error or "-"), ("payload", _short(info.payload, 200))],
    )  # fmt: skip


async def _replay(bus: Bus, args: argparse.Namespace) -> Any:
    known = await _known(bus, args.queue)
    if args.all == (args.job_id is not None):
        raise CliError("replay needs a JOB_ID or --all (not both)", status=2)
    if args.all:
        return await _replay_all(bus, args, known.dead)
    if args.reason is not None:
        raise CliError("--reason goes with --all", status=2)
    args.job_id = _job_id(args.job_id)
    outcome = await jobs.replay(bus, args.queue, args.job_id)
    if outcome is jobs.Outcome.GONE:
        raise CliError(f"no job {args.job_id} in {args.queue!r}")
    if outcome is jobs.Outcome.NOT_DEAD:
        raise CliError(f"job {args.job_id} is not dead; only dead jobs can be replayed")
    return {"replayed": args.job_id} if args.json else f"replayed {args.job_id}"


async def _replay_all(bus: Bus, args: argparse.Namespace, dead: int) -> Any:
    """Replay every dead job (whose last error contains ``--reason``), a page at a time: one
    script per job, at most as many as were dead at the start (a job that dies again while
    this runs is not replayed twice)."""
    replayed, offset = 0, 0
    while replayed < dead:
        page = await jobs.dead_jobs(bus, args.queue, offset, REPLAY_PAGE)
        if not page:
            break
        for info in page:
            if args.reason is not None and args.reason not in (info.last_error or ""):
                offset += 1
            elif replayed < dead and await jobs.replay(bus, args.queue, info.id) is REPLAYED:
                replayed += 1
    return {"replayed": replayed} if args.json else f"replayed {replayed} dead jobs"


async def _cancel_repeat(bus: Bus, args: argparse.Namespace) -> Any:
    await _known(bus, args.queue)
    if not await repeat.cancel(bus, args.queue, args.name):
        raise CliError(f"no recurring schedule {args.name!r} in {args.queue!r}")
    return {"cancelled": args.name} if args.json else f"cancelled {args.name}"


async def _tail(bus: Bus, args: argparse.Namespace) -> Any:
    await _known(bus, args.queue)
    async for event in events.follow(bus, args.queue):
        if args.json:
            print(json.dumps(_jsonable(event) | {"time_ms": event.time_ms}), flush=True)
        else:
            extra = " ".join(f"{k}={v}" for k, v in event.fields.items())
            print(f"{_when(event.time_ms)}  {event.kind:<10} {event.subject}  {extra}".rstrip(),
                  flush=True)  # fmt: skip
    return None


COMMANDS = {
    "stats": _stats,
    "ls": _ls,
    "show": _show,
    "replay": _replay,
    "cancel-repeat": _cancel_repeat,
    "tail": _tail,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="echomq", description="Inspect echomq_trio queues.")
    p.add_argument("--url", default=os.environ.get("ECHOMQ_URL", DEFAULT_URL),
                   help="server URL (default: $ECHOMQ_URL or %(default)s)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stats", help="jobs per state and running totals")
    s.add_argument("queue")
    s = sub.add_parser("ls", help="list jobs in a state, recurring schedules, or lanes")
    s.add_argument("queue")
    s.add_argument("what", choices=["pending", "scheduled", "active", "dead", "repeat", "lanes"])
    s.add_argument("--limit", type=int, default=50)
    s = sub.add_parser("show", help="one job's row")
    s.add_argument("queue")
    s.add_argument("job_id")
    s = sub.add_parser("replay", help="move a dead job (or every one: --all) back to pending")
    s.add_argument("queue")
    s.add_argument("job_id", nargs="?")
    s.add_argument("--all", action="store_true", help="every dead job of the queue")
    s.add_argument("--reason", help="with --all: only those whose last error contains this")
    s = sub.add_parser("cancel-repeat", help="remove a recurring schedule")
    s.add_argument("queue")
    s.add_argument("name")
    s = sub.add_parser("tail", help="follow the queue's events (Ctrl-C to stop)")
    s.add_argument("queue")
    return p


async def _command(args: argparse.Namespace) -> Any:
    async with open_bus(args.url) as bus:
        return await COMMANDS[args.command](bus, args)


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
