"""Worker and producer processes for the crash and multi-process tests.

    python -m tests.echomq_trio.proc worker URL QUEUE [--handle-ms N] [--lease-ms N] [--metronome]
    python -m tests.echomq_trio.proc produce URL QUEUE COUNT
    python -m tests.echomq_trio.proc metronome URL QUEUE
    python -m tests.echomq_trio.proc register URL QUEUE NAME EVERY_MS TEMPLATE
    python -m tests.echomq_trio.proc wait-result URL QUEUE JOB_ID TIMEOUT_S
    python -m tests.echomq_trio.proc sleeper URL QUEUE [--lease-ms N]

A worker's handler waits ``handle-ms``, then appends the job id to ``test:{QUEUE}:done`` before
acking, so a job killed between the two may be recorded twice but never lost. Workers print
``ready`` once claiming. ``wait-result`` waits on a job's result (``jobs.result``) and prints
``result <text>``, or the error's class and message. A sleeper's handler appends the job id to
``test:{QUEUE}:started``, then sleeps until cancelled, and appends it to
``test:{QUEUE}:cancelled`` in a cleanup shielded for at most 5 s (the handler's cleanup under a
cancel, as a user writes it).
"""

from __future__ import annotations

import argparse
import sys

import trio

from echomq_trio import Consumer, Job, Metronome, jobs, open_bus, repeat
from echomq_trio.errors import JobError


def done_key(queue: str) -> str:
    return f"test:{{{queue}}}:done"


async def worker(args: argparse.Namespace) -> None:
    async with open_bus(args.url) as bus:

        async def handler(job: Job) -> None:
            if args.handle_ms:
                await trio.sleep(args.handle_ms / 1000)
            await bus.transport.command("RPUSH", done_key(args.queue), job.id)

        consumer = Consumer(
            bus, args.queue, handler, concurrency=args.concurrency, lease_ms=args.lease_ms
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            if args.metronome:
                await nursery.start(Metronome(bus, args.queue, beat_ms=100).run)
            print("ready", flush=True)


def ledger_key(queue: str, name: str) -> str:
    return f"test:{{{queue}}}:{name}"


async def sleeper(args: argparse.Namespace) -> None:
    async with open_bus(args.url) as bus:

        async def handler(job: Job) -> None:
            await bus.transport.command("RPUSH", ledger_key(args.queue, "started"), job.id)
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + 5):
                    await bus.transport.command(
                        "RPUSH", ledger_key(args.queue, "cancelled"), job.id
                    )

        consumer = Consumer(bus, args.queue, handler, lease_ms=args.lease_ms)
        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            print("ready", flush=True)


async def metronome(args: argparse.Namespace) -> None:
    async with open_bus(args.url) as bus, trio.open_nursery() as nursery:
        await nursery.start(Metronome(bus, args.queue, beat_ms=50).run)
        print("ready", flush=True)


async def register(args: argparse.Namespace) -> None:
    async with open_bus(args.url) as bus:
        answer, _ = await repeat.register(bus, args.queue, args.name, args.every_ms, args.template)
    print(answer.value, flush=True)


async def produce(args: argparse.Namespace) -> None:
    async with open_bus(args.url) as bus:
        for _ in range(args.count):
            await jobs.enqueue(bus, args.queue, "x")
    print("produced", flush=True)


async def wait_result(args: argparse.Namespace) -> None:
    async with open_bus(args.url) as bus:
        try:
            got = await jobs.result(bus, args.queue, args.job_id, timeout_s=args.timeout_s)
        except JobError as exc:
            print(f"{type(exc).__name__} {exc}", flush=True)
            return
    print(f"result {got.decode() if got is not None else '-'}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("worker")
    w.add_argument("url")
    w.add_argument("queue")
    w.add_argument("--handle-ms", type=int, default=0)
    w.add_argument("--lease-ms", type=int, default=30_000)
    w.add_argument("--concurrency", type=int, default=10)
    w.add_argument("--metronome", action="store_true")
    p = sub.add_parser("produce")
    p.add_argument("url")
    p.add_argument("queue")
    p.add_argument("count", type=int)
    m = sub.add_parser("metronome")
    m.add_argument("url")
    m.add_argument("queue")
    r = sub.add_parser("register")
    r.add_argument("url")
    r.add_argument("queue")
    r.add_argument("name")
    r.add_argument("every_ms", type=int)
    r.add_argument("template")
    w = sub.add_parser("wait-result")
    w.add_argument("url")
    w.add_argument("queue")
    w.add_argument("job_id")
    w.add_argument("timeout_s", type=float)
    s = sub.add_parser("sleeper")
    s.add_argument("url")
    s.add_argument("queue")
    s.add_argument("--lease-ms", type=int, default=30_000)
    args = parser.parse_args()
    modes = {"worker": worker, "produce": produce, "metronome": metronome, "register": register,
             "wait-result": wait_result, "sleeper": sleeper}  # fmt: skip
    trio.run(modes[args.mode], args)


if __name__ == "__main__":
    sys.exit(main())
