"""Where a sequential enqueue's time goes, part by part: prints ONE JSON object.

Run ``PYTHONPATH=<tree> python3 tools/bench_enqueue_parts.py [--url URL] [--blocks N]``; without
``--url`` it starts the embedded server (``open_bus()``). On the trio transport, one call at a
time, in blocks of 50 calls taken in turn (so every part meets the same moments of a noisy
machine; medians of N blocks, µs a call):

* ``SET``, and ``EVALSHA`` of probe scripts given the enqueue's own KEYS and ARGV: ``return 1``
  (a script call's own cost), then the enqueue's commands one by one (``HSETNX`` of the row,
  ``ZADD`` to pending, ``XADD`` of the event, ``LPUSH`` of the wake, ``HMGET`` of the queue's
  settings), then the ``enqueue`` script itself and ``jobs.enqueue``;
* the server's µs a call for each (``INFO commandstats``: the command's own time, not its
  parsing, reply or append-only file write);
* the bus's Python per ``jobs.enqueue`` without I/O (the transport's ``script`` answering at
  once), and the transport's per call (``link.send`` and the decoding, no socket).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from echomq_trio import ids, jobs, open_bus
from echomq_trio._replies import as_text
from echomq_trio.lua import script_source
from tools._bench import drop_queue

BLOCK = 50
PAYLOAD = b'{"chat": 1, "text": "hello"}'
_ROW = "redis.call('HSETNX', ARGV[1] .. 'job:' .. ARGV[7], 'payload', ARGV[8]) "
_PENDING = "redis.call('ZADD', ARGV[1] .. 'pending', 0, ARGV[7]) "
_EVENT = "redis.call('XADD', ARGV[1] .. 'events', 'MAXLEN', '~', 10000, '*', 'e', 'enqueued', 'id', ARGV[7]) "  # noqa: E501
_WAKE = "redis.call('LPUSH', ARGV[1] .. 'wake', '1') "
_META = "redis.call('HMGET', ARGV[1] .. 'meta', 'events', 'events_maxlen', 'created_ms') "
_DONE = "return {'enqueued'}"
PROBES = {
    "return 1": "return 1",
    "+ HSETNX": _ROW + _DONE,
    "+ ZADD": _ROW + _PENDING + _DONE,
    "+ XADD": _ROW + _PENDING + _EVENT + _DONE,
    "+ LPUSH": _ROW + _PENDING + _EVENT + _WAKE + _DONE,
    "+ HMGET": _META + _ROW + _PENDING + _EVENT + _WAKE + _DONE,
}


def _commandstats(text: str) -> dict[str, tuple[int, float]]:
    out: dict[str, tuple[int, float]] = {}
    for line in text.splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_") :].split(":", 1)
            fields = dict(part.split("=", 1) for part in rest.split(","))
            out[name] = (int(fields["calls"]), float(fields["usec_per_call"]))
    return out


async def _python_us(bus: Any, calls: int = 20_000) -> dict[str, float]:
    """The bus's Python per ``jobs.enqueue``, its transport's ``script`` answering at once."""
    transport = bus.transport

    async def at_once(name: str, keys: Any, args: Any) -> list[bytes]:
        return [b"enqueued"]

    real = transport.script
    transport.script = at_once
    try:
        start = time.perf_counter()
        for _ in range(calls):
            await jobs.enqueue(bus, "parts-python", PAYLOAD)
        bus_us = (time.perf_counter() - start) / calls * 1e6
    finally:
        transport.script = real
    return {"bus_python_us": round(bus_us, 2)}


async def bench(url: str | None, blocks: int) -> dict[str, Any]:
    async with open_bus(url, transport="trio") as bus:
        t = bus.transport
        run = ids.generate("JOB")[-6:]
        queue = f"parts-{run}"
        k = bus.keys(queue)
        shas = {
            name: as_text(await t.command("SCRIPT", "LOAD", src)) for name, src in PROBES.items()
        }
        await t.command("SCRIPT", "LOAD", script_source("enqueue"))

        def probe(sha: str) -> Callable[[], Awaitable[object]]:
            def call() -> Awaitable[object]:
                job = ids.generate("JOB")
                return t.command(
                    "EVALSHA", sha, "1", k.pending, k.prefix, "", "", "", "", "", job, PAYLOAD
                )

            return call

        ops: dict[str, Callable[[], Awaitable[object]]] = {
            "SET": lambda: t.command("SET", f"{queue}-set", "v")
        }
        ops.update({name: probe(sha) for name, sha in shas.items()})
        ops["jobs.enqueue"] = lambda: jobs.enqueue(bus, queue, PAYLOAD)
        for op in ops.values():  # warm up: connections, scripts, the queue's creation
            for _ in range(20):
                await op()
        times: dict[str, list[float]] = {}
        server: dict[str, float] = {}
        for index in range(blocks):
            for name, op in ops.items():
                start = time.perf_counter()
                for _ in range(BLOCK):
                    await op()
                times.setdefault(name, []).append((time.perf_counter() - start) / BLOCK * 1e6)
            if index == 0:
                await t.command("CONFIG", "RESETSTAT")
        stats = _commandstats(as_text(await t.command("INFO", "commandstats")))
        server["SET"] = stats["set"][1]
        # each probe's server time, alone (commandstats sums every script as evalsha)
        for name, sha in shas.items():
            await t.command("CONFIG", "RESETSTAT")
            for _ in range(2000):
                await probe(sha)()
            server[name] = _commandstats(as_text(await t.command("INFO", "commandstats")))[
                "evalsha"
            ][1]
        await t.command("CONFIG", "RESETSTAT")
        for _ in range(2000):
            await jobs.enqueue(bus, queue, PAYLOAD)
        stats = _commandstats(as_text(await t.command("INFO", "commandstats")))
        server["jobs.enqueue"] = stats["evalsha"][1]
        inner = {
            name: v[1]
            for name, v in stats.items()
            if name not in ("evalsha", "config|resetstat", "info")
        }
        await t.command("DEL", f"{queue}-set")
        await drop_queue(bus, queue)
        await drop_queue(bus, "parts-python")
        rows = {}
        for name in ops:
            rows[name] = {
                "wall_us": round(statistics.median(times[name]), 1),
                "server_us": round(server[name], 2),
            }
        for row in rows.values():
            row["set_over_this"] = round(rows["SET"]["wall_us"] / row["wall_us"], 3)
        out: dict[str, Any] = {"blocks": blocks, "block": BLOCK, "rows": rows}
        out["enqueue_inner_commands_server_us"] = inner
        out.update(await _python_us(bus))
        return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="server URL; default: start an embedded server")
    parser.add_argument("--blocks", type=int, default=30, help="blocks of 50 calls per part")
    args = parser.parse_args(argv)
    print(json.dumps(trio.run(bench, args.url, args.blocks), indent=1))


if __name__ == "__main__":
    main()
