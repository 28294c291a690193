"""Memory of the service before, under and after a crowd of live viewers: does it give back what
2,000 websocket viewers and 500 dashboard streams took once they have gone? Prints ONE JSON
object on stdout, progress on stderr.

    PYTHONPATH=. python3 tools/bench_viewers.py [--viewers 2000] [--streams 500] [--waves 2] \
        [--settle 20] [--hold 10] [--after 80] [--demo on] [--allocator service] [--tree DIR]

It starts ``python -m codemojex.run`` (of ``--tree``: this repository, or another checkout, to
compare commits) on a new temporary data directory (embedded server, the
Telegram stand-in, the demo unless ``--demo off``; removed at the end), lets it settle for
``--settle`` seconds and samples its resident memory (``VmRSS`` from ``/proc/<pid>/status``):
*before*. Then, ``--waves`` times: it opens ``--viewers`` websocket viewers of the leaderboard
feed (``ws://.../rooms/<room>``, spread over the demo's rooms, each waiting for its first board)
and ``--streams`` server-sent event streams of the bus dashboard (``/bus/events``, each waiting
for its first view), holds them ``--hold`` seconds (boards and dashboard samples flow), samples
*peak*, closes every one (a connection that fails is counted, not tried again) and samples the
memory once a second for ``--after`` seconds: *after* is the last sample of the last wave. The
connections are opened ``--parallel`` at a time, so the listen queues never overflow.

The service gives memory back a few seconds after a crowd has left and once more a minute later
(``codemojex.allocator``), so ``--after`` (80 s) covers both. ``--allocator`` sets the service's
``PYTHONMALLOC``: ``service`` (the default) leaves it to the service (it runs with ``malloc``),
``pymalloc`` keeps Python's own allocator, as every version before did.

``ok`` is true when *after* is within ``--tolerance`` MiB (10) of *before* and no connection
failed. The demo keeps playing throughout, so a little drift of its own is in every figure. This
is a tool, not a test: it measures, it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import trio
from _bench import proc_status_kib, stop_service
from trio_websocket import ConnectionClosed, HandshakeError, open_websocket_url

ROOT = Path(__file__).resolve().parents[1]
KIB = 1024


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def rss_kib(pid: int) -> int:
    """The resident memory of process ``pid`` in KiB (``VmRSS``)."""
    return proc_status_kib(pid, "VmRSS")


async def _start(data: Path, args: argparse.Namespace) -> tuple[trio.Process, str]:
    """The service, started, and its page URL."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONMALLOC"}
    env["PYTHONPATH"] = str(args.tree)
    if args.allocator != "service":
        env["PYTHONMALLOC"] = args.allocator
    service = await trio.lowlevel.open_process(
        [sys.executable, "-m", "codemojex.run", "--data-dir", str(data), "--page-port", "0",
         "--feed-port", "0", "--summary-every", "0", "--demo", args.demo],
        cwd=args.tree, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert service.stdout is not None
    buf = b""
    while not (m := re.search(rb"Leaderboard: (http://\S+)", buf)):
        chunk = await service.stdout.receive_some(4096)
        if not chunk:
            raise SystemExit("bench_viewers: the service ended while starting:\n" + buf.decode())
        buf += chunk
    return service, m[1].decode()


async def _viewer(url: str, opened: trio.Semaphore, ready: list[int], leave: trio.Event) -> None:
    held = True
    await opened.acquire()
    try:
        async with open_websocket_url(url) as ws:
            await ws.get_message()  # the first board: the viewer is in the feed's books
            ready[0] += 1
            opened.release()
            held = False
            async with trio.open_nursery() as nursery:

                async def read() -> None:
                    with contextlib.suppress(ConnectionClosed):
                        while True:
                            await ws.get_message()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(read)
                await leave.wait()
                nursery.cancel_scope.cancel()
    except (HandshakeError, ConnectionClosed, OSError) as exc:
        ready[2] += 1
        say(f"viewer: {exc!r}")
    finally:
        if held:
            opened.release()


async def _stream(
    client: httpx.AsyncClient, url: str, opened: trio.Semaphore, ready: list[int], leave: trio.Event
) -> None:
    held = True
    await opened.acquire()
    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                ready[2] += 1
                say(f"stream refused: {response.status_code}")
                return
            chunks = response.aiter_bytes()
            async for chunk in chunks:
                if b"\n\n" in chunk:
                    break  # the first view: the stream is in the dashboard's books
            ready[1] += 1
            opened.release()
            held = False
            async with trio.open_nursery() as nursery:

                async def read() -> None:
                    async for _ in chunks:
                        pass
                    nursery.cancel_scope.cancel()

                nursery.start_soon(read)
                await leave.wait()
                nursery.cancel_scope.cancel()
    except httpx.HTTPError as exc:
        ready[2] += 1
        say(f"stream: {exc!r}")
    finally:
        if held:
            opened.release()


async def _wave(
    args: argparse.Namespace, service: trio.Process, page: str, ws_base: str, rooms: list[str]
) -> dict[str, Any]:
    opened = trio.Semaphore(args.parallel)
    ready = [0, 0, 0]  # viewers and streams open, connections that failed
    leave = trio.Event()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx.Timeout(60.0, read=None)
    async with (
        httpx.AsyncClient(limits=limits, timeout=timeout) as client,
        trio.open_nursery() as nursery,
    ):
        for i in range(args.viewers):
            url = f"{ws_base}/rooms/{rooms[i % len(rooms)]}"
            nursery.start_soon(_viewer, url, opened, ready, leave)
        for _ in range(args.streams):
            nursery.start_soon(_stream, client, page + "/bus/events", opened, ready, leave)
        while sum(ready) < args.viewers + args.streams:
            await trio.sleep(0.5)
            say(f"  open: {ready[0]} viewers, {ready[1]} streams, {ready[2]} failed, "
                f"rss {rss_kib(service.pid) / KIB:.1f} MiB")  # fmt: skip
        await trio.sleep(args.hold)
        peak = rss_kib(service.pid)
        say(f"  peak: rss {peak / KIB:.1f} MiB; closing")
        leave.set()
    after = []
    for _ in range(int(args.after)):
        await trio.sleep(1)
        after.append(rss_kib(service.pid))
    say(f"  after: rss {after[-1] / KIB:.1f} MiB")
    shown = [round(a / KIB, 1) for a in after[:: max(1, len(after) // 5)]]
    last = round(after[-1] / KIB, 1)
    return {"viewers": ready[0], "streams": ready[1], "failed": ready[2],
            "peak_mib": round(peak / KIB, 1), "after_mib": [*shown, last]}  # fmt: skip


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="bench-viewers-"))
    service, page = await _start(data / "data", args)
    say(f"bench_viewers: service pid {service.pid}, page {page}")
    try:
        async with trio.open_nursery() as nursery:

            async def drain_output() -> None:
                while await service.stdout.receive_some(65536):  # type: ignore[union-attr]
                    pass

            nursery.start_soon(drain_output)
            async with httpx.AsyncClient(timeout=30) as client:
                ws_port = (await client.get(page + "/config.json")).json()["ws_port"]
                rooms: list[str] = []
                with trio.move_on_after(60):  # the demo opens its rooms as it starts
                    while not rooms:
                        listed = (await client.get(page + "/rooms.json")).json()["rooms"]
                        rooms = [r["id"] for r in listed]
                        await trio.sleep(0.5)
            if not rooms:
                raise SystemExit("bench_viewers: no room to watch after 60 s (--demo off?)")
            host = re.sub(r"^http://([^:/]+).*$", r"\1", page)
            ws_base = f"ws://{host}:{ws_port}"
            await trio.sleep(args.settle)
            before = rss_kib(service.pid)
            say(f"before: rss {before / KIB:.1f} MiB")
            waves = []
            for n in range(args.waves):
                say(f"wave {n + 1}: {args.viewers} viewers, {args.streams} streams")
                waves.append(await _wave(args, service, page, ws_base, rooms))
            nursery.cancel_scope.cancel()
    finally:
        await stop_service(service)
        shutil.rmtree(data, ignore_errors=True)
    after = waves[-1]["after_mib"][-1]
    return {
        "viewers": args.viewers,
        "streams": args.streams,
        "demo": args.demo,
        "tree": str(args.tree),
        "allocator": args.allocator,
        "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX"),
        "before_mib": round(before / KIB, 1),
        "waves": waves,
        "after_mib": after,
        "retained_mib": round(after - before / KIB, 1),
        "tolerance_mib": args.tolerance,
        "stopped_with": service.returncode,
        "ok": after - before / KIB <= args.tolerance and not any(w["failed"] for w in waves),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/bench_viewers.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--viewers", type=int, default=2000, help="websocket viewers of the feed")
    p.add_argument("--streams", type=int, default=500, help="dashboard event streams")
    p.add_argument("--waves", type=int, default=2, help="times the crowd comes and goes")
    p.add_argument("--settle", type=float, default=20.0, help="seconds before 'before'")
    p.add_argument("--hold", type=float, default=10.0, help="seconds the crowd stays")
    p.add_argument("--after", type=float, default=80.0, help="seconds sampled after it left")
    p.add_argument("--parallel", type=int, default=64, help="connections opened at once")
    p.add_argument("--demo", choices=("on", "off"), default="on")
    p.add_argument(
        "--allocator",
        choices=("service", "pymalloc", "malloc"),
        default="service",
        help="the service's PYTHONMALLOC (service: its own choice)",
    )
    p.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose service runs")
    p.add_argument("--tolerance", type=float, default=10.0, help="MiB 'after' may exceed 'before'")
    args = p.parse_args(argv)
    if min(args.viewers, args.streams) < 0 or args.waves < 1 or args.parallel < 1:
        p.error("--viewers and --streams must be >= 0, --waves and --parallel >= 1")
    if min(args.settle, args.hold) < 0 or args.after < 1:
        p.error("--settle and --hold must be >= 0, --after >= 1")
    out = trio.run(bench, args)
    print(json.dumps(out, indent=2))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
