"""A worker process for the queue-wide cap test (``test_queue_control``):

    python -m tests.echomq_trio.cap_proc URL QUEUE [--handle-ms N] [--concurrency N]

Each handler, as it starts, reads the queue's jobs in flight (``ZCARD`` of ``active``) on the
server and raises the high-water mark ``hwm_key(queue)`` to it, in one script (so the mark is
what the server held, not what a worker believes), then waits ``handle-ms`` and acks. Prints
``ready`` once claiming.
"""

from __future__ import annotations

import argparse

import trio

from echomq_trio import Consumer, Job, open_bus
from echomq_trio.keys import queue_keys
from echomq_trio.transport import Transport

# KEYS[1] the queue's active set, KEYS[2] the mark (same slot). Returns the jobs in flight now.
MARK = """
local n = redis.call('ZCARD', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n
"""


def hwm_key(queue: str) -> str:
    return queue_keys(queue).app("test-hwm")


async def mark(transport: Transport, queue: str) -> int:
    """Raise the mark to the jobs in flight now, on the server; returns them."""
    k = queue_keys(queue)
    return int(await transport.command("EVAL", MARK, "2", k.active, hwm_key(queue)))


async def worker(args: argparse.Namespace) -> None:
    async with open_bus(args.url) as bus:

        async def handler(job: Job) -> None:
            await mark(bus.transport, args.queue)
            await trio.sleep(args.handle_ms / 1000)

        consumer = Consumer(bus, args.queue, handler, concurrency=args.concurrency)
        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            print("ready", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("queue")
    parser.add_argument("--handle-ms", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    trio.run(worker, parser.parse_args())


if __name__ == "__main__":
    main()
