"""Benchmark of the room list, the summary line and the feed at scale; prints ONE JSON object.

Run ``python tools/bench_rooms.py [--rooms N] [--chats N]`` with the repository on
``PYTHONPATH``. It starts the embedded server (``open_bus()`` with no URL: a child process in a
temporary directory, gone afterwards) and never takes a server URL: the room index is one
application-wide key, and filling a real service's with benchmark rooms would spoil its list.
It stops by itself (a hard limit of ``HARD_LIMIT_S`` cancels the rest). Speeds are measured
here, never asserted by tests.

What it does and what each number means (times are wall time in this process, through the
real client; ``ms`` figures are the median of ``SAMPLES`` runs, with the largest beside it):

1. Creates ``--rooms`` rooms (20,000) with ``game.create_room`` from 64 tasks at once, and
   gives the first three a round with a score each, so the summary line has leaders to show;
   with ``--chats`` (100,000) it enqueues one notice in each of that many chats (one lane
   each) with ``notify``, as a bot with that many chats has.
2. ``room_page``: ``game.room_page(bus)`` in this process (the default page, no HTTP).
   ``rooms_json_first_page``: ``GET /rooms.json`` (the default page) from the real
   ``PageServer`` over HTTP on loopback with ``httpx``: time and body size. ``server_usec``:
   the server's own time per call of the commands a page runs (``INFO commandstats`` over the
   samples).
3. ``rooms_json_all_pages``: every page of the largest count, following ``next``: pages, total
   time and bytes, and whether every room was listed exactly once, in order.
4. ``summary_line``: ``codemojex.run.summary_line`` (what the service prints every 5 s), and
   ``jobs_counts`` alone, which it includes: the bus's count of the notify queue, whose cost
   grows with the number of chats until the bus keeps counters (issue 14, item 1). The rooms'
   part is the difference.
5. ``old_list_rooms``: the listing the code before the index ran for every ``rooms.json`` and
   every summary line (``SMEMBERS cm:rooms``, then one ``HMGET`` per room, one after another),
   on the same rooms written into the old set: time once, and the size of the JSON it served.
   ``migrate_room_index``: the time ``codemojex.run`` then takes at start to move that set into
   the index.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import trio
from _bench import info, server_version

from codemojex import game
from codemojex.game import board
from codemojex.game.page import PageServer
from codemojex.game.rooms import DEFAULT_ROOM_PAGE, MAX_ROOM_PAGE, room_key
from codemojex.notify import NOTIFY_QUEUE, DeliveryStats, notify
from codemojex.run import summary_line
from echomq_trio import Bus, jobs, open_bus
from echomq_trio._replies import as_text

HARD_LIMIT_S = 300.0  # the whole run is cancelled after this
TASKS = 64  # concurrent tasks that fill the server
SAMPLES = 20  # runs of each timed call; the median is reported
LEGACY_KEY = "cm:rooms"  # the set of room ids the code before the index kept


async def _fill(n: int, make: Callable[[int], Awaitable[object]]) -> float:
    """Run ``make(i)`` for every ``i < n`` from ``TASKS`` tasks; the seconds it took."""
    started = time.perf_counter()
    next_i = iter(range(n))

    async def worker() -> None:
        for i in next_i:
            await make(i)

    async with trio.open_nursery() as nursery:
        for _ in range(TASKS):
            nursery.start_soon(worker)
    return time.perf_counter() - started


async def _timed(call: Callable[[], Awaitable[object]]) -> dict[str, float]:
    """The median and largest time of ``SAMPLES`` calls, in ms (after one warm-up call)."""
    await call()
    took = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        await call()
        took.append((time.perf_counter() - started) * 1000)
    return {"ms": round(statistics.median(took), 3), "max_ms": round(max(took), 3)}


async def _server_usec(bus: Bus, commands: list[str]) -> dict[str, float]:
    stats = await info(bus, "commandstats")
    out = {}
    for name in commands:
        fields = dict(kv.split("=") for kv in stats.get(f"cmdstat_{name}", "").split(",") if kv)
        if fields:
            out[name] = float(fields["usec_per_call"])
    return out


async def _rooms_json(bus: Bus, client: httpx.AsyncClient, url: str, n: int) -> dict[str, Any]:
    first = await client.get(f"{url}/rooms.json")
    body = first.json()
    await bus.transport.command("CONFIG", "RESETSTAT")
    timing = await _timed(lambda: client.get(f"{url}/rooms.json"))
    result: dict[str, Any] = {
        "rooms_json_first_page": {
            **timing,
            "bytes": len(first.content),
            "rooms": len(body["rooms"]),
            "server_usec": await _server_usec(bus, ["zrange", "hmget"]),
        }
    }
    seen: list[str] = []
    pages, size = 0, 0
    started = time.perf_counter()
    query = f"?count={MAX_ROOM_PAGE}"
    while True:
        reply = await client.get(f"{url}/rooms.json{query}")
        pages, size = pages + 1, size + len(reply.content)
        page = reply.json()
        seen += [r["id"] for r in page["rooms"]]
        if page["next"] is None:
            break
        query = f"?count={MAX_ROOM_PAGE}&after={page['next']}"
    result["rooms_json_all_pages"] = {
        "s": round(time.perf_counter() - started, 3),
        "pages": pages,
        "count": MAX_ROOM_PAGE,
        "bytes": size,
        "every_room_once_in_order": len(seen) == n and seen == sorted(set(seen)),
    }
    return result


async def _old_list_rooms(bus: Bus, room_ids: list[str]) -> dict[str, Any]:
    """The listing before the index, on the same rooms written into the old set."""
    for i in range(0, len(room_ids), 1000):
        await bus.transport.command("SADD", LEGACY_KEY, *room_ids[i : i + 1000])
    started = time.perf_counter()
    members = sorted(as_text(m) for m in await bus.transport.command("SMEMBERS", LEGACY_KEY))
    rooms = []
    for room in members:
        _chat, title = await bus.transport.command("HMGET", room_key(room, "room"), "chat", "title")
        rooms.append({"id": room, "title": as_text(title)})
    took = time.perf_counter() - started
    started = time.perf_counter()
    moved = await game.migrate_room_index(bus)
    return {
        "old_list_rooms": {
            "s": round(took, 3),
            "bytes": len(json.dumps(rooms).encode()),
            "rooms": len(rooms),
        },
        "migrate_room_index": {"s": round(time.perf_counter() - started, 3), "moved": moved},
    }


async def _leaders(bus: Bus, rooms: list[game.Room]) -> None:
    for i, room in enumerate(rooms):
        player = await game.create_player(bus, f"Player {i}", 10_000 + i)
        rnd = await game.start_round(bus, room.id, starts_in_ms=0)
        await board.record(bus, room.id, rnd.id, player.id, 50 + i)


async def bench(n_rooms: int, n_chats: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "rooms": n_rooms,
        "chats": n_chats,
        "default_page": DEFAULT_ROOM_PAGE,
        "python": platform.python_version(),
    }
    async with open_bus() as bus:
        result["server"] = await server_version(bus)
        rooms: list[game.Room | None] = [None] * n_rooms

        async def create(i: int) -> None:
            rooms[i] = await game.create_room(bus, -1_000_000_000 - i, f"Bench room {i:05d}")

        result["create_rooms_s"] = round(await _fill(n_rooms, create), 3)
        first = (await game.room_page(bus, count=3)).rooms
        await _leaders(bus, list(first))
        result["notify_chats_s"] = round(
            await _fill(n_chats, lambda i: notify(bus, 1_000_000 + i, "hello")), 3
        )
        result["room_page"] = await _timed(lambda: game.room_page(bus))
        async with trio.open_nursery() as nursery, httpx.AsyncClient() as client:
            url = await nursery.start(PageServer(bus, 0).serve, "127.0.0.1", 0)
            result |= await _rooms_json(bus, client, url, n_rooms)
            nursery.cancel_scope.cancel()
        line = await summary_line(bus, DeliveryStats(), None)
        result["summary_line"] = await _timed(lambda: summary_line(bus, DeliveryStats(), None))
        result["summary_line"]["text"] = line
        result["jobs_counts"] = await _timed(lambda: jobs.counts(bus, NOTIFY_QUEUE))
        result |= await _old_list_rooms(bus, sorted(r.id for r in rooms if r is not None))
    return result


async def _main(n_rooms: int, n_chats: int) -> None:
    with trio.fail_after(HARD_LIMIT_S):
        result = await bench(n_rooms, n_chats)
    print(json.dumps(result, indent=2), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rooms", type=int, default=20_000, help="rooms to create (20,000)")
    parser.add_argument("--chats", type=int, default=100_000,
                        help="chats with one waiting notice each (100,000; 0: none)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.rooms < 3 or args.chats < 0:
        parser.error("--rooms must be at least 3 and --chats at least 0")
    trio.run(_main, args.rooms, args.chats)


if __name__ == "__main__":
    main()
