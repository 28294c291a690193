"""A notification worker process for the pipeline tests.

    python -m tests.codemojex.notify.proc URL QUEUE API_URL TOKEN SCALE [--lease-ms N]
        [--margin-ms N]

Runs a ``NotificationWorker`` and a ``Metronome`` on QUEUE against the Bot API at API_URL, with
the default limits made SCALE times faster; prints ``ready``.
"""

from __future__ import annotations

import argparse

import trio

from codemojex.notify.limits import Limits
from codemojex.notify.rate_limiter import RateLimiter
from codemojex.notify.telegram import open_bot
from codemojex.notify.worker import NotificationWorker
from echomq_trio import Metronome, open_bus

MARGIN_MS = 200  # covers arrival jitter on a loaded 2-core machine (windows are 100-300 ms)


async def run(args: argparse.Namespace) -> None:
    async with open_bus(args.url) as bus, open_bot(args.token, args.api_url) as bot:
        limits = Limits().scaled(args.scale)
        limiter = RateLimiter(bus, limits, tag=args.queue, margin_ms=args.margin_ms)
        worker = NotificationWorker(bus, bot, limiter, queue=args.queue, lease_ms=args.lease_ms)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await nursery.start(Metronome(bus, args.queue, beat_ms=100).run)
            print("ready", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("queue")
    p.add_argument("api_url")
    p.add_argument("token")
    p.add_argument("scale", type=float)
    p.add_argument("--lease-ms", type=int, default=15_000)
    p.add_argument("--margin-ms", type=int, default=MARGIN_MS)
    trio.run(run, p.parse_args())


if __name__ == "__main__":
    main()
