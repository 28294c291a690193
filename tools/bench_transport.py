"""Round trips of one connection: a bare trio socket with ``hiredis`` against each transport.

Run ``python tools/bench_transport.py [--url URL] [--calls N] [--rounds R]``; prints ONE JSON
object. Without ``--url`` it starts the embedded server. Each round runs N sequential ``SET``
calls through a bare socket (25 lines: ``send_all``, ``receive_some``, ``hiredis``; the floor of
any trio client), through ``resp.RespTransport`` (``transport="trio"``) and through
``wire.Wire`` (glide), in turn, so all three meet the same moments of a noisy machine; it
reports each round's rates and the best of each.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import hiredis
import trio

from echomq_trio import open_bus
from echomq_trio.resp import open_resp
from echomq_trio.wire import open_wire, parse_url


async def _bare(url: str, calls: int) -> float:
    spec = parse_url(url)
    host, port = spec.hosts[0]
    reader = hiredis.Reader()
    async with await trio.open_tcp_stream(host, port) as stream:
        if spec.password is not None:
            await stream.send_all(hiredis.pack_command(("AUTH", spec.password)))
            reader.feed(await stream.receive_some(4096))
            reader.gets()
        request = hiredis.pack_command(("SET", "bench-transport", "v"))
        start = time.perf_counter()
        for _ in range(calls):
            await stream.send_all(request)
            while True:
                reader.feed(await stream.receive_some(65536))
                if reader.gets() is not False:
                    break
        return calls / (time.perf_counter() - start)


async def _through(transport: Any, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        await transport.command("SET", "bench-transport", "v")
    return calls / (time.perf_counter() - start)


async def bench(url: str | None, calls: int, rounds: int) -> dict[str, Any]:
    async with open_bus(url) as bus:  # the embedded server when no URL is given
        target = bus.server.url if bus.server is not None else str(url)
        runs: list[dict[str, float]] = []
        async with open_resp(target) as resp, open_wire(target) as wire:
            for _ in range(rounds):
                runs.append(
                    {
                        "bare_socket": round(await _bare(target, calls)),
                        "trio": round(await _through(resp, calls)),
                        "glide": round(await _through(wire, calls)),
                    }
                )
            await resp.command("DEL", "bench-transport")
    best = {name: max(r[name] for r in runs) for name in runs[0]}
    return {
        "calls_per_round": calls,
        "set_sequential_per_s": runs,
        "best": best,
        "trio_vs_bare": round(best["trio"] / best["bare_socket"], 3),
        "glide_vs_bare": round(best["glide"] / best["bare_socket"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="server URL; default: start an embedded server")
    parser.add_argument("--calls", type=int, default=5000, help="SET calls per round and client")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result = trio.run(bench, args.url, args.calls, args.rounds)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
