"""Side by side with BullMQ: one server, each side in turn, medians of 3 rounds.

Run ``python3 -m tools.bench_peers [--server {redis,valkey}] [--jobs N] [--json PATH]`` from the
tree's root (BullMQ installed first: ``npm ci --prefix tools/peers/bullmq``). It starts ONE
server (Redis from ``echomq_trio.server.shipped_redis()``, or Valkey from ``shipped_valkey()``;
append-only file with ``appendfsync everysec``, ``maxmemory-policy noeviction``, as the embedded
server runs) and, in each of 3 rounds, measures echomq_trio on the glide transport, on the trio
transport, then BullMQ (``tools/peers/bullmq/bench.mjs``, one node process per measurement), each
on queues of its own. It prints a table of medians and writes every figure as JSON.

Rows (rates are per second of wall time):

* ``sequential``: one ``jobs.enqueue`` at a time (``queue.add`` for BullMQ), blocks of 50, 1 s;
  ``set_sequential``: a ``SET`` one at a time through the same transport, in turn with it.
* ``concurrent_64``: 64 tasks each enqueueing one job at a time (64 concurrent ``add`` loops).
* ``batch``: ``enqueue_many`` (``addBulk``) of 1,000 jobs, one call at a time.
* ``noop_defaults`` / ``noop_64``: a worker process drains N no-op jobs (enqueued first):
  ``Consumer(bus, q, handler)`` with no settings vs BullMQ ``concurrency: 10``; with
  ``concurrency=64`` vs BullMQ's 64. From the worker's start to its last ack.
* ``cpu_us_per_job_*``: the worker process's CPU time (utime + stime from ``/proc/self/stat``)
  over that drain, per job; ``server_cpu_us_per_job_*``: the server's (``INFO cpu``).
* ``lateness_light`` / ``lateness_load``: scheduled jobs, run-at = now + 500 ms + i * step: 100
  jobs 30 ms apart (3 s), and 1,000 jobs 2 ms apart (2 s); lateness = when the handler starts
  minus run-at (ms): p50, p99, min (a negative min is a job run early); each round's sorted
  lateness of every job is in the JSON (``lateness_light_sorted_ms``,
  ``lateness_load_sorted_ms``). echomq: a ``Metronome`` and a ``Consumer(concurrency=16)`` in
  the driver's process (``bench_bus.bench_lateness``);
  BullMQ: a ``Worker`` of concurrency 16 and delayed jobs (run-at = timestamp + delay).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_bus
from _bench import drop_queue, enqueue_batches, info, run_noop_consumer

from echomq_trio import jobs, open_bus
from echomq_trio.server import free_port, shipped_redis, shipped_valkey

ROOT = Path(__file__).resolve().parent.parent
BULLMQ_DIR = ROOT / "tools" / "peers" / "bullmq"
SIDES = ("glide", "trio", "bullmq")
ROUNDS = 3
DURATION_S = 1.0
TASKS = 64
BATCH = 1_000
PAYLOAD = b'{"kind":"bench","value":12345}'
LIGHT = {"count": 100, "lead_ms": 500, "step_ms": 30}
LOAD = {"count": 1_000, "lead_ms": 500, "step_ms": 2}
LATENESS_CONCURRENCY = 16
CLK_TCK = os.sysconf("SC_CLK_TCK")
HARD_LIMIT_S = 600.0


def _cpu_s() -> float:
    stat = Path("/proc/self/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(bench_bus._percentile(ordered, 50), 2),
        "p99": round(bench_bus._percentile(ordered, 99), 2),
        "min": round(ordered[0], 2),
        "count": len(ordered),
    }


# --- the server ----------------------------------------------------------------------------


class Server:
    def __init__(self, kind: str) -> None:
        binary = shipped_redis() if kind == "redis" else shipped_valkey()
        if binary is None:
            raise SystemExit(f"no {kind} server shipped here")
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="bench-peers-")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.version = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
        config = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                  "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                  "--maxmemory-policy", "noeviction"]  # fmt: skip
        self.popen = subprocess.Popen(
            [binary, *config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit(f"{self.binary} did not answer within {timeout_s} s")

    def stop(self) -> None:
        self.popen.terminate()
        self.popen.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


async def _server_cpu_s(bus: Any) -> float:
    fields = await info(bus, "cpu")
    return float(fields["used_cpu_sys"]) + float(fields["used_cpu_user"])


# --- echomq_trio ---------------------------------------------------------------------------


async def _worker_main(url: str, queue: str, total: int, concurrency: int, transport: str) -> None:
    async with open_bus(url, transport=transport) as bus:
        settings: dict[str, Any] = {} if concurrency == 0 else {"concurrency": concurrency}
        cpu0 = _cpu_s()
        result = await run_noop_consumer(bus, queue, total, settings=settings)
        result["cpu_s"] = _cpu_s() - cpu0
    print(json.dumps(result), flush=True)


async def _echomq_worker(
    url: str, queue: str, total: int, concurrency: int, transport: str
) -> dict[str, Any]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "tools.bench_peers", "--worker", url, queue, str(total),
            str(concurrency), transport]  # fmt: skip
    done = await trio.run_process(
        argv, capture_stdout=True, env={**os.environ, "PYTHONPATH": path}, cwd=str(ROOT)
    )
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


async def echomq_round(url: str, transport: str, total: int) -> dict[str, Any]:
    run = uuid.uuid4().hex[:6]
    out: dict[str, Any] = {}
    async with open_bus(url, transport=transport) as bus:
        q = f"peers-{run}-{transport}"
        set_key = f"{q}-set"

        async def set_once() -> object:
            return await bus.transport.command("SET", set_key, "v")

        async def enqueue_once() -> object:
            return await jobs.enqueue(bus, q + "-seq", PAYLOAD)

        for _ in range(200):
            await set_once()
            await enqueue_once()
        rates = await bench_bus._interleaved_rates(
            {"set": set_once, "enqueue": enqueue_once}, DURATION_S
        )
        out["sequential"] = rates["enqueue"]
        out["set_sequential"] = rates["set"]
        out["concurrent_64"] = await bench_bus._concurrent_rate(
            lambda _: enqueue_once, TASKS, DURATION_S
        )
        for label, concurrency in (("defaults", 0), ("64", 64)):
            queue = f"{q}-noop-{label}"
            rate = await enqueue_batches(bus, queue, total, PAYLOAD, BATCH)
            out.setdefault("batch_runs", []).append(rate)
            server0 = await _server_cpu_s(bus)
            w = await _echomq_worker(url, queue, total, concurrency, transport)
            server_s = await _server_cpu_s(bus) - server0
            out[f"server_cpu_us_per_job_{label}"] = server_s / total * 1e6
            out[f"noop_{label}"] = w["per_s"]
            out[f"cpu_us_per_job_{label}"] = w["cpu_s"] / total * 1e6
            counts = await jobs.counts(bus, queue)
            if counts.completed_total != total or counts.pending or counts.active:
                raise RuntimeError(f"{queue} not drained: {counts}")
        out["batch"] = max(out.pop("batch_runs"))
        for name, shape in (("light", LIGHT), ("load", LOAD)):
            late = await bench_bus.bench_lateness(bus, f"{q}-late-{name}", **shape)
            out[f"lateness_{name}"] = late["lateness_ms"]
            out[f"lateness_{name}"]["early"] = late["early_count"]
            out[f"lateness_{name}_sorted_ms"] = late["details"]["sorted_ms"]
        await bus.transport.command("DEL", set_key)
        for suffix in ("-seq", "-noop-defaults", "-noop-64", "-late-light", "-late-load"):
            await drop_queue(bus, q + suffix)
    return out


# --- BullMQ --------------------------------------------------------------------------------


async def _node(mode: str, **params: Any) -> dict[str, Any]:
    argv = ["node", str(BULLMQ_DIR / "bench.mjs"), mode, json.dumps(params)]
    done = await trio.run_process(argv, capture_stdout=True, cwd=str(BULLMQ_DIR))
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


async def bullmq_round(url: str, total: int, bus: Any) -> dict[str, Any]:
    q = f"peers-{uuid.uuid4().hex[:6]}-bullmq"
    out: dict[str, Any] = {}
    out["sequential"] = (await _node("sequential", url=url, queue=q, duration_s=DURATION_S))[
        "per_s"
    ]
    out["concurrent_64"] = (
        await _node("concurrent", url=url, queue=q, duration_s=DURATION_S, tasks=TASKS)
    )["per_s"]
    batch_rates = []
    for label, concurrency in (("defaults", 10), ("64", 64)):
        queue = f"{q}-noop-{label}"
        filled = await _node("fill", url=url, queue=queue, jobs=total, batch=BATCH)
        batch_rates.append(filled["per_s"])
        server0 = await _server_cpu_s(bus)
        w = await _node("worker", url=url, queue=queue, jobs=total, concurrency=concurrency)
        out[f"server_cpu_us_per_job_{label}"] = (await _server_cpu_s(bus) - server0) / total * 1e6
        out[f"noop_{label}"] = w["per_s"]
        out[f"cpu_us_per_job_{label}"] = w["cpu_s"] / total * 1e6
    out["batch"] = max(batch_rates)
    for name, shape in (("light", LIGHT), ("load", LOAD)):
        late = await _node("lateness", url=url, queue=f"{q}-late-{name}", tasks=TASKS,
                           concurrency=LATENESS_CONCURRENCY, **shape)  # fmt: skip
        if len(late["lateness_ms"]) < shape["count"]:
            raise RuntimeError(f"BullMQ ran {len(late['lateness_ms'])} of {shape['count']} jobs")
        out[f"lateness_{name}"] = _percentiles(late["lateness_ms"])
        out[f"lateness_{name}"]["early"] = sum(1 for x in late["lateness_ms"] if x < -1.0)
        out[f"lateness_{name}_sorted_ms"] = sorted(round(x, 2) for x in late["lateness_ms"])
    return out


# --- the run -------------------------------------------------------------------------------

ROWS = [
    ("sequential", "one enqueue at a time (/s)", "{:,.0f}"),
    ("set_sequential", "... a SET at a time, same transport (/s)", "{:,.0f}"),
    ("batch", "batch enqueue, 1,000 a call (/s)", "{:,.0f}"),
    ("noop_defaults", "no-op jobs, defaults vs BullMQ c10 (/s)", "{:,.0f}"),
    ("noop_64", "no-op jobs, 64 handlers vs c64 (/s)", "{:,.0f}"),
    ("cpu_us_per_job_defaults", "worker CPU per job, defaults / c10 (us)", "{:.0f}"),
    ("cpu_us_per_job_64", "worker CPU per job, 64 / c64 (us)", "{:.0f}"),
    ("server_cpu_us_per_job_defaults", "server CPU per job, defaults / c10 (us)", "{:.0f}"),
    ("concurrent_64", "64 tasks enqueueing one job each (/s)", "{:,.0f}"),
]


def _median(rounds: list[dict[str, Any]], key: str) -> Any:
    if key not in rounds[0] or isinstance(rounds[0][key], list):
        return None  # a distribution (each round's is in "rounds")
    if isinstance(rounds[0][key], dict):
        return {k: statistics.median(r[key][k] for r in rounds) for k in rounds[0][key]}
    return statistics.median(r[key] for r in rounds)


def table(medians: dict[str, dict[str, Any]]) -> str:
    lines = ["| measure | echomq glide | echomq trio | BullMQ | trio / BullMQ |",
             "|---|---|---|---|---|"]  # fmt: skip
    for key, label, fmt in ROWS:
        cells = [medians[s].get(key) for s in SIDES]
        shown = [fmt.format(c) if c is not None else "—" for c in cells]
        ratio = f"{cells[1] / cells[2]:.2f}×" if cells[1] and cells[2] else ""
        lines.append(f"| {label} | {' | '.join(shown)} | {ratio} |")
    lines.append(
        "| enqueue vs SET, same transport | "
        + " | ".join(
            f"{medians[s]['sequential'] / medians[s]['set_sequential']:.2f}"
            if medians[s].get("set_sequential") else "—"
            for s in SIDES
        )
        + " | |"
    )  # fmt: skip
    for name, label in (("light", "100 jobs, 30 ms apart"), ("load", "1,000 jobs, 2 ms apart")):
        cells: list[str] = []
        for s in SIDES:
            m = medians[s][f"lateness_{name}"]
            cells.append(
                f"{m['p50']:.1f} / {m['p99']:.1f} / {m['min']:.1f}, {m['early']:.0f} early"
            )
        lines.append(f"| lateness p50 / p99 / min (ms), {label} | {' | '.join(cells)} | |")
    return "\n".join(lines)


async def main_run(kind: str, total: int) -> dict[str, Any]:
    server = Server(kind)
    try:
        server.wait_ready()
        began = time.time()
        rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
        async with open_bus(server.url, transport="trio") as bus:
            for r in range(ROUNDS):
                for side in SIDES:
                    t0 = time.time()
                    if side == "bullmq":
                        got = await bullmq_round(server.url, total, bus)
                    else:
                        got = await echomq_round(server.url, side, total)
                    rounds[side].append(got)
                    print(f"round {r + 1} {side}: {time.time() - t0:.1f} s", file=sys.stderr)
        keys = set().union(*(set(x) for rs in rounds.values() for x in rs))
        return {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(began)),
            "server": server.version,
            "took_s": round(time.time() - began, 1),
            "load_average": os.getloadavg(),
            "medians": {s: {k: _median(rounds[s], k) for k in keys} for s in SIDES},
            "rounds": rounds,
        }
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--server", choices=("redis", "valkey"), default="redis")
    parser.add_argument("--jobs", type=int, default=10_000, help="no-op jobs per worker run")
    parser.add_argument("--json", default="bench_peers.json", help="where to write every figure")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        url, queue, total, concurrency, transport = args.worker
        trio.run(_worker_main, url, queue, int(total), int(concurrency), transport)
        return
    if not (BULLMQ_DIR / "node_modules" / "bullmq").is_dir():
        raise SystemExit(f"BullMQ is not installed: npm ci --prefix {BULLMQ_DIR}")

    async def limited() -> dict[str, Any]:
        with trio.fail_after(HARD_LIMIT_S):
            return await main_run(args.server, args.jobs)

    result = trio.run(limited)
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True)
    package = json.loads((BULLMQ_DIR / "package.json").read_text())
    result.update(node=node.stdout.strip(), python=sys.version.split()[0], jobs=args.jobs,
                  peer=package["dependencies"])  # fmt: skip
    Path(args.json).write_text(json.dumps(result, indent=2))
    peer = ", ".join(f"{k} {v}" for k, v in package["dependencies"].items())
    print(f"{result['date']}, {result['server'].split(' sha')[0]}, {peer}, node "
          f"{result['node']}, {args.jobs:,} no-op jobs, medians of {ROUNDS}, "
          f"{result['took_s']} s; JSON: {args.json}")  # fmt: skip
    print(table(result["medians"]))


if __name__ == "__main__":
    main()
