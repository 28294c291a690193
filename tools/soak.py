"""Soak: run ``python -m codemojex.run`` for a while under load and check nothing grows unbounded.

    python3 tools/soak.py --minutes 30 [--rate 12] [--chats 400] [--viewers 5] [--every 30]

It starts the service on a fresh data directory (embedded server, the local Telegram stand-in,
the demo, the archiver), adds a steady load of notices on top of the demo (``--rate`` a second,
well inside the 30/s budget, to ``--chats`` private chats: a compressed month of a busy bot),
keeps ``--viewers`` websocket viewers on the live feed, and samples every ``--every`` seconds:

* the service process: resident memory (``VmRSS``) and open file descriptors;
* the embedded server: ``used_memory`` and its resident memory, and the number of keys by
  pattern (ids and numbers folded into ``<id>``/``<n>``, so one pattern per kind of key);
* the archive's rows and the replica's objects, the notices settled on the bus and the notify
  queue's backlog (pending and scheduled: it grows when the load outruns the budget).

What is bounded by a threshold or a lifetime plateaus only once that is reached, so the service
runs with its own settings scaled down to fit a soak (``--compact-segments 20`` instead of 200,
``--round-keep 120`` seconds instead of an hour): the same mechanisms, within the warm-up.

After a warm-up (the first fifth of the samples) it fits a line to each measure and reports its
slope per hour and per 1,000 notices, against a stated bound; it exits 1 if any measure grows
faster than its bound. It prints ONE JSON object on stdout; progress goes to stderr. This is a
tool, not a test: it takes as long as you ask.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
from _bench import proc_status_kib, stop_service
from trio_websocket import ConnectionClosed, open_websocket_url

from codemojex.notify.notifier import NOTIFY_QUEUE, notify
from echomq_trio import Bus, BusError, jobs, open_bus
from echomq_trio._replies import as_text

ROOT = Path(__file__).resolve().parents[1]
KIB = 1024

# What each measure may grow by, at most: per hour of running, and per 1,000 notices settled.
# Everything in a service that runs for a month must be flat once warm, except the archive,
# which keeps one row per notice by design.
BOUNDS: dict[str, tuple[float, float]] = {
    "service_rss_kib": (2 * KIB, 50),  # 2 MiB an hour: noise of a Python heap, not a leak
    "service_fds": (10, 0.2),  # a leak of descriptors shows as a steady climb
    "server_used_kib": (2 * KIB, 50),
    "server_rss_kib": (4 * KIB, 100),
    "keys_total": (50, 5),
    "notify_pending": (50, 5),  # a backlog that grows: the load is more than the budget's pace
    "replica_objects": (60, 10),
    "archive_rows": (float("inf"), 1010),  # one row per notice (the samples lag a little)
}
KEY_BOUND = (50.0, 5.0)  # any single key pattern


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


_ID = re.compile(r"\b[A-Z]{3}[0-9A-Za-z]{11}\b")
_NUM = re.compile(r"-?\d+")


def key_pattern(key: str) -> str:
    """A key with its ids and numbers folded, so keys of one kind count together."""
    return _NUM.sub("<n>", _ID.sub("<id>", key))


@attrs.frozen
class Sample:
    at_s: float
    notices: int
    values: dict[str, float]


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rows(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        try:
            return int(conn.execute("SELECT COUNT(*) FROM notices").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


def _objects(replica: Path) -> int:
    return sum(1 for p in replica.rglob("*") if p.is_file()) if replica.exists() else 0


async def _key_patterns(bus: Bus) -> Counter[str]:
    counts: Counter[str] = Counter()
    cursor = "0"
    while True:
        cursor_raw, found = await bus.transport.command("SCAN", cursor, "COUNT", "5000")
        counts.update(key_pattern(as_text(k)) for k in found)
        cursor = as_text(cursor_raw)
        if cursor == "0":
            return counts


async def _info_kib(bus: Bus, field: str) -> float:
    text = as_text(await bus.transport.command("INFO", "memory"))
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1]) / KIB
    return 0.0


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (0 when xs do not vary)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def report(samples: Sequence[Sample]) -> dict[str, Any]:
    """Slopes per hour and per 1,000 notices after the warm-up, each against its bound (pure)."""
    warm = samples[len(samples) // 5 :] if len(samples) >= 5 else list(samples)
    names = sorted({k for s in warm for k in s.values})
    out: dict[str, Any] = {}
    for name in names:
        ys = [s.values.get(name, 0.0) for s in warm]
        per_hour = _slope([s.at_s / 3600 for s in warm], ys)
        per_k = _slope([s.notices / 1000 for s in warm], ys)
        bound = BOUNDS.get(name, KEY_BOUND)
        out[name] = {
            "first": ys[0],
            "last": ys[-1],
            "per_hour": round(per_hour, 2),
            "per_1000_notices": round(per_k, 3),
            "bound_per_hour": bound[0],
            "bound_per_1000_notices": bound[1],
            "ok": per_hour <= bound[0] and per_k <= bound[1],
        }
    return out


async def _load(bus: Bus, rate: float, chats: int, sent: list[int]) -> None:
    n = 0
    while True:
        chat = 7_000_000 + n % chats
        try:
            await notify(bus, chat, f"soak notice {n}")
            sent[0] += 1
        except BusError as exc:
            say(f"load: {exc}")
        n += 1
        await trio.sleep(1 / rate)


async def _viewer(url: str, received: list[int]) -> None:
    while True:
        try:
            async with open_websocket_url(url) as ws:
                while True:
                    await ws.get_message()
                    received[0] += 1
        except (ConnectionClosed, OSError) as exc:
            say(f"viewer: {exc}; reconnecting")
            await trio.sleep(1)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    data = Path(args.data_dir or tempfile.mkdtemp(prefix="soak-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    service = await trio.lowlevel.open_process(
        [sys.executable, "-m", "codemojex.run", "--data-dir", str(data), "--page-port", "0",
         "--feed-port", "0", "--summary-every", "60", "--compact-segments",
         str(args.compact_segments), "--round-keep", str(args.round_keep)],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert service.stdout is not None
    lines: list[str] = []
    buf = b""
    page = port = None
    while page is None or port is None:
        chunk = await service.stdout.receive_some(4096)
        if not chunk:
            raise SystemExit("soak: the service ended while starting:\n" + "\n".join(lines))
        buf += chunk
        *done, buf = buf.split(b"\n")
        lines += [d.decode(errors="replace") for d in done]
        for line in lines:
            if m := re.search(r"Leaderboard: (http://\S+)", line):
                page = m[1]
            if m := re.search(r"server: redis://:\*\*\*@127\.0\.0\.1:(\d+)/0", line):
                port = m[1]
    password = (data / "password").read_text().strip()
    server_pid = int(json.loads((data / "server.pid").read_text())["pid"])
    say(f"soak: service pid {service.pid}, server pid {server_pid}, data in {data}")
    samples: list[Sample] = []
    sent, received = [0], [0]
    started = trio.current_time()
    try:
        async with (
            open_bus(f"redis://:{password}@127.0.0.1:{port}") as bus,
            trio.open_nursery() as nursery,
        ):

            async def drain_output() -> None:
                while await service.stdout.receive_some(65536):  # type: ignore[union-attr]
                    pass

            async def stop_on_signal() -> None:
                # A background job ignores SIGINT, so SIGTERM too: stop early, report, clean up.
                with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        say(f"soak: {signal.Signals(signum).name}: stopping early")
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(drain_output)
            nursery.start_soon(stop_on_signal)
            nursery.start_soon(_load, bus, args.rate, args.chats, sent)
            with trio.fail_after(60):  # the demo opens its rooms a moment after the start
                while True:
                    rooms = json.loads(await _get(page + "/rooms.json"))["rooms"]  # 1st page
                    if rooms:
                        break
                    await trio.sleep(0.5)
            ws_port = json.loads(await _get(page + "/config.json"))["ws_port"]
            for i in range(args.viewers):
                room = rooms[i % len(rooms)]["id"]
                nursery.start_soon(_viewer, f"ws://127.0.0.1:{ws_port}/rooms/{room}", received)
            deadline = started + args.minutes * 60
            while trio.current_time() < deadline:
                await trio.sleep(args.every)
                counts = await jobs.counts(bus, NOTIFY_QUEUE)
                patterns = await _key_patterns(bus)
                values = {
                    "service_rss_kib": proc_status_kib(service.pid, "VmRSS"),
                    "service_fds": _fds(service.pid),
                    "server_used_kib": await _info_kib(bus, "used_memory"),
                    "server_rss_kib": proc_status_kib(server_pid, "VmRSS"),
                    "keys_total": sum(patterns.values()),
                    "notify_pending": counts.pending + counts.scheduled,
                    "archive_rows": _rows(data / "audit.sqlite"),
                    "replica_objects": _objects(data / "replica"),
                    **{f"keys {p}": n for p, n in patterns.items()},
                }
                sample = Sample(trio.current_time() - started,
                                counts.completed_total + counts.dead_total, values)  # fmt: skip
                samples.append(sample)
                say(f"soak: {sample.at_s:7.0f} s, {sample.notices} notices, rss "
                    f"{values['service_rss_kib']:.0f} KiB, server {values['server_used_kib']:.0f}"
                    f" KiB, {values['keys_total']:.0f} keys, {values['replica_objects']:.0f} "
                    f"replica objects")  # fmt: skip
            nursery.cancel_scope.cancel()
    finally:
        await stop_service(service)
    slopes = report(samples)
    return {
        "minutes": args.minutes,
        "rate_per_s": args.rate,
        "chats": args.chats,
        "viewers": args.viewers,
        "compact_segments": args.compact_segments,
        "round_keep_s": args.round_keep,
        "notices_enqueued_by_soak": sent[0],
        "notices_settled": samples[-1].notices if samples else 0,
        "feed_messages": received[0],
        "samples": len(samples),
        "stopped_with": service.returncode,
        "data_dir": str(data),
        "measures": slopes,
        "ok": all(m["ok"] for m in slopes.values()) and service.returncode == 0,
    }


async def _get(url: str) -> str:
    import httpx

    async with httpx.AsyncClient() as client:
        return (await client.get(url, timeout=10)).text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/soak.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=12.0, help="extra notices per second")
    p.add_argument("--chats", type=int, default=400, help="private chats the load goes to")
    p.add_argument("--viewers", type=int, default=5)
    p.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--data-dir", help="default: a new temporary directory (kept)")
    p.add_argument(
        "--compact-segments",
        type=int,
        default=20,
        help="the service's --compact-segments (its default, 200, compacts the "
        "replica first after about 16 minutes)",
    )
    p.add_argument("--round-keep", type=float, default=120.0,
                   help="the service's --round-keep in seconds (its default, an hour, is longer "
                   "than a soak's warm-up)")  # fmt: skip
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.rate <= 0 or args.chats < 1 or args.every <= 0:
        p.error("--minutes, --rate and --every must be positive, --chats at least 1")
    return finish(trio.run(soak, args))


def finish(out: dict[str, Any]) -> int:
    """Print a report (ONE JSON object on stdout); the exit status: 0 when it is ``ok``."""
    print(json.dumps(out, indent=2))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
